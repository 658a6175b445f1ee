// The lowering: the passes that turn a compute schedule (generated, or loaded from a file) into
// the program every stage's engine runs, as a list the planner applies in order. A new pass
// (ZeRO-3's unshard and reshard actions, say) is one more entry; every pass's output is checked
// by the validator, and a failure names the pass.
//
// Passes are pure functions of the schedule (scheduler/communication.h holds the two of today).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "scheduler/schedule.h"

namespace baton {

struct LoweringPass {
  std::string name;  // "insert communication": how errors name it
  std::function<Schedule(const Schedule&)> run;
};

// What MakePlan runs, in order, on the training and the evaluation programs:
//  1. "insert communication": SEND/RECV actions where a compute schedule has none, placed
//     rendezvous-safe (CommPlacement::kRendezvousSafe): a RECV sits where its data is produced;
//     a schedule loaded with its own SEND/RECV actions keeps them;
//  2. "post receives early": each RECV posted one compute action earlier (PostReceivesEarly),
//     so that sends complete before the next compute (worker/engine.h) and every rank's memory
//     peak is deterministic.
std::vector<LoweringPass> RuntimeLowering();

// Applies `passes` in order, validating each result (CheckValid). Throws baton::Error
// "PASS: MESSAGE" naming the pass that failed or produced an invalid program; the input is
// validated first when it already has SEND/RECV actions (as "input").
Schedule Lower(Schedule schedule, const std::vector<LoweringPass>& passes);

}  // namespace baton
