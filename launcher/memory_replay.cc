// The symbolic replay of layer calls (see memory_replay.h). Each function names the code it
// mirrors; keep them in step with it (memory_planner_test.cc fails when they drift).
#include "launcher/memory_replay.h"

#include <algorithm>

#include "core/error.h"

namespace baton {
namespace {

constexpr MemCategory kActivations = MemCategory::kActivations;
constexpr MemCategory kWorkspace = MemCategory::kWorkspace;
constexpr int64_t kF32Bytes = 4;
// kernels/cpu/layer_kernels.cc: LayerNorm backward sums partial grads per block of 32 rows.
constexpr int64_t kLayerNormRowBlock = 32;

int64_t LayerNormBackwardScratchBytes(int64_t rows, int64_t cols) {
  return (rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock * 2 * cols * kF32Bytes;
}

// A weight matrix (in, out) with its bias (out), as model_ops::Linear.
struct LinearShape {
  std::string weight_name;
  int64_t in = 0;
  int64_t out = 0;
};

// model_ops::WeightGradSink: runs or defers dW += lhs^T rhs.
class SymSink {
 public:
  SymSink(const ReplayContext& ctx, bool defer) : ctx_(ctx), defer_(defer) {}
  MemCategory operand_category() const { return defer_ ? kActivations : kWorkspace; }
  void Add(const std::string& weight, const SymTensor& lhs, const SymTensor& rhs) {
    if (defer_) {
      pending_.push_back({weight, lhs, rhs});
    } else {
      ReplayKernel(ctx_, 0, {lhs, rhs});  // the weight's grad is f32: not staged
    }
  }
  void Finish(SymStash& stash) {
    stash.Clear();
    for (Pending& p : pending_) {
      stash.Put(p.weight + ".lhs", std::move(p.lhs));
      stash.Put(p.weight + ".rhs", std::move(p.rhs));
    }
    pending_.clear();
  }

 private:
  struct Pending {
    std::string weight;
    SymTensor lhs, rhs;
  };
  const ReplayContext& ctx_;
  bool defer_;
  std::vector<Pending> pending_;
};

KernelOperand ParamOperand(const ReplayContext& ctx, int64_t numel) {
  return {numel, ctx.param_dtype};
}

// ---- model/sublayers.cc

SymTensor NormForward(const ReplayContext& ctx, const SymTensor& x, const std::string& prefix,
                      SymStash& stash) {
  const int64_t c = ctx.dims.width;
  SymTensor ln = ctx.Act(x.numel());
  SymTensor mean = ctx.New(kActivations, ctx.rows(), DType::kF32);
  SymTensor rstd = ctx.New(kActivations, ctx.rows(), DType::kF32);
  ReplayKernel(ctx, 0, {x, ParamOperand(ctx, c), ParamOperand(ctx, c), ln});
  stash.Put(prefix + "x", x);
  stash.Put(prefix + "ln", ln);
  stash.Put(prefix + "mean", std::move(mean));
  stash.Put(prefix + "rstd", std::move(rstd));
  return ln;
}

SymTensor ResidualNormBackward(const ReplayContext& ctx, const SymTensor& dy, const SymTensor& dln,
                               const std::string& prefix, const SymStash& stash,
                               MemCategory category) {
  const int64_t c = ctx.dims.width;
  SymTensor dx = ctx.New(category, dy.numel(), dy.dtype());  // + a same-dtype copy: no staging
  ReplayKernel(ctx, LayerNormBackwardScratchBytes(ctx.rows(), c),
               {dln, stash.Get(prefix + "x"), ParamOperand(ctx, c), dx});
  return dx;
}

// y = x + branch: Add converts 16-bit chunks on the stack, so only y is booked.
SymTensor AddResidual(const ReplayContext& ctx, const SymTensor& x, const SymTensor& branch) {
  (void)branch;  // alive until the sublayer returns, as in the real code
  return ctx.Act(x.numel());
}

SymTensor LinearForward(const ReplayContext& ctx, const LinearShape& linear, const SymTensor& x,
                        MemCategory category) {
  SymTensor y = ctx.New(category, ctx.rows() * linear.out, ctx.act_dtype);
  ReplayKernel(ctx, 0,
               {x, ParamOperand(ctx, linear.in * linear.out), ParamOperand(ctx, linear.out), y});
  return y;
}

SymTensor LinearBackward(const ReplayContext& ctx, const LinearShape& linear, const SymTensor& x,
                         const SymTensor& dy, SymSink& sink) {
  SymTensor dx = ctx.New(kWorkspace, ctx.rows() * linear.in, dy.dtype());
  ReplayKernel(ctx, 0, {dy, ParamOperand(ctx, linear.in * linear.out), dx});
  sink.Add(linear.weight_name, x, dy);
  ReplayKernel(ctx, 0, {dy});  // BiasBackward; the bias grad is f32
  return dx;
}

int64_t ProbsNumel(const ReplayContext& ctx) {
  return ctx.batch * ctx.dims.num_heads * ctx.seq * ctx.seq;
}

LinearShape CAttn(const ReplayContext& ctx) {
  return {"attn.c_attn", ctx.dims.width, 3 * int64_t{ctx.dims.width}};
}
LinearShape AttnProj(const ReplayContext& ctx) {
  return {"attn.c_proj", ctx.dims.width, ctx.dims.width};
}
LinearShape CFc(const ReplayContext& ctx) {
  return {"mlp.c_fc", ctx.dims.width, 4 * int64_t{ctx.dims.width}};
}
LinearShape MlpProj(const ReplayContext& ctx) {
  return {"mlp.c_proj", 4 * int64_t{ctx.dims.width}, ctx.dims.width};
}

SymTensor AttentionForward(const ReplayContext& ctx, const SymTensor& x, SymStash& stash) {
  const SymTensor ln = NormForward(ctx, x, "attn.", stash);
  SymTensor qkv = LinearForward(ctx, CAttn(ctx), ln, kActivations);
  stash.Put("attn.qkv", qkv);
  SymTensor out = ctx.Act(x.numel());
  SymTensor probs =
      ctx.New(ctx.selective ? kWorkspace : kActivations, ProbsNumel(ctx), DType::kF32);
  ReplayKernel(ctx, 0, {qkv, out});  // probs are f32
  stash.Put("attn.out", out);
  if (!ctx.selective) stash.Put("attn.probs", probs);
  probs = SymTensor();
  const SymTensor proj = LinearForward(ctx, AttnProj(ctx), out, kWorkspace);
  return AddResidual(ctx, x, proj);
}

SymTensor AttentionBackward(const ReplayContext& ctx, const SymTensor& dy, const SymStash& stash,
                            SymSink& sink, MemCategory dx_category) {
  const SymTensor& qkv = stash.Get("attn.qkv");
  SymTensor probs;
  if (stash.Has("attn.probs")) {
    probs = stash.Get("attn.probs");
  } else {
    probs = ctx.New(kWorkspace, ProbsNumel(ctx), DType::kF32);
    SymTensor scratch = ctx.New(kWorkspace, dy.numel(), dy.dtype());
    ReplayKernel(ctx, 0, {qkv, scratch});
  }
  SymTensor dout = LinearBackward(ctx, AttnProj(ctx), stash.Get("attn.out"), dy, sink);
  SymTensor dqkv = ctx.New(sink.operand_category(), qkv.numel(), qkv.dtype());
  const int64_t scratch = int64_t{ctx.threads} * ctx.seq * ctx.seq * kF32Bytes;
  ReplayKernel(ctx, scratch, {dout, qkv, dqkv});
  dout = SymTensor();
  probs = SymTensor();
  SymTensor dln = LinearBackward(ctx, CAttn(ctx), stash.Get("attn.ln"), dqkv, sink);
  dqkv = SymTensor();
  return ResidualNormBackward(ctx, dy, dln, "attn.", stash, dx_category);
}

SymTensor MlpForward(const ReplayContext& ctx, const SymTensor& x, SymStash& stash) {
  const SymTensor ln = NormForward(ctx, x, "mlp.", stash);
  const MemCategory wide = ctx.selective ? kWorkspace : kActivations;
  SymTensor fc = LinearForward(ctx, CFc(ctx), ln, wide);
  SymTensor gelu = ctx.New(wide, fc.numel(), fc.dtype());
  ReplayKernel(ctx, 0, {fc, gelu});
  if (!ctx.selective) {
    stash.Put("mlp.fc", fc);
    stash.Put("mlp.gelu", gelu);
  }
  fc = SymTensor();
  const SymTensor proj = LinearForward(ctx, MlpProj(ctx), gelu, kWorkspace);
  gelu = SymTensor();
  return AddResidual(ctx, x, proj);
}

SymTensor MlpBackward(const ReplayContext& ctx, const SymTensor& dy, const SymStash& stash,
                      SymSink& sink, MemCategory dx_category) {
  const SymTensor& ln = stash.Get("mlp.ln");
  SymTensor fc;
  SymTensor gelu;
  if (stash.Has("mlp.fc")) {
    fc = stash.Get("mlp.fc");
    gelu = stash.Get("mlp.gelu");
  } else {
    fc = LinearForward(ctx, CFc(ctx), ln, kWorkspace);
    gelu = ctx.New(sink.operand_category(), fc.numel(), fc.dtype());
    ReplayKernel(ctx, 0, {fc, gelu});
  }
  SymTensor dgelu = LinearBackward(ctx, MlpProj(ctx), gelu, dy, sink);
  gelu = SymTensor();
  SymTensor dfc = ctx.New(sink.operand_category(), fc.numel(), fc.dtype());
  ReplayKernel(ctx, 0, {fc, dgelu, dfc});
  dgelu = SymTensor();
  fc = SymTensor();
  SymTensor dln = LinearBackward(ctx, CFc(ctx), ln, dfc, sink);
  dfc = SymTensor();
  return ResidualNormBackward(ctx, dy, dln, "mlp.", stash, dx_category);
}

// ---- model/block.cc, head.cc, embedding.cc

SymTensor HeadForward(const ReplayContext& ctx, const SymTensor& x, SymStash& stash) {
  const int64_t c = ctx.dims.width;
  const int64_t v = ctx.dims.vocab_size;
  SymTensor ln = ctx.Act(x.numel());
  SymTensor mean = ctx.New(kActivations, ctx.rows(), DType::kF32);
  SymTensor rstd = ctx.New(kActivations, ctx.rows(), DType::kF32);
  ReplayKernel(ctx, 0, {x, ParamOperand(ctx, c), ParamOperand(ctx, c), ln});
  SymTensor logits = ctx.Act(ctx.rows() * v);
  ReplayKernel(ctx, 0, {ln, ParamOperand(ctx, v * c), logits});
  SymTensor loss = ctx.New(kActivations, 1, DType::kF32);
  ReplayKernel(ctx, ctx.rows() * kF32Bytes, {logits});  // row losses, then the mean
  stash.Put("x", x);
  stash.Put("ln", ln);
  stash.Put("mean", std::move(mean));
  stash.Put("rstd", std::move(rstd));
  stash.Put("logits", std::move(logits));
  return loss;
}

SymTensor HeadBackward(const ReplayContext& ctx, SymStash& stash, bool defer) {
  const int64_t c = ctx.dims.width;
  const int64_t v = ctx.dims.vocab_size;
  const SymTensor& x = stash.Get("x");
  const SymTensor& ln = stash.Get("ln");
  SymTensor dlogits = stash.Get("logits");  // overwritten in place
  ReplayKernel(ctx, 0, {dlogits});
  SymSink sink(ctx, defer);
  SymTensor dln = ctx.New(kWorkspace, ln.numel(), ctx.act_dtype);
  ReplayKernel(ctx, 0, {dlogits, ParamOperand(ctx, v * c), dln});
  sink.Add("wte", dlogits, ln);
  SymTensor dx = ctx.Act(x.numel());
  ReplayKernel(ctx, LayerNormBackwardScratchBytes(ctx.rows(), c),
               {dln, x, ParamOperand(ctx, c), dx});
  dln = SymTensor();
  dlogits = SymTensor();
  sink.Finish(stash);
  return dx;
}

SymTensor BlockBackward(const ReplayContext& ctx, const LayerSpec& spec, const SymTensor& dy,
                        SymStash& stash, bool defer) {
  SymSink sink(ctx, defer);
  if (spec.kind == LayerKind::kMlpBlock) {
    SymTensor dx = MlpBackward(ctx, dy, stash, sink, kActivations);
    sink.Finish(stash);
    return dx;
  }
  SymTensor dx2 = MlpBackward(ctx, dy, stash, sink, sink.operand_category());
  SymTensor dx = AttentionBackward(ctx, dx2, stash, sink, kActivations);
  dx2 = SymTensor();
  sink.Finish(stash);
  return dx;
}

}  // namespace

SymTensor SymTensor::New(MemoryLedger& ledger, MemCategory category, int64_t numel, DType dtype) {
  BATON_CHECK(numel >= 0, "negative tensor size {}", numel);
  SymTensor t;
  const int64_t bytes = numel * static_cast<int64_t>(SizeOf(dtype));
  ledger.Book(category, bytes);
  t.block_ = std::make_shared<Block>(&ledger, category, bytes);
  t.numel_ = numel;
  t.dtype_ = dtype;
  return t;
}

void SymStash::Put(std::string name, SymTensor t) {
  BATON_CHECK(!Has(name), "stash entry {} is taken", name);
  entries_.emplace_back(std::move(name), std::move(t));
}

const SymTensor& SymStash::Get(const std::string& name) const {
  for (const auto& [key, t] : entries_) {
    if (key == name) return t;
  }
  BATON_FAIL("no stash entry {}", name);
}

bool SymStash::Has(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const auto& entry) { return entry.first == name; });
}

SymTensor ReplayContext::New(MemCategory category, int64_t numel, DType dtype) const {
  return SymTensor::New(*ledger, category, numel, dtype);
}

void ReplayKernel(const ReplayContext& ctx, int64_t scratch_bytes,
                  std::initializer_list<KernelOperand> operands) {
  int64_t staged = 0;
  std::vector<const void*> seen;
  for (const KernelOperand& op : operands) {
    if (op.dtype == DType::kF32 || op.dtype == DType::kI32) continue;
    if (op.identity != nullptr) {
      if (std::find(seen.begin(), seen.end(), op.identity) != seen.end()) continue;
      seen.push_back(op.identity);
    }
    staged += op.numel * kF32Bytes;
  }
  const int64_t bytes = scratch_bytes + staged;
  ctx.ledger->Book(kWorkspace, bytes);
  ctx.ledger->Release(kWorkspace, bytes);
}

SymTensor ReplayForward(const ReplayContext& ctx, const LayerSpec& spec, const SymTensor& x,
                        SymStash& stash) {
  const int64_t c = ctx.dims.width;
  switch (spec.kind) {
    case LayerKind::kEmbedding: {
      SymTensor out = ctx.Act(ctx.rows() * c);
      ReplayKernel(ctx, 0,
                   {ParamOperand(ctx, int64_t{ctx.dims.vocab_size} * c),
                    ParamOperand(ctx, int64_t{ctx.dims.context} * c), out});
      return out;
    }
    case LayerKind::kBlock: {
      const SymTensor x2 = AttentionForward(ctx, x, stash);
      return MlpForward(ctx, x2, stash);
    }
    case LayerKind::kMlpBlock:
      return MlpForward(ctx, x, stash);
    case LayerKind::kHead:
      return HeadForward(ctx, x, stash);
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

SymTensor ReplayBackward(const ReplayContext& ctx, const LayerSpec& spec, const SymTensor& dy,
                         SymStash& stash, bool defer_weights) {
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      ReplayKernel(ctx, 0, {dy});  // the grads are f32
      stash.Clear();
      return SymTensor();
    case LayerKind::kBlock:
    case LayerKind::kMlpBlock:
      return BlockBackward(ctx, spec, dy, stash, defer_weights);
    case LayerKind::kHead:
      return HeadBackward(ctx, stash, defer_weights);
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

void ReplayBackwardWeight(const ReplayContext& ctx, const LayerSpec& spec, SymStash& stash) {
  (void)spec;
  // model_ops::RunDeferredWeightGrads: one GEMM per deferred weight, then the stash goes.
  for (const char* weight : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj", "wte"}) {
    const std::string lhs = std::string(weight) + ".lhs";
    if (!stash.Has(lhs)) continue;
    ReplayKernel(ctx, 0, {stash.Get(lhs), stash.Get(std::string(weight) + ".rhs")});
  }
  stash.Clear();
}

std::vector<int64_t> ParamNumels(const LayerSpec& spec, const ModelDims& dims) {
  const int64_t c = dims.width;
  const int64_t v = dims.vocab_size;
  const std::vector<int64_t> mlp = {c, c, 4 * c * c, 4 * c, 4 * c * c, c};
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return {v * c, int64_t{dims.context} * c};
    case LayerKind::kBlock: {
      std::vector<int64_t> all = {c, c, 3 * c * c, 3 * c, c * c, c};
      all.insert(all.end(), mlp.begin(), mlp.end());
      return all;
    }
    case LayerKind::kMlpBlock:
      return mlp;
    case LayerKind::kHead:
      return {c, c, v * c};
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

}  // namespace baton
