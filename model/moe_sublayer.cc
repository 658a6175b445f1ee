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
// Stash ("moe." prefix): x, ln, rstd, logits (N,E); unless selective recompute, the experts' fc
// (R,2I), act (R,I) and out (R,C), and the shared experts' fc (N,2S), act (N,S) and out (N,C).
// Expert, router and gate weight gradients are computed in the backward pass itself (also under
// zero-bubble schedules' input pass); the shared experts' go through the sink.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/moe_routing.h"
#include "model/sublayer.h"
#include "model/sublayer_ops.h"

namespace baton {
namespace {

constexpr MemCategory kActivations = MemCategory::kActivations;
constexpr MemCategory kWorkspace = MemCategory::kWorkspace;

using model_ops::Linear;
using model_ops::NewTensor;
using model_ops::NewZeros;
using model_ops::Rows;

struct MoeParams {
  model_ops::Norm ln;
  Param* router = nullptr;       // (C, E)
  Param* fc = nullptr;           // (E, C, 2I)
  Param* proj = nullptr;         // (E, I, C)
  Linear shared_fc;              // (C, 2S); weight null without shared experts
  Linear shared_proj;            // (S, C)
  Param* shared_gate = nullptr;  // (C, 1) or null
};

// The host's f32 copy of a device tensor (zeros for a meta tensor: a ledger-only backend routes
// every token to experts 0 .. k-1, each expert's largest possible block).
// Read back in its own dtype, then widened here: a GPU's converting copy would stage on the
// device, which the ledger-only backend (returning before any copy) would not book.
std::vector<float> ToHost(Backend& backend, const Tensor& t) {
  std::vector<float> host(static_cast<size_t>(t.numel()), 0.0f);
  if (t.is_meta()) return host;
  std::vector<std::byte> raw(t.nbytes());
  Tensor view = Tensor::Wrap(raw.data(), t.shape(), t.dtype());
  backend.Copy(t, view);
  backend.Synchronize();
  ConvertFloats(raw.data(), t.dtype(), host.data(), DType::kF32, host.size());
  return host;
}

// A device tensor of `shape` and `dtype` (booked as workspace) holding `host` (f32 or i32 values).
template <typename T>
Tensor ToDevice(Backend& backend, const std::vector<T>& host, Shape shape, DType dtype) {
  Tensor t = NewTensor(backend, shape, dtype, kWorkspace);
  if (t.is_meta()) return t;
  constexpr DType kHostDtype = std::is_same_v<T, int32_t> ? DType::kI32 : DType::kF32;
  backend.Copy(Tensor::Wrap(const_cast<T*>(host.data()), std::move(shape), kHostDtype), t);
  return t;
}

// The routing of a micro-batch's tokens and its tensors on the device: slots and weights (N,k).
struct Routed {
  MoeRouting routing;
  Tensor slots, weights;
};

Routed RouteOn(Backend& backend, const MoeDims& moe, const Tensor& logits,
               const std::vector<float>& bias) {
  const int64_t n = logits.size(0);
  Routed r{Route(moe, ToHost(backend, logits), n, bias), Tensor(), Tensor()};
  r.slots = ToDevice(backend, r.routing.slots, {n, moe.top_k}, DType::kI32);
  r.weights = ToDevice(backend, r.routing.weights, {n, moe.top_k}, DType::kF32);
  return r;
}

// Expert e's matrix of a stacked (E, a, b) parameter tensor, as (a, b).
Tensor ExpertMatrix(const Tensor& stacked, int64_t e) {
  return stacked.Slice(0, e, e + 1).View({stacked.size(1), stacked.size(2)});
}

// out rows of each expert = in rows of the expert @ its matrix of `weights` (trans: its
// transpose); accumulate adds. One GEMM per expert with rows.
void ExpertGemms(Backend& backend, const MoeRouting& routing, const Tensor& in,
                 const Tensor& weights, bool trans, Tensor& out) {
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(routing.offsets.size()); ++e) {
    const int64_t begin = routing.offsets[e], end = routing.offsets[e + 1];
    if (begin == end) continue;
    Tensor block = out.Slice(0, begin, end);
    backend.Matmul(in.Slice(0, begin, end), false, ExpertMatrix(weights, e), trans, block, false);
  }
}

// Each expert's weight gradient += its rows of lhs^T @ its rows of rhs.
void ExpertWeightGrads(Backend& backend, const MoeRouting& routing, const Tensor& lhs,
                       const Tensor& rhs, Tensor& grad) {
  for (int64_t e = 0; e + 1 < static_cast<int64_t>(routing.offsets.size()); ++e) {
    const int64_t begin = routing.offsets[e], end = routing.offsets[e + 1];
    if (begin == end) continue;
    Tensor g = ExpertMatrix(grad, e);
    backend.Matmul(lhs.Slice(0, begin, end), true, rhs.Slice(0, begin, end), false, g, true);
  }
}

// The experts' forward over their routed rows: fc (R,2I), act (R,I) and out (R,C), booked under
// `category` (rows past the routed ones are not computed).
struct ExpertsOutput {
  Tensor fc, act, out;
};
ExpertsOutput ExpertsForward(Backend& backend, const MoeParams& p, const Routed& r,
                             const Tensor& ln, int64_t rows, MemCategory category) {
  const Tensor& w_fc = p.fc->value;
  const Tensor& w_proj = p.proj->value;
  const int64_t c = w_fc.size(1), i = w_proj.size(1);
  Tensor routed = NewTensor(backend, {rows, c}, ln.dtype(), kWorkspace);
  backend.MoeDispatch(Rows(ln), r.slots, Tensor(), routed);
  ExpertsOutput o{NewTensor(backend, {rows, 2 * i}, ln.dtype(), category),
                  NewTensor(backend, {rows, i}, ln.dtype(), category),
                  NewTensor(backend, {rows, c}, ln.dtype(), category)};
  ExpertGemms(backend, r.routing, routed, w_fc, false, o.fc);
  routed = Tensor();
  const int64_t used = r.routing.offsets.back();
  if (used > 0) {
    Tensor act = o.act.Slice(0, 0, used);
    backend.SwiGluForward(o.fc.Slice(0, 0, used), act);
  }
  ExpertGemms(backend, r.routing, o.act, w_proj, false, o.out);
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
    defs.push_back({base + "experts.c_fc.weight",
                    {e, c, 2 * i},
                    ParamInit::kNormal,
                    0.0,
                    source.source_layer});
    defs.push_back({base + "experts.c_proj.weight",
                    {e, i, c},
                    ParamInit::kOutputProjection,
                    0.0,
                    source.source_layer});
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
    if (tensor == 1) return "";
    return fmt::format("experts do not split over {} tensor ranks yet", tensor);
  }

  LayerCollectives Collectives(int64_t /*rows*/, DType /*act_dtype*/,
                               const TensorLayout& /*layout*/) const override {
    return {};  // one tensor rank (TensorSplitProblem)
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

  void Bind(std::vector<Param>& params, const SublayerSource& source,
            TensorGroup* tensor) override {
    BATON_CHECK(TensorSize(tensor) == 1, "{}", TensorSplitProblem(TensorSize(tensor)));
    const auto find = [&](const std::string& name) -> Param* {
      for (Param& p : params) {
        if (p.name == source.prefix + name) return &p;
      }
      return nullptr;
    };
    p_.ln = model_ops::NormView(params, source.prefix + "ln_2", dims_);
    p_.router = find("mlp.router.weight");
    bias_name_ = source.prefix + "mlp.router.expert_bias";
    p_.fc = find("mlp.experts.c_fc.weight");
    p_.proj = find("mlp.experts.c_proj.weight");
    BATON_CHECK(p_.router != nullptr && p_.fc != nullptr && p_.proj != nullptr,
                "{}: the experts' parameters are missing", source.prefix);
    if (moe_.shared_experts > 0) {
      p_.shared_fc = model_ops::LinearView(params, source.prefix + "mlp.shared.c_fc");
      p_.shared_proj = model_ops::LinearView(params, source.prefix + "mlp.shared.c_proj");
      p_.shared_gate = moe_.shared_gate ? find("mlp.shared_gate.weight") : nullptr;
    }
  }

  Tensor Forward(Backend& backend, const Tensor& x, const MicroBatch& /*batch*/,
                 bool selective_recompute, Stash& stash) override {
    const Tensor ln = model_ops::NormForward(backend, p_.ln, x, "moe.", stash);
    const int64_t n = Rows(ln).size(0);
    Tensor logits = NewTensor(backend, {n, moe_.num_experts}, ln.dtype(), kActivations);
    backend.Matmul(Rows(ln), false, p_.router->value, false, logits, false);
    stash.Put("moe.logits", logits);
    const Routed r = RouteOn(backend, moe_, logits, bias_);
    const MemCategory kept = selective_recompute ? kWorkspace : kActivations;
    ExpertsOutput experts = ExpertsForward(backend, p_, r, ln, moe_.routed_rows(n), kept);
    Tensor branch = NewZeros(backend, x.shape(), x.dtype(), kWorkspace);
    Tensor branch_rows = Rows(branch);
    backend.MoeCombine(experts.out, r.slots, r.weights, branch_rows);
    if (!selective_recompute) {
      stash.Put("moe.fc", std::move(experts.fc));
      stash.Put("moe.act", std::move(experts.act));
      stash.Put("moe.out", std::move(experts.out));
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
    return model_ops::AddResidual(backend, x, branch);
  }

  Tensor Backward(Backend& backend, const Tensor& dy, const MicroBatch& /*batch*/,
                  const Stash& stash, const BackwardArgs& args, model_ops::WeightGradSink& sink,
                  MemCategory dx_category) override {
    const Tensor& ln = stash.Get("moe.ln");
    const Tensor& logits = stash.Get("moe.logits");
    const int64_t n = Rows(ln).size(0), rows = moe_.routed_rows(n);
    const Routed r = RouteOn(backend, moe_, logits, bias_);
    stats_.Add(r.routing);  // once per micro-batch: a backward runs once, a forward may twice
    ExpertsOutput experts;
    if (stash.Has("moe.fc")) {
      experts = {stash.Get("moe.fc"), stash.Get("moe.act"), stash.Get("moe.out")};
    } else {
      experts = ExpertsForward(backend, p_, r, ln, rows, kWorkspace);
    }
    const Tensor dy_rows = Rows(dy);
    // The combine: the weights' gradient, then each routed row's (w dy).
    Tensor dweights = NewZeros(backend, {n, moe_.top_k}, DType::kF32, kWorkspace);
    backend.MoeCombineWeightsBackward(dy_rows, experts.out, r.slots, dweights);
    Tensor dout = NewTensor(backend, {rows, dims_.width}, dy.dtype(), kWorkspace);
    backend.MoeDispatch(dy_rows, r.slots, r.weights, dout);
    experts.out = Tensor();
    // c_proj: d act = d out @ W^T per expert, dW += act^T d out.
    Tensor dact = NewTensor(backend, experts.act.shape(), dy.dtype(), kWorkspace);
    ExpertGemms(backend, r.routing, dout, p_.proj->value, true, dact);
    ExpertWeightGrads(backend, r.routing, experts.act, dout, p_.proj->grad);
    dout = Tensor();
    experts.act = Tensor();
    const int64_t used = r.routing.offsets.back();
    Tensor dfc = NewZeros(backend, experts.fc.shape(), dy.dtype(), kWorkspace);
    if (used > 0) {
      Tensor dfc_used = dfc.Slice(0, 0, used);
      backend.SwiGluBackward(experts.fc.Slice(0, 0, used), dact.Slice(0, 0, used), dfc_used);
    }
    dact = Tensor();
    experts.fc = Tensor();
    // c_fc: d routed = d fc @ W^T, dW += routed^T d fc; the routed rows back to their tokens.
    Tensor routed = NewTensor(backend, {rows, dims_.width}, ln.dtype(), kWorkspace);
    backend.MoeDispatch(Rows(ln), r.slots, Tensor(), routed);
    Tensor drouted = NewTensor(backend, {rows, dims_.width}, dy.dtype(), kWorkspace);
    ExpertGemms(backend, r.routing, dfc, p_.fc->value, true, drouted);
    ExpertWeightGrads(backend, r.routing, routed, dfc, p_.fc->grad);
    dfc = Tensor();
    routed = Tensor();
    Tensor dln = NewZeros(backend, ln.shape(), dy.dtype(), kWorkspace);
    Tensor dln_rows = Rows(dln);
    backend.MoeCombine(drouted, r.slots, Tensor(), dln_rows);
    drouted = Tensor();
    // The router: the combine weights' gradient and the router losses', on the logits.
    const std::vector<float> dz_host =
        RouterGradient(moe_, r.routing, ToHost(backend, dweights), args.loss_grad_scale);
    const Tensor dz = ToDevice(backend, dz_host, {n, moe_.num_experts}, DType::kF32);
    Tensor dz_act = NewTensor(backend, dz.shape(), dy.dtype(), kWorkspace);
    backend.Copy(dz, dz_act);
    backend.Matmul(Rows(ln), true, dz_act, false, p_.router->grad, true);
    backend.Matmul(dz_act, false, p_.router->value, true, dln_rows, true);
    if (moe_.shared_experts > 0) SharedBackward(backend, stash, dy, ln, sink, dln);
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
      std::vector<float> dz = ToHost(backend, dg);
      for (size_t t = 0; t < dz.size(); ++t) {
        dz[t] *= shared.gate[t] * (1.0f - shared.gate[t]);
      }
      const Tensor dz_f32 = ToDevice(backend, dz, {n, 1}, DType::kF32);
      Tensor dz_act = NewTensor(backend, {n, 1}, dy.dtype(), kWorkspace);
      backend.Copy(dz_f32, dz_act);
      backend.Matmul(Rows(ln), true, dz_act, false, p_.shared_gate->grad, true);
      backend.Matmul(dz_act, false, p_.shared_gate->value, true, dln_rows, true);
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

  ModelDims dims_;
  MoeDims moe_;
  MoeParams p_;
  ExpertStats stats_;
  // sigmoid_bias: the routing bias (E, f32; empty otherwise), "<prefix>mlp.router.expert_bias".
  std::vector<float> bias_;
  std::string bias_name_;
};

}  // namespace

std::unique_ptr<Sublayer> MakeMoeSublayer(const ModelDims& dims) {
  return std::make_unique<MoeSublayer>(dims);
}

}  // namespace baton
