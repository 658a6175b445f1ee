#include "scheduler/lowering.h"

#include <utility>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/validator.h"

namespace baton {

std::vector<LoweringPass> RuntimeLowering() {
  return {
      {"insert communication",
       [](const Schedule& s) {
         return HasCommunication(s) ? s : InsertCommunication(s, CommPlacement::kRendezvousSafe);
       }},
      {"post receives early", [](const Schedule& s) { return PostReceivesEarly(s); }},
  };
}

Schedule Lower(Schedule schedule, const std::vector<LoweringPass>& passes) {
  std::string stage = "input";
  try {
    if (HasCommunication(schedule)) CheckValid(schedule);
    for (const LoweringPass& pass : passes) {
      stage = pass.name;
      schedule = pass.run(schedule);
      CheckValid(schedule);
    }
  } catch (const Error& e) {
    BATON_FAIL("{}: {}", stage, e.what());
  }
  return schedule;
}

}  // namespace baton
