// Tensor parallelism inside a stage (parallel.tensor T; docs/parallel.md, "Tensor parallelism"):
// how a parameter is cut across the T ranks of a stage, and the collective its layers call.
//
// Megatron's cut: attention's c_attn and the MLP's c_fc are column-parallel (each rank holds
// its heads' query, key and value columns; its part of the hidden units), their c_proj are
// row-parallel (the matching rows; the output is summed across the group), the token embedding
// and the LM head are vocab-parallel (each rank holds a range of vocabulary rows), and the rest
// (norms, the row-parallel biases, positions) is replicated: every rank holds all of it and
// computes the same gradient for it.
//
// A cut tensor's dimension `dim` is made of consecutive sections (c_attn's columns: queries,
// keys, values); rank t of T holds part t of every section, the parts laid end to end in section
// order. Part t of a section of n is [n t / T, n (t + 1) / T): equal parts when T divides n (the
// heads and hidden units must), near-equal otherwise (the vocabulary).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"

namespace baton {

class TensorGroup;

// Which group a cut tensor's parts lie across: the stage's tensor ranks, or its expert group
// (model/expert_parallel.h: the stacked experts cut along dimension 0; with tensor ranks too,
// into T E parts, tensor rank t's E consecutive ones over its expert group).
enum class SplitOver { kTensor, kExperts };

struct TensorSplit {
  int dim = -1;                   // the cut dimension; -1: replicated
  std::vector<int64_t> sections;  // sizes along `dim` of the full tensor, in order
  int part = 0;                   // which part this rank holds
  int parts = 1;                  // T (T E across an expert group)
  SplitOver over = SplitOver::kTensor;
  bool cut() const { return dim >= 0 && parts > 1; }
  bool operator==(const TensorSplit&) const = default;
};

// [begin, end) of part t of T of a section of n.
std::pair<int64_t, int64_t> PartOf(int64_t n, int t, int parts);

// The full tensor's ranges along `split.dim` that part `split.part` holds: (begin, size) per
// section, in order.
std::vector<std::pair<int64_t, int64_t>> PartRanges(const TensorSplit& split);

// The shape of the part `split.part` of a tensor of shape `full`; `full` itself when not cut.
// Throws unless the sections add up to full[dim].
Shape PartShape(const Shape& full, const TensorSplit& split);

// The whole tensor's shape, from the shape of a part of it (`part` itself when not cut).
Shape WholeShape(const Shape& part, const TensorSplit& split);

// Host copies between a full tensor (row-major, `full` shape, elements of `element_bytes`) and
// part `split.part` of it (row-major, PartShape).
void ExtractPart(const void* full, const Shape& full_shape, size_t element_bytes,
                 const TensorSplit& split, void* part);
void InsertPart(const void* part, const Shape& full_shape, size_t element_bytes,
                const TensorSplit& split, void* full);

// The tensor-parallel group of this rank's stage, as the layers see it: its size, this rank's
// place, and in-place collectives over it. Implemented by the worker over its comm/ Group
// (model/ knows no transport); every rank of the group calls them in the same order.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sequence parallelism (parallel.sequence_parallel): the activations between the layers'
  // cut parts are cut along the sequence too (GatherSequence, ScatterSequenceSum).
  virtual bool sequence_parallel() const = 0;
  // t = sum over the group, in rank order; the same bits on every member.
  virtual void AllReduceSum(Tensor& t) = 0;
  // `whole` (contiguous) is cut along `dim` into size() equal slices, slice t being rank t's.
  // AllGather: `whole` holds this rank's slice at its place; on return every slice holds the
  // bits its rank had (moved, not summed).
  virtual void AllGather(Tensor& whole, int dim) = 0;
  // On return this rank's slice of `whole` holds the group's sum of that slice: AllReduceSum's
  // bits. The other slices hold no promised values.
  virtual void ReduceScatterSum(Tensor& whole, int dim) = 0;
};

// Sequence parallelism (parallel.sequence_parallel): a (B, S, C) activation cut along the
// sequence into T equal parts (S/T positions each), rank t holding part t.
// GatherSequence: the whole (B, S, C), booked under `category`, from every rank's part
// (B, S/T, C): an all-gather along the sequence, every part's bits as its rank had them.
// ScatterSequenceSum: this rank's part (B, S/T, C), booked under `category`, of the group's sum
// of `full` (B, S, C) (reduce-scattered in place: every rank's part has the bits of the whole
// all-reduce, so any layout of the sum agrees).
Tensor GatherSequence(Backend& backend, TensorGroup& group, const Tensor& part,
                      MemCategory category);
Tensor ScatterSequenceSum(Backend& backend, TensorGroup& group, Tensor& full, MemCategory category);
// What a layer that needs the whole sequence (a column-parallel linear, the LM head) reads:
// GatherSequence of x under sequence parallelism, else x itself. `group` may be null.
Tensor WholeSequence(Backend& backend, TensorGroup* group, const Tensor& x, MemCategory category);

// The rank and size of `group`, or 0 of 1 when there is none (T = 1).
inline int TensorRank(const TensorGroup* group) { return group ? group->rank() : 0; }
inline int TensorSize(const TensorGroup* group) { return group ? group->size() : 1; }
inline bool SequenceParallel(const TensorGroup* group) {
  return group != nullptr && group->sequence_parallel();
}

}  // namespace baton
