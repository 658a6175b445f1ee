// The mixture-of-experts sublayer (model/sublayer.h; docs/model.md, "Mixture of experts"), in the
// MLP's place in the blocks model.moe picks:
//   y = x + sum_j w[n,j] E_{c[n,j]}(ln(x)[n]) + g[n] S(ln(x)[n])
// E_e(h) = c_proj_e(silu(gate) * up), [gate | up] = h @ c_fc_e, each expert a SwiGLU MLP; the
// router's logits z = ln(x) @ router pick each token's k experts c[n,j] and weights w[n,j]
// (Route below); S is the shared experts (one SwiGLU MLP of their summed width), g = sigmoid(ln(x)
// @ shared_gate) or 1. Parameters, in order ("h.{i}." prefixed): ln_2.weight (C),
// mlp.router.weight (C, E), mlp.experts.c_fc.weight (E, C, 2I), mlp.experts.c_proj.weight
// (E, I, C), and with shared experts mlp.shared.c_fc.weight (C, 2S), mlp.shared.c_proj.weight
// (S, C), mlp.shared_gate.weight (C, 1).
//
// The routing is decided on the host from the logits (a GPU's read back: N x E values), in a
// fixed order, so a recompute or a backward routes exactly as the forward did. The tokens go to
// their experts' rows (Backend::MoeDispatch: R rows grouped by expert, each expert's in token
// order), one GEMM per expert runs over its block of rows (no per-token GEMM), and the results
// come back weighted (Backend::MoeCombine). The router's losses (load balancing, z-loss) add their
// gradient to the logits' in backward, scaled as the head scales the cross-entropy's.
//
// Expert parallelism (an expert group of E > 1; model/expert_parallel.h): this member holds
// experts [j N/E, (j + 1) N/E) of the stacked parameters. Its routed rows for member d's experts
// (a contiguous run: the rows are grouped by expert) go to d by the group's all-to-all, counts per
// expert first; d runs one GEMM per source member and expert over the rows it got (source-major,
// each source's grouped by expert), the shapes and rows the source would have run itself, and
// sends the results back into the source's routed rows. The backward moves the rows' gradients
// the same way; the experts' weight gradients accumulate per source (ExpertGradSources).
//
// Tensor parallelism (a tensor group of T > 1; docs/parallel.md, "Tensor parallelism"): the
// experts fold over the stage's tensor ranks instead of being cut inside (Megatron's expert
// tensor parallelism of 1): rank t holds whole experts [t N/T, (t + 1) N/T), every rank routes
// the same tokens alike (the router is replicated) and runs the routed rows of its own experts
// only, renumbered from 0 (Routed::slots; the others' are -1, as dropped ones); the shared experts
// are cut as the MLP is. Each rank's branch, its experts' weighted rows and its part of the shared
// experts', is summed over the group (under sequence parallelism: scattered), and backward sums
// the input's gradient likewise; the combine weights' gradient (N,k) and the shared gate's (N,1),
// of which each rank holds the parts of its experts, are summed before the router and the gate
// read them; the replicated router's and gate's share of the input's gradient is added by rank 0
// alone before the sum. With an expert group too (its members the same tensor rank of E
// replicas), the group splits the rank's fold: member j of tensor rank t holds experts
// [(t E + j) N/(T E), (t E + j + 1) N/(T E)), part t E + j of the stacked parameters' T E parts,
// and the rows of rank t's fold move among its group as above.
//
// Stash ("moe." prefix): x, ln, rstd (this rank's part of the sequence under sequence
// parallelism), logits (N,E); unless selective recompute, the experts' fc
// (R,2I), act (R,I) and out (R,C), and the shared experts' fc (N,2S), act (N,S) and out (N,C).
// Under expert parallelism fc and act are the rows this member's experts ran (from every
// source), with those rows' inputs ("moe.received"), and out the source's own routed rows'
// results.
// Expert, router and gate weight gradients are computed in the backward pass itself (also under
// zero-bubble schedules' input pass); the shared experts' go through the sink.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/expert_rows.h"
#include "model/moe_routing.h"
#include "model/sublayer.h"
#include "model/sublayer_ops.h"

namespace baton {
namespace {

constexpr MemCategory kActivations = MemCategory::kActivations;
constexpr MemCategory kWorkspace = MemCategory::kWorkspace;

using model_ops::ExpertGemms;
using model_ops::ExpertWeightGrads;
using model_ops::FromExperts;
using model_ops::Linear;
using model_ops::NewTensor;
using model_ops::NewZeros;
using model_ops::PlanRows;
using model_ops::RowPlan;
using model_ops::Rows;
using model_ops::ToDevice;
using model_ops::ToExperts;
using model_ops::ToHost;

struct MoeParams {
  model_ops::Norm ln;
  Param* router = nullptr;       // (C, E)
  Param* fc = nullptr;           // (E, C, 2I)
  Param* proj = nullptr;         // (E, I, C)
  Linear shared_fc;              // (C, 2S); weight null without shared experts
  Linear shared_proj;            // (S, C)
  Param* shared_gate = nullptr;  // (C, 1) or null
};

// Which experts this rank holds, of those an expert group leaves it: with the experts folded
// over T tensor ranks, rank t's [first, first + held); all of them (first 0) for T = 1.
struct HeldExperts {
  int64_t first = 0;
  int64_t held = 0;
};

// The routing of a micro-batch's tokens and its tensors on the device: slots and weights (N,k).
// With the experts folded over tensor ranks the slots are of this rank's routed rows, those of
// its experts [first, first + held) (the routing's rows [offsets[first], offsets[first + held])),
// renumbered from 0, and -1 for the others' rows; every slot as routed otherwise.
struct Routed {
  MoeRouting routing;
  Tensor slots, weights;
  HeldExperts experts;
};

Routed RouteOn(Backend& backend, const MoeDims& moe, const Tensor& logits,
               const std::vector<float>& bias, HeldExperts experts) {
  const int64_t n = logits.size(0);
  Routed r{Route(moe, ToHost(backend, logits), n, bias), Tensor(), Tensor(), experts};
  std::vector<int32_t> slots = r.routing.slots;
  if (experts.held < moe.num_experts) {
    // The ledger-only backend routes every token to experts 0 .. k-1: it books each rank as
    // their holder, the worst routing for any rank.
    if (logits.is_meta()) r.experts.first = 0;
    const int64_t begin = r.routing.offsets[static_cast<size_t>(r.experts.first)];
    const int64_t end = r.routing.offsets[static_cast<size_t>(r.experts.first + experts.held)];
    for (int32_t& slot : slots) slot = slot >= begin && slot < end ? slot - begin : -1;
  }
  r.slots = ToDevice(backend, slots, {n, moe.top_k}, DType::kI32);
  r.weights = ToDevice(backend, r.routing.weights, {n, moe.top_k}, DType::kF32);
  return r;
}

// The experts' forward over the routed rows: fc (rows,2I), act (rows,I) and out (R,C), booked
// under `category` (rows past the routed ones are not computed). Without an expert group rows = R,
// the routed rows; with one, the rows this member's experts ran (RowPlan::received), which are
// `received` (their inputs, under `category`), and out is this member's routed rows' results.
struct ExpertsOutput {
  Tensor fc, act, out, received;
};
ExpertsOutput ExpertsForward(Backend& backend, const MoeParams& p, const Routed& r,
                             const RowPlan& plan, const Tensor& ln, int64_t rows,
                             MemCategory category) {
  const Tensor& w_fc = p.fc->value;
  const Tensor& w_proj = p.proj->value;
  const int64_t c = w_fc.size(1), i = w_proj.size(1);
  Tensor routed = NewTensor(backend, {rows, c}, ln.dtype(), kWorkspace);
  backend.MoeDispatch(Rows(ln), r.slots, Tensor(), routed);
  ExpertsOutput o;
  if (plan.group != nullptr) o.received = ToExperts(backend, plan, routed, category);
  const Tensor& in = plan.group != nullptr ? o.received : routed;
  const int64_t ran = plan.group != nullptr ? plan.received() : rows;
  o.fc = NewTensor(backend, {ran, 2 * i}, ln.dtype(), category);
  o.act = NewTensor(backend, {ran, i}, ln.dtype(), category);
  Tensor out = NewTensor(backend, {ran, c}, ln.dtype(), plan.group ? kWorkspace : category);
  ExpertGemms(backend, plan, in, w_fc, false, o.fc);
  routed = Tensor();
  if (plan.used > 0) {
    Tensor act = o.act.Slice(0, 0, plan.used);
    backend.SwiGluForward(o.fc.Slice(0, 0, plan.used), act);
  }
  ExpertGemms(backend, plan, o.act, w_proj, false, out);
  o.out = FromExperts(backend, plan, out, rows, category);
  return o;
}

// Row n of a (N,1) tensor per token: the identity routing, so the row moves scale rows.
Tensor IdentitySlots(Backend& backend, int64_t n) {
  std::vector<int32_t> host(static_cast<size_t>(n));
  std::iota(host.begin(), host.end(), 0);
  return ToDevice(backend, host, {n, 1}, DType::kI32);
}

// g = sigmoid(ln @ shared_gate) per token (host, N), or empty without a gate.
std::vector<float> SharedGate(Backend& backend, const MoeParams& p, const Tensor& ln) {
  if (p.shared_gate == nullptr) return {};
  Tensor z = NewTensor(backend, {Rows(ln).size(0), 1}, ln.dtype(), kWorkspace);
  backend.Matmul(Rows(ln), false, p.shared_gate->value, false, z, false);
  std::vector<float> gate = ToHost(backend, z);
  for (float& g : gate) g = 1.0f / (1.0f + std::exp(-g));
  return gate;
}

// The shared experts' output s (N,C) and its gate's sigmoid g (host, N) or empty.
struct SharedOutput {
  Tensor fc, act, out;
  std::vector<float> gate;
};
SharedOutput SharedForward(Backend& backend, const MoeParams& p, const Tensor& ln,
                           MemCategory category) {
  SharedOutput o;
  o.fc = model_ops::LinearForward(backend, p.shared_fc, ln, category);
  Shape half = o.fc.shape();
  half.back() /= 2;
  o.act = NewTensor(backend, half, o.fc.dtype(), category);
  backend.SwiGluForward(o.fc, o.act);
  o.out = model_ops::LinearForward(backend, p.shared_proj, o.act, category);
  o.gate = SharedGate(backend, p, ln);
  return o;
}

class MoeSublayer final : public Sublayer {
 public:
  explicit MoeSublayer(const ModelDims& dims)
      : dims_(dims),
        moe_(dims.moe),
        bias_(moe_.routing_bias() ? static_cast<size_t>(moe_.num_experts) : 0, 0.0f) {}

  const char* name() const override { return "experts"; }
  bool shared() const override { return false; }  // config refuses sharing with experts

  void AppendDefs(std::vector<ParamDef>& defs, const SublayerSource& source) const override {
    const int64_t c = dims_.width, e = moe_.num_experts, i = moe_.expert_hidden;
    model_ops::AppendNormDefs(defs, source, "ln_2", dims_);
    const std::string base = source.prefix + "mlp.";
    defs.push_back({base + "router.weight", {c, e}, ParamInit::kNormal, 0.0, source.source_layer});
    // Cut along the experts over an expert group (NewParams leaves them whole without one).
    const TensorSplit by_expert{0, {e}, 0, 1, SplitOver::kExperts};
    defs.push_back({base + "experts.c_fc.weight",
                    {e, c, 2 * i},
                    ParamInit::kNormal,
                    0.0,
                    source.source_layer,
                    by_expert});
    defs.push_back({base + "experts.c_proj.weight",
                    {e, i, c},
                    ParamInit::kOutputProjection,
                    0.0,
                    source.source_layer,
                    by_expert});
    if (moe_.shared_experts == 0) return;
    const int64_t s = moe_.shared_width();
    model_ops::AppendLinearDefs(defs, source, "mlp.shared.c_fc", c, 2 * s, false, 0,
                                dims_.num_layers, false, {model_ops::LinearCut::kColumns, {s, s}});
    model_ops::AppendLinearDefs(defs, source, "mlp.shared.c_proj", s, c, true, 0, dims_.num_layers,
                                false, {model_ops::LinearCut::kRows, {}});
    if (moe_.shared_gate) {
      defs.push_back(
          {base + "shared_gate.weight", {c, 1}, ParamInit::kNormal, 0.0, source.source_layer});
    }
  }

  std::string TensorSplitProblem(int tensor) const override {
    if (moe_.num_experts % tensor != 0) {
      return fmt::format("the {} experts do not fold evenly over {} tensor ranks", moe_.num_experts,
                         tensor);
    }
    if (moe_.shared_width() % tensor != 0) {
      return fmt::format("the shared experts' {} hidden units do not split over {} tensor ranks",
                         moe_.shared_width(), tensor);
    }
    return "";
  }

  // The MLP's (the branch summed or scattered forward, the input's gradient backward; under
  // sequence parallelism ln and dy gathered, the norm's gradient summed at the step end) and,
  // before the input's gradient, the combine weights' gradient (N,k) and the shared gate's
  // (N,1), f32.
  LayerCollectives Collectives(int64_t rows, DType act_dtype,
                               const TensorLayout& layout) const override {
    using Kind = TensorCollective::Kind;
    LayerCollectives c = model_ops::MlpSublayerCollectives(rows, dims_.width, act_dtype,
                                                           dims_.spec().norm_bias(), layout);
    if (layout.tensor == 1) return c;
    std::vector<TensorCollective> router = {{Kind::kSum, rows * moe_.top_k, DType::kF32}};
    if (moe_.shared_experts > 0 && moe_.shared_gate) {
      router.push_back({Kind::kSum, rows, DType::kF32});
    }
    c.backward.insert(c.backward.end() - 1, router.begin(), router.end());
    return c;
  }

  // The router, every routed row's expert GEMMs (dropless: N k rows), the shared experts and
  // their gate.
  int64_t ForwardFlops(const MicroBatchShape& shape) const override {
    const int64_t n = shape.batch_size * shape.seq_len, c = dims_.width;
    const int64_t rows = moe_.routed_rows(n), i = moe_.expert_hidden, s = moe_.shared_width();
    return 2 * n * c * moe_.num_experts + 2 * rows * 3 * c * i + 2 * n * 3 * c * s +
           (moe_.shared_gate ? 2 * n * c : 0);
  }

  // Selective recompute redoes the experts' GEMMs (their out is not stashed either) and the
  // shared experts' c_fc and c_proj.
  int64_t RecomputeFlops(const MicroBatchShape& shape) const override {
    if (!shape.selective_recompute) return 0;
    const int64_t n = shape.batch_size * shape.seq_len, c = dims_.width;
    return 2 * moe_.routed_rows(n) * 3 * c * moe_.expert_hidden +
           2 * n * 3 * c * moe_.shared_width();
  }

  void Bind(Backend& backend, std::vector<Param>& params, const SublayerSource& source,
            TensorGroup* tensor, ExpertGroup* experts) override {
    BATON_CHECK(TensorSplitProblem(TensorSize(tensor)).empty(), "{}mlp: {}", source.prefix,
                TensorSplitProblem(TensorSize(tensor)));
    BATON_CHECK(moe_.num_experts % (TensorSize(tensor) * ExpertSize(experts)) == 0,
                "{}mlp: {} experts do not split evenly over {}an expert group of {}", source.prefix,
                moe_.num_experts,
                TensorSize(tensor) > 1 ? fmt::format("{} tensor ranks x ", TensorSize(tensor)) : "",
                ExpertSize(experts));
    tensor_ = tensor;
    held_.held = moe_.num_experts / TensorSize(tensor);
    held_.first = TensorRank(tensor) * held_.held;
    const auto find = [&](const std::string& name) -> Param* {
      for (Param& p : params) {
        if (p.name == source.prefix + name) return &p;
      }
      return nullptr;
    };
    p_.ln = model_ops::NormView(params, source.prefix + "ln_2", dims_);
    model_ops::MarkSequencePartial(p_.ln, tensor);
    p_.router = find("mlp.router.weight");
    bias_name_ = source.prefix + "mlp.router.expert_bias";
    p_.fc = find("mlp.experts.c_fc.weight");
    p_.proj = find("mlp.experts.c_proj.weight");
    BATON_CHECK(p_.router != nullptr && p_.fc != nullptr && p_.proj != nullptr,
                "{}: the experts' parameters are missing", source.prefix);
    BATON_CHECK(p_.fc->value.size(0) * ExpertSize(experts) == held_.held,
                "{}mlp: {} experts here, {} expected", source.prefix, p_.fc->value.size(0),
                held_.held / ExpertSize(experts));
    if (ExpertSize(experts) > 1) {
      experts_ = experts;
      // Sources 1 .. E-1's weight-gradient accumulators (source 0's is the grad itself).
      const auto accumulators = [&](const Param& p) {
        Shape shape = p.grad.shape();
        shape.insert(shape.begin(), experts->size() - 1);
        return NewZeros(backend, shape, DType::kF32, MemCategory::kGrads);
      };
      fc_sources_ = accumulators(*p_.fc);
      proj_sources_ = accumulators(*p_.proj);
    }
    if (moe_.shared_experts > 0) {
      p_.shared_fc = model_ops::LinearView(params, source.prefix + "mlp.shared.c_fc");
      p_.shared_proj = model_ops::LinearView(params, source.prefix + "mlp.shared.c_proj");
      p_.shared_gate = moe_.shared_gate ? find("mlp.shared_gate.weight") : nullptr;
    }
  }

  Tensor Forward(Backend& backend, const Tensor& x, const MicroBatch& /*batch*/,
                 bool selective_recompute, Stash& stash) override {
    // ln of x's part of the sequence (stashed), then the whole sequence's (sequence parallelism).
    const Tensor ln = WholeSequence(
        backend, tensor_, model_ops::NormForward(backend, p_.ln, x, "moe.", stash), kWorkspace);
    const int64_t n = Rows(ln).size(0);
    Tensor logits = NewTensor(backend, {n, moe_.num_experts}, ln.dtype(), kActivations);
    backend.Matmul(Rows(ln), false, p_.router->value, false, logits, false);
    stash.Put("moe.logits", logits);
    const Routed r = RouteOn(backend, moe_, logits, bias_, held_);
    const RowPlan plan =
        PlanRows(backend, r.routing.offsets, r.experts.first, r.experts.held, experts_);
    const MemCategory kept = selective_recompute ? kWorkspace : kActivations;
    ExpertsOutput experts = ExpertsForward(backend, p_, r, plan, ln, RoutedRowsHere(n), kept);
    Tensor branch = NewZeros(backend, ln.shape(), x.dtype(), kWorkspace);
    Tensor branch_rows = Rows(branch);
    backend.MoeCombine(experts.out, r.slots, r.weights, branch_rows);
    if (!selective_recompute) {
      stash.Put("moe.fc", std::move(experts.fc));
      stash.Put("moe.act", std::move(experts.act));
      stash.Put("moe.out", std::move(experts.out));
      if (experts_ != nullptr) stash.Put("moe.received", std::move(experts.received));
    }
    experts = {};
    if (moe_.shared_experts > 0) {
      SharedOutput shared = SharedForward(backend, p_, ln, kept);
      const Tensor gate =
          shared.gate.empty() ? Tensor() : ToDevice(backend, shared.gate, {n, 1}, DType::kF32);
      backend.MoeCombine(Rows(shared.out), IdentitySlots(backend, n), gate, branch_rows);
      if (!selective_recompute) {
        stash.Put("moe.shared_fc", std::move(shared.fc));
        stash.Put("moe.shared_act", std::move(shared.act));
        stash.Put("moe.shared_out", std::move(shared.out));
      }
    }
    return model_ops::AddResidual(
        backend, x, model_ops::SumOverTensorGroup(backend, std::move(branch), tensor_, kWorkspace));
  }

  Tensor Backward(Backend& backend, const Tensor& dy, const MicroBatch& /*batch*/,
                  const Stash& stash, const BackwardArgs& args, model_ops::WeightGradSink& sink,
                  MemCategory dx_category) override {
    // ln and dy of the whole sequence (gathered under sequence parallelism).
    const Tensor ln = WholeSequence(backend, tensor_, stash.Get("moe.ln"), sink.operand_category());
    const Tensor dy_whole = WholeSequence(backend, tensor_, dy, sink.operand_category());
    const Tensor& logits = stash.Get("moe.logits");
    const int64_t n = Rows(ln).size(0), rows = RoutedRowsHere(n);
    const Routed r = RouteOn(backend, moe_, logits, bias_, held_);
    stats_.Add(r.routing);  // once per micro-batch: a backward runs once, a forward may twice
    const RowPlan plan =
        PlanRows(backend, r.routing.offsets, r.experts.first, r.experts.held, experts_);
    ExpertsOutput experts;
    if (stash.Has("moe.fc")) {
      experts = {stash.Get("moe.fc"), stash.Get("moe.act"), stash.Get("moe.out"),
                 experts_ != nullptr ? stash.Get("moe.received") : Tensor()};
    } else {
      experts = ExpertsForward(backend, p_, r, plan, ln, rows, kWorkspace);
    }
    const Tensor dy_rows = Rows(dy_whole);
    // The combine: the weights' gradient (each tensor rank's of its experts' choices, summed),
    // then each routed row's (w dy).
    Tensor dweights = NewZeros(backend, {n, moe_.top_k}, DType::kF32, kWorkspace);
    backend.MoeCombineWeightsBackward(dy_rows, experts.out, r.slots, dweights);
    if (tensor_ != nullptr) tensor_->AllReduceSum(dweights);
    Tensor dout = NewTensor(backend, {rows, dims_.width}, dy.dtype(), kWorkspace);
    backend.MoeDispatch(dy_rows, r.slots, r.weights, dout);
    experts.out = Tensor();
    dout = ToExperts(backend, plan, dout, kWorkspace);
    // c_proj: d act = d out @ W^T per expert, dW += act^T d out.
    Tensor dact = NewTensor(backend, experts.act.shape(), dy.dtype(), kWorkspace);
    ExpertGemms(backend, plan, dout, p_.proj->value, true, dact);
    ExpertWeightGrads(backend, plan, experts.act, dout, p_.proj->grad, proj_sources_);
    dout = Tensor();
    experts.act = Tensor();
    const int64_t used = plan.used;
    Tensor dfc = NewZeros(backend, experts.fc.shape(), dy.dtype(), kWorkspace);
    if (used > 0) {
      Tensor dfc_used = dfc.Slice(0, 0, used);
      backend.SwiGluBackward(experts.fc.Slice(0, 0, used), dact.Slice(0, 0, used), dfc_used);
    }
    dact = Tensor();
    experts.fc = Tensor();
    // c_fc: d routed = d fc @ W^T, dW += routed^T d fc; the routed rows back to their tokens.
    Tensor routed = experts.received;
    if (experts_ == nullptr) {
      routed = NewTensor(backend, {rows, dims_.width}, ln.dtype(), kWorkspace);
      backend.MoeDispatch(Rows(ln), r.slots, Tensor(), routed);
    }
    experts.received = Tensor();
    Tensor drouted = NewTensor(backend, {routed.size(0), dims_.width}, dy.dtype(), kWorkspace);
    ExpertGemms(backend, plan, dfc, p_.fc->value, true, drouted);
    ExpertWeightGrads(backend, plan, routed, dfc, p_.fc->grad, fc_sources_);
    dfc = Tensor();
    routed = Tensor();
    drouted = FromExperts(backend, plan, drouted, rows, kWorkspace);
    Tensor dln = NewZeros(backend, ln.shape(), dy.dtype(), kWorkspace);
    Tensor dln_rows = Rows(dln);
    backend.MoeCombine(drouted, r.slots, Tensor(), dln_rows);
    drouted = Tensor();
    // The router: the combine weights' gradient and the router losses', on the logits; its share
    // of dln, the same on every tensor rank, added once (by rank 0) to the sum.
    const std::vector<float> dz_host =
        RouterGradient(moe_, r.routing, ToHost(backend, dweights), args.loss_grad_scale);
    const Tensor dz = ToDevice(backend, dz_host, {n, moe_.num_experts}, DType::kF32);
    Tensor dz_act = NewTensor(backend, dz.shape(), dy.dtype(), kWorkspace);
    backend.Copy(dz, dz_act);
    backend.Matmul(Rows(ln), true, dz_act, false, p_.router->grad, true);
    if (TensorRank(tensor_) == 0) {
      backend.Matmul(dz_act, false, p_.router->value, true, dln_rows, true);
    }
    if (moe_.shared_experts > 0) SharedBackward(backend, stash, dy_whole, ln, sink, dln);
    dln = model_ops::SumOverTensorGroup(backend, std::move(dln), tensor_, kWorkspace);
    return model_ops::ResidualNormBackward(backend, p_.ln, dy, dln, "moe.", stash, dx_category);
  }

  Tensor ForwardCached(Backend& backend, const Tensor& x, const std::vector<int64_t>& /*starts*/,
                       KvCache& /*cache*/, const std::string& /*who*/) override {
    Stash stash;  // nothing is kept: a forward with selective recompute's workspace
    return Forward(backend, x, MicroBatch{}, /*selective_recompute=*/true, stash);
  }

  std::optional<ExpertStats> TakeExpertStats() override {
    if (stats_.load.empty()) stats_.load.assign(static_cast<size_t>(moe_.num_experts), 0);
    return std::exchange(stats_, ExpertStats{});
  }

  std::vector<ExpertGradSources> expert_grad_sources() override {
    if (experts_ == nullptr) return {};
    return {{p_.fc, fc_sources_}, {p_.proj, proj_sources_}};
  }

  Layer::RoutingBias routing_bias() override {
    if (!moe_.routing_bias()) return {};
    return {bias_name_, Tensor::Wrap(bias_.data(), {moe_.num_experts}, DType::kF32)};
  }

  // DeepSeek-V3's rule: b_e -= rate where expert e took more than the mean of the loads, += rate
  // where less (f32, in expert order).
  void UpdateRoutingBias(const std::vector<int64_t>& load) override {
    if (!moe_.routing_bias()) return;
    BATON_CHECK(load.size() == bias_.size(), "{}: {} expert loads for {} experts", bias_name_,
                load.size(), bias_.size());
    const double mean = static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0})) /
                        static_cast<double>(load.size());
    const float rate = static_cast<float>(moe_.bias_update_rate);
    for (size_t e = 0; e < bias_.size(); ++e) {
      const double l = static_cast<double>(load[e]);
      if (l > mean) bias_[e] -= rate;
      if (l < mean) bias_[e] += rate;
    }
  }

  // Only the shared experts' linears use the sink (the experts', the router's and the gate's
  // gradients are computed in the backward pass itself).
  void AppendWeightMatrices(std::vector<Param*>& out) const override {
    if (moe_.shared_experts == 0) return;
    model_ops::AppendWeightMatrices(p_.shared_proj, out);
    model_ops::AppendWeightMatrices(p_.shared_fc, out);
  }

 private:
  // dln += the shared experts' input gradient (and their gate's); their weights' through `sink`.
  void SharedBackward(Backend& backend, const Stash& stash, const Tensor& dy, const Tensor& ln,
                      model_ops::WeightGradSink& sink, Tensor& dln) const {
    const int64_t n = Rows(ln).size(0);
    SharedOutput shared;
    if (stash.Has("moe.shared_fc")) {
      shared.fc = stash.Get("moe.shared_fc");
      shared.act = stash.Get("moe.shared_act");
      shared.out = stash.Get("moe.shared_out");
      shared.gate = SharedGate(backend, p_, ln);
    } else {
      shared = SharedForward(backend, p_, ln, sink.operand_category());
    }
    Tensor dln_rows = Rows(dln);
    Tensor ds = NewTensor(backend, dy.shape(), dy.dtype(), sink.operand_category());
    if (p_.shared_gate != nullptr) {
      // y += g s: dg = dot(dy, s), dz_g = dg g (1 - g), scaled ds = g dy.
      const Tensor ids = IdentitySlots(backend, n);
      Tensor dg = NewZeros(backend, {n, 1}, DType::kF32, kWorkspace);
      backend.MoeCombineWeightsBackward(Rows(dy), Rows(shared.out), ids, dg);
      if (tensor_ != nullptr) tensor_->AllReduceSum(dg);  // each rank's part of s
      std::vector<float> dz = ToHost(backend, dg);
      for (size_t t = 0; t < dz.size(); ++t) {
        dz[t] *= shared.gate[t] * (1.0f - shared.gate[t]);
      }
      const Tensor dz_f32 = ToDevice(backend, dz, {n, 1}, DType::kF32);
      Tensor dz_act = NewTensor(backend, {n, 1}, dy.dtype(), kWorkspace);
      backend.Copy(dz_f32, dz_act);
      backend.Matmul(Rows(ln), true, dz_act, false, p_.shared_gate->grad, true);
      if (TensorRank(tensor_) == 0) {  // replicated: added once to the sum
        backend.Matmul(dz_act, false, p_.shared_gate->value, true, dln_rows, true);
      }
      Tensor ds_rows = Rows(ds);
      backend.MoeDispatch(Rows(dy), ids, ToDevice(backend, shared.gate, {n, 1}, DType::kF32),
                          ds_rows);
    } else {
      backend.Copy(dy, ds);
    }
    shared.out = Tensor();
    Tensor dact = model_ops::LinearBackward(backend, p_.shared_proj, shared.act, ds, sink);
    ds = Tensor();
    shared.act = Tensor();
    Tensor dfc = NewZeros(backend, shared.fc.shape(), dy.dtype(), sink.operand_category());
    backend.SwiGluBackward(shared.fc, dact, dfc);
    dact = Tensor();
    shared.fc = Tensor();
    const Tensor dx = model_ops::LinearBackward(backend, p_.shared_fc, ln, dfc, sink);
    backend.Accumulate(dx, dln);
  }

  // The routed rows this rank's experts may take from n tokens (the buffers' size): every choice
  // of n tokens that can land on held_'s experts, at most their capacity.
  int64_t RoutedRowsHere(int64_t n) const {
    return moe_.routed_rows(n, static_cast<int>(held_.held));
  }

  ModelDims dims_;
  MoeDims moe_;
  MoeParams p_;
  // Tensor parallelism: the stage's tensor group (null for T = 1) and the experts folded onto
  // this rank.
  TensorGroup* tensor_ = nullptr;
  HeldExperts held_;
  ExpertStats stats_;
  // sigmoid_bias: the routing bias (E, f32; empty otherwise), "<prefix>mlp.router.expert_bias".
  std::vector<float> bias_;
  std::string bias_name_;
  // Expert parallelism: the expert group (null without one) and the experts' weight-gradient
  // accumulators of sources 1 .. E-1 (ExpertGradSources).
  ExpertGroup* experts_ = nullptr;
  Tensor fc_sources_, proj_sources_;
};

}  // namespace

std::unique_ptr<Sublayer> MakeMoeSublayer(const ModelDims& dims) {
  return std::make_unique<MoeSublayer>(dims);
}

}  // namespace baton
