// What the generator files (generators.cc, generators_v.cc) share; not part of the public API.
#pragma once

#include <string>
#include <vector>

#include "scheduler/schedule.h"

namespace baton::generators_internal {

// A schedule named `name` with one empty list per stage. Throws baton::Error when stages,
// microbatches or chunks is below 1, or when the schedule would be unreasonably large.
Schedule EmptySchedule(std::string name, int stages, int microbatches, int chunks,
                       ChunkLayout layout = ChunkLayout::kLoop);

// Appends actions to one stage's list, dropping those of micro-batches >= `microbatches`: a
// generator that needs a minimum number of micro-batches schedules a padded count and deletes the
// padding, which keeps a deadlock-free schedule deadlock-free (docs/schedules.md, "interleaved").
struct StageProgram {
  std::vector<Action>* actions;
  int stage;
  int microbatches;
  void Add(ActionKind kind, int microbatch, int chunk = 0) {
    if (microbatch < microbatches) actions->push_back(Action{stage, kind, microbatch, chunk});
  }
};

}  // namespace baton::generators_internal
