// The rows of a mixture-of-experts layer's experts (internal to model/; model/moe_sublayer.cc):
// where each routed row is computed, here or, across an expert group (model/expert_parallel.h),
// on the member holding its expert, and the per-expert GEMMs over those rows, one per block of
// rows of one expert (and one source member).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/expert_parallel.h"

namespace baton::model_ops {

// Rows [begin, end) that one expert (`expert`: its index in this member's stacked weights) runs
// for one source member of the expert group (0 without a group).
struct ExpertBlock {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t expert = 0;
  int source = 0;
};

// Where a micro-batch's routed rows are computed. Without an expert group, here: the blocks are
// the routed rows' experts. With one, rows [send[d], send[d + 1]) of the routed rows go to member
// d, and this member's experts run the rows it receives: member s's are rows
// [receive[s], receive[s + 1]) of `received()`, in `blocks` (source-major, then by expert).
struct RowPlan {
  ExpertGroup* group = nullptr;
  std::vector<int64_t> send, receive;
  std::vector<ExpertBlock> blocks;
  int64_t received() const { return receive.back(); }
  // The rows this member's experts compute: the routed ones kept, or every one received.
  int64_t used = 0;
};

// Expert e's matrix of a stacked (E, a, b) parameter tensor, as (a, b).
Tensor ExpertMatrix(const Tensor& stacked, int64_t e);

// The plan of a micro-batch's routed rows of experts [first, first + held) (a routing's
// `offsets`: expert e's rows are [offsets[e], offsets[e + 1])), renumbered from offsets[first];
// with an expert group of E splitting those experts, each member's counts of rows for each of
// member d's experts go to d first (an all-to-all of held/E i32 per member pair).
RowPlan PlanRows(Backend& backend, const std::vector<int64_t>& offsets, int64_t first, int64_t held,
                 ExpertGroup* group);

// The rows this member's experts run for `rows` (this member's routed rows, (R, C)): `rows`
// itself without a group, else (received(), C) under `category` from every member.
Tensor ToExperts(Backend& backend, const RowPlan& plan, const Tensor& rows, MemCategory category);

// The experts' results for this member's routed rows (R = `rows`, C) under `category`, from the
// rows its experts ran (`ran`, (received(), C)) on every member: `ran` itself without a group.
Tensor FromExperts(Backend& backend, const RowPlan& plan, const Tensor& ran, int64_t rows,
                   MemCategory category);

// out rows of each block = in rows of the block @ its expert's matrix of `weights` (trans: its
// transpose). One GEMM per block with rows.
void ExpertGemms(Backend& backend, const RowPlan& plan, const Tensor& in, const Tensor& weights,
                 bool trans, Tensor& out);

// Each block's expert's weight gradient += the block's rows of lhs^T @ its rows of rhs: into
// `grad` for source 0, into source s's accumulator (others[s - 1]) for the others.
void ExpertWeightGrads(Backend& backend, const RowPlan& plan, const Tensor& lhs, const Tensor& rhs,
                       Tensor& grad, const Tensor& others);

}  // namespace baton::model_ops
