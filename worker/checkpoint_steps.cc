#include "worker/checkpoint_steps.h"

namespace baton {

bool CheckpointAfterStep(const Config& config, int64_t step) {
  const int64_t every = config.output.checkpoint_every;
  return (step == config.train.steps && config.output.final_checkpoint) ||
         (every > 0 && step % every == 0);
}

bool SavesACheckpoint(const Config& config) { return CheckpointsSaved(config) > 0; }

bool SavesBeforeTheLastStep(const Config& config) {
  const int64_t every = config.output.checkpoint_every;
  return every > 0 && every < config.train.steps;
}

int64_t CheckpointsSaved(const Config& config) {
  const int64_t every = config.output.checkpoint_every;
  const int64_t steps = config.train.steps;
  const int64_t intermediate = every > 0 ? steps / every : 0;
  const bool last_is_one = every > 0 && steps % every == 0;
  return intermediate + (config.output.final_checkpoint && !last_is_one ? 1 : 0);
}

bool WritesCheckpointFiles(const ParallelLayout& layout, int rank) {
  return layout.ReplicaOf(rank) == 0 && layout.TensorOf(rank) == 0;
}

}  // namespace baton
