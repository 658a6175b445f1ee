// Which steps a run saves after (worker/checkpoint_steps.h), the figures the worker and the memory
// planner both go by: CheckpointAfterStep's steps, counted by CheckpointsSaved and summarised by
// SavesACheckpoint and SavesBeforeTheLastStep, for every small combination of the keys.
#include "worker/checkpoint_steps.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(CheckpointStepsTest, TheSummariesAgreeWithTheStepsSaved) {
  for (int64_t steps = 1; steps <= 12; ++steps) {
    for (int64_t every = 0; every <= 14; ++every) {
      for (const bool final_checkpoint : {false, true}) {
        Config config;
        config.train.steps = steps;
        config.output.checkpoint_every = every;
        config.output.final_checkpoint = final_checkpoint;
        int64_t saved = 0;
        bool before_last = false;
        for (int64_t step = 1; step <= steps; ++step) {
          if (!CheckpointAfterStep(config, step)) continue;
          ++saved;
          before_last = before_last || step < steps;
        }
        SCOPED_TRACE(testing::Message()
                     << "steps " << steps << ", every " << every << ", final " << final_checkpoint);
        EXPECT_EQ(CheckpointsSaved(config), saved);
        EXPECT_EQ(SavesACheckpoint(config), saved > 0);
        EXPECT_EQ(SavesBeforeTheLastStep(config), before_last);
      }
    }
  }
  Config config;
  config.train.steps = 10;
  config.output.checkpoint_every = 5;
  EXPECT_EQ(CheckpointsSaved(config), 2);  // 5 and 10, the last once
}

}  // namespace
}  // namespace baton
