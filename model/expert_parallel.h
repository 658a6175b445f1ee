// Expert parallelism (docs/model.md, "Mixture of experts"): each MoE layer's experts split over
// the E members of an expert group, member j holding experts [j N/E, (j + 1) N/E) of N (with T
// tensor ranks, of its tensor rank's fold of N/T: model/moe_sublayer.cc). Every
// member routes its own tokens (the router is whole everywhere); the rows each member routes to
// another's experts go there and come back by all-to-all, sizes exchanged first.
//
// Exact by construction: member j runs, for each source member s in turn and each of its
// experts, the GEMMs that s would run over the same rows with all experts local (the same rows,
// the same shapes), so every output row has the bits of one member holding every expert. The
// experts' weight gradients are kept per source: source 0's in Param::grad, the others' in
// accumulators beside it (ExpertGradSources, model/layer.h), each the sum over the step's
// micro-batches that s alone would have accumulated. FoldExpertGradSources adds them in source
// order, the bits of the replicas' all-reduce (summed in rank order) of an E = 1 run, so E = 1, 2,
// 4 train the same numbers. The price: the experts' gradients take the memory of all N experts on
// every member (the parameters and the optimizer state the memory of N/E).
//
// model/ knows no transport: the worker implements ExpertGroup over its comm/ group, tests over
// threads.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/layer.h"

namespace baton {

class ExpertGroup {
 public:
  virtual ~ExpertGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // to[j] (contiguous) goes to member j; from[j] (contiguous, the shape member j sends this
  // member) receives it; to[rank()] is copied into from[rank()]. Tensors with no elements move
  // nothing. Every member calls it, in the same order as the others.
  virtual void AllToAll(const std::vector<Tensor>& to, const std::vector<Tensor>& from) = 0;
};

inline int ExpertRank(const ExpertGroup* group) { return group ? group->rank() : 0; }
inline int ExpertSize(const ExpertGroup* group) { return group ? group->size() : 1; }

// Each ExpertGradSources' param.grad += others[1], += others[2], ... (f32, elementwise, in source
// order), and the accumulators zeroed for the next step. Called once a step, after the last
// backward.
void FoldExpertGradSources(Backend& backend, const std::vector<ExpertGradSources>& sources);

}  // namespace baton
