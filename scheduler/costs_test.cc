#include "scheduler/costs.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "core/error.h"

namespace baton {
namespace {

TEST(CostsTest, EmptyTextGivesTheDefaults) {
  const Costs costs = ParseCosts("");
  EXPECT_EQ(costs.defaults.forward, 1);
  EXPECT_EQ(costs.defaults.backward, 2);
  EXPECT_EQ(costs.defaults.backward_input, 1);
  EXPECT_EQ(costs.defaults.backward_weight, 1);
  EXPECT_EQ(costs.defaults.communication, 0);
  EXPECT_TRUE(costs.per_virtual_stage.empty());
  EXPECT_EQ(costs, Costs{});
}

TEST(CostsTest, EveryKeyIsParsed) {
  const Costs costs = ParseCosts("F=1.5, B=3,I=0.25,W=2,COMM=0.1,POST=0.02");
  EXPECT_EQ(costs.defaults.forward, 1.5);
  EXPECT_EQ(costs.defaults.backward, 3);
  EXPECT_EQ(costs.defaults.backward_input, 0.25);
  EXPECT_EQ(costs.defaults.backward_weight, 2);
  EXPECT_EQ(costs.defaults.communication, 0.1);
  EXPECT_EQ(costs.defaults.post, 0.02);
}

TEST(CostsTest, PerStageOverrideStartsFromAllDefaults) {
  const Costs costs = ParseCosts("F@2=3,B=4");
  EXPECT_EQ(costs.For(2).forward, 3);
  EXPECT_EQ(costs.For(2).backward, 4);  // the default given after the override still applies
  EXPECT_EQ(costs.For(0).forward, 1);
  EXPECT_EQ(costs.For(0).backward, 4);
}

TEST(CostsTest, CommunicationActionsTakeTheirPostAsRankTime) {
  ActionCosts costs{1, 2, 3, 4, 5};
  EXPECT_EQ(costs.Of(ActionKind::kForward), 1);
  EXPECT_EQ(costs.Of(ActionKind::kBackwardWeight), 4);
  EXPECT_EQ(costs.Of(ActionKind::kSendForward), 0);  // by default posting is free
  EXPECT_EQ(costs.Of(ActionKind::kRecvBackward), 0);
  costs.post = 0.5;
  EXPECT_EQ(costs.Of(ActionKind::kSendBackward), 0.5);
  EXPECT_EQ(costs.Of(ActionKind::kRecvForward), 0.5);
  EXPECT_EQ(costs.Of(ActionKind::kForward), 1);
}

TEST(CostsTest, BadInputIsRejected) {
  for (const char* text : {"X=1", "F", "F=", "F=abc", "F=-1", "F=1,F=2", "F=1,", "F@x=1", "F@-1=1",
                           "F=1e999", "F=nan", "=1"}) {
    EXPECT_THROW(ParseCosts(text), Error) << text;
  }
}

}  // namespace
}  // namespace baton
