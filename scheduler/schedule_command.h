// The logic of `baton schedule`: build or load a schedule, insert communication, validate it,
// simulate it and print it. The CLI front end (flags, help) lives with the `baton` binary; this is
// the part that can be tested without a process.
#pragma once

#include <ostream>
#include <string>

namespace baton {

struct ScheduleCommandOptions {
  int stages = 0;                 // --stages P (required unless --file)
  int microbatches = 0;           // --microbatches M (required unless --file)
  std::string schedule = "1f1b";  // --schedule NAME: one of ScheduleNames() (generators.h)
  // --chunks V; 0 (not given): the least the schedule runs, 2 for interleaved, looped-bfs and the
  // V schedules (which take no other), 1 for the rest.
  int chunks = 0;
  std::string costs;  // --costs "F=1,B=2,I=1,W=1,COMM=0,POST=0[,F@STAGE=...]"; empty = defaults
  // --file custom.csv: the schedule to use instead of a generator (Baton's CSV form or torch's,
  // schedule.h). If it has no SEND/RECV, communication is inserted. Nonzero stages/microbatches
  // must then match it.
  std::string file;
  // --format text | csv | torch-csv | json | svg | chrome (torch-csv: compute actions only, in
  // torch.distributed.pipelining's CSV form, schedule.h)
  std::string format = "text";
  // --comm async | rendezvous: the semantics validated against (dry_run.h CommSemantics) and, for
  // generated or compute-only schedules, the SEND/RECV placement (kJustInTime / kRendezvousSafe).
  std::string comm = "async";
};

inline constexpr int kScheduleCommandOk = 0;
inline constexpr int kScheduleCommandInvalidSchedule = 1;  // err has the marked grid
inline constexpr int kScheduleCommandBadArguments = 2;     // err says which option

// Writes the rendering to `out` and diagnostics to `err`; returns one of the codes above.
int RunScheduleCommand(const ScheduleCommandOptions& options, std::ostream& out, std::ostream& err);

}  // namespace baton
