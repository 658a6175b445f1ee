// Runs a whole planned job inside this process: one thread per rank, an in-process FakeHub
// for communication, no coordinator. Same engine, trainer and numbers as real processes; for
// tests (equivalence, measured memory) and the memory planner's calibration.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/memory.h"
#include "plan/plan.h"
#include "worker/trainer.h"

namespace baton {

struct InProcessRank {
  std::vector<StepRecord> steps;
  MemoryFigures peak;  // the rank's ledger peaks over the whole run (setup and saves included)
  std::vector<std::pair<int, uint64_t>> digests;
  std::map<std::string, uint64_t> tied_digests;  // Trainer::TiedParamDigests after the last step
  int peak_stashed_microbatches = 0;             // most (micro-batch, chunk) stashes alive at once
};

struct InProcessResult {
  std::vector<InProcessRank> ranks;  // by world rank (Plan::WorldRank)
  // From the rank holding the head (the last replica's; Plan::head_stage): the loss of every
  // step, and the eval loss of every step that evaluated.
  std::vector<float> losses;
  std::vector<double> eval_losses;
  std::string param_checksum;  // of replica 0's layers (each tensor rank's parts)
};

// Trains `plan` for plan.config.train.steps steps, gathering each checkpoint's tensors after the
// steps a worker saves after (CheckpointAfterStep; nothing is written), so that the peaks are a
// worker's. Throws the first rank's error, if any. GPU plans (device.type cuda) must have one
// stage.
InProcessResult RunInProcess(const Plan& plan);

}  // namespace baton
