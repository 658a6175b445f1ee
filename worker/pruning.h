// Magnitude pruning while training (`prune.*`, docs/memory.md "Pruning"), after NVIDIA's ASP
// recipe: train dense to step prune.at_step, prune once by magnitude, then keep the pruned weights
// at zero with masks while training goes on.
//
// The trainer gives the pruned matrices (model/prune.h TakesPruneMask) a mask of ones at the start
// (so the memory plan books them), masks the gradients after every backward, and the weights
// after every optimizer step. At the end of step at_step, PruneByMagnitude picks the weights
// (from the f32 master where there is one) and zeroes them together with their master and Adam
// moments, so the optimizer keeps them exactly zero (a zero gradient on zero moments is a zero
// update, and decay keeps zero) and a checkpoint may drop them (docs/checkpoints.md).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "config/config.h"
#include "kernels/backend.h"
#include "worker/optimizer.h"

namespace baton {

struct PruneCount {
  int matrices = 0;
  int64_t pruned = 0;  // weights set to zero
  int64_t total = 0;   // weights of the pruned matrices
};

// grad = 0 where the param's mask is 0, for every param with a mask.
void MaskGradients(Backend& backend, const std::vector<Param*>& params);
// value (and its f32 master) = 0 where the mask is 0: the elements each optimizer slot steps
// (under ZeRO the replica's shard, which the all-gather then hands the others; worker/
// gradient_sync.h).
void MaskWeights(Backend& backend, const Optimizer& optimizer);
// The whole f32 values of `p` as the magnitudes are taken from (its master where it has one),
// on the host; `slot`: this rank's slot for it, null when it steps none of it (ZeRO: another
// replica's). Every replica of a stage calls it for the same parameters in the same order. On
// a ledger-only backend it books what it would and returns nothing.
using WholeValues = std::function<std::vector<float>(const Param& p, const Optimizer::Slot* slot)>;
// Prunes every masked one of `params` (distinct by value) as prune.* says (see above), its
// magnitudes from `whole`: every rank sets the whole mask, and zeroes what its slot steps
// (value, master, moments).
PruneCount PruneByMagnitude(Backend& backend, Optimizer& optimizer,
                            const std::vector<Param*>& params, const PruneConfig& prune,
                            const WholeValues& whole);

}  // namespace baton
