// The collectives a layer issues over its stage's tensor group (model/tensor_parallel.h), as the
// layers themselves declare them: per micro-batch forward and backward, in the order issued, and
// per step (sequence parallelism's norm gradients, Trainer's "tensor-partial sums" pass). The
// tuner prices them (planner/measured_costs.cc); planner/collectives_test.cc checks them against
// what a real step issues. With one tensor rank a layer issues none.
//
// A gather (and the row statistics) is an all-gather (point to point, TensorGroup::AllGather); a
// scatter is a reduce-scatter, whose bits are the all-reduce's (TensorGroup::ReduceScatterSum);
// the others are all-reduces of their whole tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/cost.h"
#include "model/dims.h"
#include "model/graph.h"

namespace baton {

struct TensorCollective {
  enum class Kind {
    kSum,                 // a row-parallel output, a column-parallel input's gradient
    kGatherSequence,      // sequence parallelism: the whole (B,S,C) from every rank's part
    kScatterSequenceSum,  // sequence parallelism: this rank's part of a sum
    kRowStats,            // the vocabulary-parallel loss's (T,N,3) row statistics, gathered
    kGradientSum,         // per step: a sequence-partial parameter's gradient (f32)
  };
  Kind kind;
  int64_t elements;  // of the whole tensor: summed, gathered into or scattered from
  DType dtype;
  int64_t bytes() const { return elements * static_cast<int64_t>(SizeOf(dtype)); }
  bool operator==(const TensorCollective&) const = default;
};

struct LayerCollectives {
  std::vector<TensorCollective> forward;   // per micro-batch
  std::vector<TensorCollective> backward;  // per micro-batch: all in backward-input (the weight
                                           // part issues none); a recompute adds `forward`
  std::vector<TensorCollective> step_end;  // per step
  void Append(const LayerCollectives& other);
};

// The tensor layout a layer runs under.
struct TensorLayout {
  int tensor = 1;  // T
  bool sequence_parallel = false;
};

LayerCollectives CollectivesOf(const LayerSpec& spec, const ModelDims& dims,
                               const MicroBatchShape& shape, const TensorLayout& layout);

}  // namespace baton
