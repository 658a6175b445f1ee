// The lowering as a list of passes: the runtime's two, in order, with every result validated and
// a failing pass named.
#include "scheduler/lowering.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(LoweringTest, TheRuntimeLoweringInsertsCommunicationThenPostsReceivesEarly) {
  const Schedule compute = OneFOneB(4, 8);
  const std::vector<LoweringPass> passes = RuntimeLowering();
  ASSERT_EQ(passes.size(), 2u);
  EXPECT_EQ(passes[0].name, "insert communication");
  EXPECT_EQ(passes[1].name, "post receives early");
  EXPECT_EQ(Lower(compute, passes),
            PostReceivesEarly(InsertCommunication(compute, CommPlacement::kRendezvousSafe)));
}

TEST(LoweringTest, AScheduleWithItsOwnCommunicationKeepsIt) {
  // Just-in-time placement, as a loaded file might carry: not moved to rendezvous-safe places.
  const Schedule loaded = InsertCommunication(OneFOneB(2, 4), CommPlacement::kJustInTime);
  EXPECT_EQ(Lower(loaded, RuntimeLowering()), PostReceivesEarly(loaded));
}

TEST(LoweringTest, ANewPassIsOneEntryAndAnInvalidResultNamesIt) {
  std::vector<LoweringPass> passes = RuntimeLowering();
  int ran = 0;
  passes.push_back({"count", [&](const Schedule& s) {
                      ++ran;
                      return s;
                    }});
  Lower(OneFOneB(2, 2), passes);
  EXPECT_EQ(ran, 1);
  // A pass that loses stage 1's first receive leaves a send without its receive.
  passes.push_back({"drop a receive", [](const Schedule& s) {
                      Schedule out = s;
                      std::vector<Action>& program = out.per_stage[1];
                      program.erase(std::find_if(
                          program.begin(), program.end(),
                          [](const Action& a) { return a.kind == ActionKind::kRecvForward; }));
                      return out;
                    }});
  try {
    Lower(OneFOneB(2, 2), passes);
    FAIL() << "an invalid program was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("drop a receive: "));
  }
}

}  // namespace
}  // namespace baton
