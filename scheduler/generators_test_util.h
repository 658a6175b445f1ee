// Test helpers shared by generators_test.cc and generators_v_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "scheduler/communication.h"
#include "scheduler/schedule.h"
#include "scheduler/validator.h"

namespace baton::generator_testing {

// Stage `stage`'s actions as space-separated text.
inline std::string Row(const Schedule& schedule, int stage) {
  std::string text;
  for (const Action& action : schedule.per_stage[static_cast<size_t>(stage)]) {
    text += (text.empty() ? "" : " ") + ToString(action, schedule.stages, schedule.layout);
  }
  return text;
}

inline std::string Shape(int p, int m) {
  return "p=" + std::to_string(p) + " m=" + std::to_string(m);
}

// Validates `compute` as generated, with communication in both placements, under both send
// semantics where the placement promises them, and after the runtime's lowering
// (PostReceivesEarly), as properties_test.cc does for every generator.
inline void ExpectRunnable(const Schedule& compute) {
  const ValidationResult bare = Validate(compute);
  ASSERT_TRUE(bare) << bare.message;
  const ValidationResult just_in_time =
      Validate(InsertCommunication(compute, CommPlacement::kJustInTime), CommSemantics::kAsync);
  ASSERT_TRUE(just_in_time) << just_in_time.message;
  const Schedule safe = InsertCommunication(compute, CommPlacement::kRendezvousSafe);
  for (const CommSemantics semantics : {CommSemantics::kAsync, CommSemantics::kRendezvous}) {
    const ValidationResult placed = Validate(safe, semantics);
    ASSERT_TRUE(placed) << placed.message;
  }
  if (compute.stages > 1) {
    const ValidationResult lowered = Validate(PostReceivesEarly(safe), CommSemantics::kRendezvous);
    ASSERT_TRUE(lowered) << lowered.message;
  }
}

}  // namespace baton::generator_testing
