// Which steps a run saves a checkpoint after, and which ranks write its files: the one answer
// the worker's saves (job/checkpoint_saver.h) and the memory planner's booking of them share.
#pragma once

#include <cstdint>

#include "config/config.h"
#include "plan/parallel_layout.h"

namespace baton {

// Whether a run saves a checkpoint after `step` (Trainer::CheckpointLayers): its last step's
// under output.final_checkpoint, and every output.checkpoint_every steps' (a stop signal adds
// one after the step it stops at).
bool CheckpointAfterStep(const Config& config, int64_t step);
// Whether a run of config.train.steps steps saves one after any of them.
bool SavesACheckpoint(const Config& config);
// Whether a run saves a checkpoint after a step before its last (so that, under
// output.async_checkpoint, steps run beside a background write and its host copy).
bool SavesBeforeTheLastStep(const Config& config);
// How many checkpoints a run of config.train.steps steps saves (a stop signal aside).
int64_t CheckpointsSaved(const Config& config);
// Whether world rank `rank` writes checkpoint files: replica 0's ranks (the replicas hold the same
// bits), tensor rank 0 of each stage (it writes whole tensors). Under output.async_checkpoint
// these ranks keep a host copy of what they write (CheckpointSnapshot) from their first save on.
bool WritesCheckpointFiles(const ParallelLayout& layout, int rank);

}  // namespace baton
