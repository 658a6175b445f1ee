// A pipeline schedule as data: one action list per stage, and its CSV form.
//
// A worker on stage r runs per_stage[r] front to back, one action at a time; see action.h for what
// each field of an Action means and how chunk maps to virtual stage and peer stage. Generators
// (generators.h) produce *compute-only* schedules (F/B/I/W); InsertCommunication()
// (communication.h) adds the SEND/RECV actions a runtime executes; Validate() (validator.h) checks
// either kind.
//
// CSV form (docs/schedules.md): an optional header line
//   # baton schedule: name=1f1b stages=4 microbatches=8 chunks=1
// (with " layout=v" at its end for the V layout; without it the layout is loop),
// then one line per stage, stage 0 first, each a comma-separated list of actions in text form
// ("F0,SEND_F0,F1,..."). Other lines starting with '#', blank lines and empty cells are ignored.
// Without a header, stages is the number of rows, chunks and microbatches the smallest that hold
// every action, name "custom", and the layout the one under which every row holds the virtual
// stages its actions name (loop when both fit, as when every action is on chunk 0).
//
// torch.distributed.pipelining's CSV form (its _dump_csv / _load_csv) reads the same way: no
// header, one row per rank, every cell with its virtual stage ("0F0", "5I2", "3SEND_F1"), empty
// cells for idle steps, and "(0F7;7B3)OVERLAP_F_B" for an overlapped forward/backward pair, which
// reads as its actions in the order written (Baton runs such a pair in turn). torch's FSDP actions
// (UNSHARD, RESHARD, REDUCE_GRAD) are skipped: Baton gathers and reduces parameters and gradients
// by itself at a step's start and end, not as schedule actions.
// ScheduleToTorchCsv writes that form: every action with its virtual stage, no header, and
// DualPipeV's pairs (an F followed by the full B of the other chunk) as OVERLAP_F_B cells, as
// torch writes its DualPipeV.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/action.h"

namespace baton {

struct Schedule {
  std::string name;
  int stages = 0;        // number of stages p (pipeline processes), NOT virtual stages
  int microbatches = 0;  // m
  int chunks = 1;        // v: model chunks per stage; virtual stages = stages * chunks
  ChunkLayout layout = ChunkLayout::kLoop;     // which virtual stage each chunk is (action.h)
  std::vector<std::vector<Action>> per_stage;  // per_stage[r]: stage r's program, in order

  int num_virtual_stages() const { return stages * chunks; }
  int VirtualStageOf(const Action& action) const { return VirtualStage(action, stages, layout); }
  int StageOf(int virtual_stage) const {
    return StageOfVirtualStage(virtual_stage, stages, layout);
  }
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

// True when any stage has a SEND or RECV action.
bool HasCommunication(const Schedule& schedule);

std::string ScheduleToCsv(const Schedule& schedule);
std::string ScheduleToTorchCsv(const Schedule& schedule);
// Throws baton::Error naming the line on malformed input.
Schedule ScheduleFromCsv(std::string_view text);

// File forms of the above; throw baton::Error when the file can't be read or written.
void SaveScheduleCsv(const Schedule& schedule, const std::string& path);
Schedule LoadScheduleCsv(const std::string& path);

}  // namespace baton
