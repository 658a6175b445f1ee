// The rows of a mixture-of-experts layer's experts (see expert_rows.h).
#include "model/expert_rows.h"

#include "model/ops.h"

namespace baton::model_ops {
namespace {

// Rows [from_at[j], from_at[j + 1]) of `from` go to member j, which puts them at rows
// [to_at[i], to_at[i + 1]) of its `to` (i: this member).
void MoveRows(ExpertGroup& group, const Tensor& from, const std::vector<int64_t>& from_at,
              Tensor& to, const std::vector<int64_t>& to_at) {
  std::vector<Tensor> send, receive;
  for (int j = 0; j < group.size(); ++j) {
    send.push_back(
        from.Slice(0, from_at[static_cast<size_t>(j)], from_at[static_cast<size_t>(j) + 1]));
    receive.push_back(
        to.Slice(0, to_at[static_cast<size_t>(j)], to_at[static_cast<size_t>(j) + 1]));
  }
  group.AllToAll(send, receive);
}

}  // namespace

Tensor ExpertMatrix(const Tensor& stacked, int64_t e) {
  return stacked.Slice(0, e, e + 1).View({stacked.size(1), stacked.size(2)});
}

RowPlan PlanRows(Backend& backend, const std::vector<int64_t>& offsets, int64_t first, int64_t held,
                 ExpertGroup* group) {
  RowPlan plan;
  const int64_t begin = offsets[static_cast<size_t>(first)];
  const int64_t end = offsets[static_cast<size_t>(first + held)];
  if (group == nullptr) {  // this rank's experts, over its routed rows
    for (int64_t e = 0; e < held; ++e) {
      const size_t global = static_cast<size_t>(first + e);
      plan.blocks.push_back({offsets[global] - begin, offsets[global + 1] - begin, e, 0});
    }
    plan.used = end - begin;
    return plan;
  }
  // The group splits this rank's experts (all of them, or its tensor rank's fold): member d
  // holds [first + d local, first + (d + 1) local), rows [send[d], send[d + 1]) of the routed
  // rows here.
  plan.group = group;
  const int members = group->size();
  const int64_t local = held / members;
  std::vector<Tensor> to, from;
  for (int d = 0; d < members; ++d) {
    const int64_t theirs = first + d * local;
    plan.send.push_back(offsets[static_cast<size_t>(theirs)] - begin);
    std::vector<int32_t> counts;
    for (int64_t e = theirs; e < theirs + local; ++e) {
      counts.push_back(static_cast<int32_t>(offsets[static_cast<size_t>(e) + 1] -
                                            offsets[static_cast<size_t>(e)]));
    }
    to.push_back(ToDevice(backend, counts, {local}, DType::kI32));
    from.push_back(NewTensor(backend, {local}, DType::kI32, MemCategory::kWorkspace));
  }
  plan.send.push_back(end - begin);
  group->AllToAll(to, from);
  int64_t at = 0;
  for (int s = 0; s < members; ++s) {
    plan.receive.push_back(at);
    std::vector<int32_t> counts = ToHostI32(backend, from[static_cast<size_t>(s)]);
    // The ledger-only backend reads no counts: it books the worst routing, every member's routed
    // rows all sent to this member's first expert.
    if (from[static_cast<size_t>(s)].is_meta()) {
      counts.assign(counts.size(), 0);
      counts.front() = static_cast<int32_t>(end - begin);
    }
    for (int64_t l = 0; l < local; ++l) {
      plan.blocks.push_back({at, at + counts[static_cast<size_t>(l)], l, s});
      at += counts[static_cast<size_t>(l)];
    }
  }
  plan.receive.push_back(at);
  plan.used = at;
  return plan;
}

Tensor ToExperts(Backend& backend, const RowPlan& plan, const Tensor& rows, MemCategory category) {
  if (plan.group == nullptr) return rows;
  Tensor out = NewTensor(backend, {plan.received(), rows.size(1)}, rows.dtype(), category);
  MoveRows(*plan.group, rows, plan.send, out, plan.receive);
  return out;
}

Tensor FromExperts(Backend& backend, const RowPlan& plan, const Tensor& ran, int64_t rows,
                   MemCategory category) {
  if (plan.group == nullptr) return ran;
  Tensor out = NewTensor(backend, {rows, ran.size(1)}, ran.dtype(), category);
  MoveRows(*plan.group, ran, plan.receive, out, plan.send);
  return out;
}

void ExpertGemms(Backend& backend, const RowPlan& plan, const Tensor& in, const Tensor& weights,
                 bool trans, Tensor& out) {
  for (const ExpertBlock& b : plan.blocks) {
    if (b.begin == b.end) continue;
    Tensor block = out.Slice(0, b.begin, b.end);
    backend.Matmul(in.Slice(0, b.begin, b.end), false, ExpertMatrix(weights, b.expert), trans,
                   block, false);
  }
}

void ExpertWeightGrads(Backend& backend, const RowPlan& plan, const Tensor& lhs, const Tensor& rhs,
                       Tensor& grad, const Tensor& others) {
  for (const ExpertBlock& b : plan.blocks) {
    if (b.begin == b.end) continue;
    const Tensor stacked =
        b.source == 0 ? grad : others.Slice(0, b.source - 1, b.source).View(grad.shape());
    Tensor g = ExpertMatrix(stacked, b.expert);
    backend.Matmul(lhs.Slice(0, b.begin, b.end), true, rhs.Slice(0, b.begin, b.end), false, g,
                   true);
  }
}

}  // namespace baton::model_ops
