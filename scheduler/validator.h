// Validator: decides whether a schedule can run, before any process starts.
//
// Checks, in order (the first failure is reported):
//   1. shape: stages, microbatches, chunks >= 1 and one action list per stage;
//   2. every action sits on its own stage's row, with chunk and micro-batch in range;
//   3. every micro-batch is computed exactly once per virtual stage: one F, and either one B or
//      one I and one W; a forward-only schedule (no B, I or W anywhere: evaluation) needs the F;
//   4. every RECV has a SEND of the same message on its peer, and every SEND a RECV;
//   5. a dry run of all stages (dry_run.h) finishes: data dependencies hold (F after the previous
//      virtual stage's F, B/I after its F and the next virtual stage's B/I, W after I, each SEND
//      after its producer, each remote input received before use), each link carries its
//      messages in the same order on both ends, no message is sent or received twice or left
//      unreceived, and nothing deadlocks under the given communication semantics.
// A failure names the offending action and carries the stage x time grid with it marked
// `<-- ERROR HERE`.
#pragma once

#include <string>

#include "scheduler/dry_run.h"
#include "scheduler/schedule.h"

namespace baton {

struct ValidationResult {
  bool ok = true;
  std::string message;  // empty when ok; else one line of reason, then FormatGrid() with the mark
  int stage = -1;       // the offending action's; -1 when ok or when no action is to blame
  int step = -1;

  explicit operator bool() const { return ok; }
};

ValidationResult Validate(const Schedule& schedule,
                          CommSemantics semantics = CommSemantics::kAsync);

// Throws baton::Error carrying Validate()'s message when the schedule is invalid.
void CheckValid(const Schedule& schedule, CommSemantics semantics = CommSemantics::kAsync);

// The schedule as a table: one row per step (position in a stage's list), one column per stage.
// When mark_rank/mark_step name an action, its cell is bracketed and its row ends in
// "<-- ERROR HERE".
std::string FormatGrid(const Schedule& schedule, int mark_rank = -1, int mark_step = -1);

}  // namespace baton
