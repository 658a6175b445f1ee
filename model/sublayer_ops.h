// The computations of a block's two pre-norm residual sublayers (internal to model/; the
// Sublayer type that owns each, its parameters and its collectives is in model/sublayer.h):
//   attention: y = x + c_proj(attention(c_attn(ln(x))))
//   mlp:       y = x + c_proj(gelu(c_fc(ln(x))))               GPT-2
//              y = x + c_proj(silu(gate) * up), [gate | up] = c_fc(ln(x))   Llama (SwiGLU)
// Llama's attention turns q and k by position (rotary) right after c_attn, so the stashed qkv is
// the rotated one; with grouped-query attention c_attn gives (NH + 2 KVH) D columns and the
// key/value heads are repeated to every query head, as workspace, just before each attention
// kernel (forward, and again in backward). ln is a LayerNorm or an RMSNorm (no mean).
// x, y, dy, dx are (B,T,C) in the activation dtype (x's). Each stashes under its own prefix
// ("attn.", "mlp."), so a block holds both in one Stash. Stash entries (sizes in elements,
// N = B*T; mean/rstd and probs f32, the rest the activation dtype):
//   attn.x (N,C)  attn.ln (N,C)  attn.mean (N)  attn.rstd (N)  attn.qkv (N,3C)  attn.out (N,C)
//   (RMSNorm: no mean; grouped-query: qkv (N,(NH+2KVH)D))
//   attn.lse (B,NH,T)                                       -- flash attention, always
//   attn.probs (B,NH,T,T)                  -- materialized attention, not under selective recompute
//   mlp.x (N,C)   mlp.ln (N,C)   mlp.mean (N)   mlp.rstd (N)
//   mlp.fc (N,4C) mlp.act (N,4C)                            -- not under selective recompute
//   (SwiGLU: fc (N,2H), act (N,H))
// Backward recomputes whatever the stash lacks, with the same kernels, so the bits agree. The
// order of allocations and frees in sublayer_ops.cc is what model/cost.cc's workspace formulas
// describe.
#pragma once

#include <string>

#include "kernels/backend.h"
#include "model/collectives.h"
#include "model/layer.h"
#include "model/ops.h"
#include "model/tensor_parallel.h"

namespace baton::model_ops {

struct AttentionParams {
  Norm ln;
  Linear c_attn;  // (C, 3C), or (C, (NH+2KVH)D) with grouped-query attention
  Linear c_proj;  // (C, C), or (NH D, C)
  AttentionHeads heads;
  bool flash = true;    // flash-style attention (stash lse) or materialized (stash probs)
  bool rotary = false;  // Llama: rotary positions on q and k
  RopeConfig rope;
  // Sliding-window attention (Mistral's): a query attends itself and the W - 1 keys before it;
  // 0 = none. Positions stay the sequence's (or the document's).
  int sliding_window = 0;
  // Tensor parallelism (null: T = 1): c_attn holds this rank's heads' columns and `heads` counts
  // them; c_proj holds the matching rows, its output summed over the group (its bias added by
  // rank 0 alone), and so is the gradient of c_attn's input.
  TensorGroup* tensor = nullptr;
  // Qwen3's q/k norms (weight only: q_norm.weight is null without them): an RMSNorm of each query
  // head's D values (q_norm) and each key head's (k_norm), between c_attn and the rotation.
  Norm q_norm, k_norm;
};

struct MlpParams {
  Norm ln;
  Linear c_fc;    // (C, 4C), or SwiGLU's (C, 2H): gate, then up
  Linear c_proj;  // (4C, C), or (H, C)
  bool swiglu = false;
  // Tensor parallelism (null: T = 1): c_fc holds this rank's hidden units (SwiGLU: its part of
  // the gates and of the ups), c_proj the matching rows, summed as attention's.
  TensorGroup* tensor = nullptr;
};

// ---- pieces the sublayers share (model/moe_sublayer.cc too)
// ln (B,T,C) = norm(x), booked as activations; stashes <prefix>x, ln, mean (LayerNorm), rstd.
Tensor NormForward(Backend& backend, const Norm& norm, const Tensor& x, const std::string& prefix,
                   Stash& stash);
// dx = dy + norm'(x)^T dln from the stash's <prefix> entries, booked under `category`; the
// norm's gradients accumulate.
Tensor ResidualNormBackward(Backend& backend, const Norm& norm, const Tensor& dy, const Tensor& dln,
                            const std::string& prefix, const Stash& stash, MemCategory category);
// y = x + branch, a fresh activation.
Tensor AddResidual(Backend& backend, const Tensor& x, const Tensor& branch);
// y (..., out) = x (..., in) @ W + b, booked under `category`.
Tensor LinearForward(Backend& backend, const Linear& linear, const Tensor& x, MemCategory category);
// Returns dx = dy @ W^T (booked as workspace); db += column sums of dy; dW += x^T dy via `sink`.
Tensor LinearBackward(Backend& backend, const Linear& linear, const Tensor& x, const Tensor& dy,
                      WeightGradSink& sink);

// A (B,S,C) tensor of which each tensor rank holds a part of the sum (a row-parallel product, a
// column-parallel input's gradient): the group's sum (rank order), or under sequence parallelism
// this rank's part of the sequence of it (booked under `category`); `partial` itself for T = 1.
Tensor SumOverTensorGroup(Backend& backend, Tensor partial, TensorGroup* tensor,
                          MemCategory category);

// segment_starts: the micro-batch's (MicroBatch::segment_starts; undefined = one document per
// row), the same tensor for forward and backward.
Tensor AttentionSublayerForward(Backend& backend, const AttentionParams& params, const Tensor& x,
                                const Tensor& segment_starts, bool selective_recompute,
                                Stash& stash);
// Returns dx booked under `dx_category`; weight gradients go through `sink`, the rest accumulate.
Tensor AttentionSublayerBackward(Backend& backend, const AttentionParams& params, const Tensor& dy,
                                 const Tensor& segment_starts, const Stash& stash,
                                 WeightGradSink& sink, MemCategory dx_category);

Tensor MlpSublayerForward(Backend& backend, const MlpParams& params, const Tensor& x,
                          bool selective_recompute, Stash& stash);
Tensor MlpSublayerBackward(Backend& backend, const MlpParams& params, const Tensor& dy,
                           const Stash& stash, WeightGradSink& sink, MemCategory dx_category);

// Inference with a key-value cache (Layer::ForwardCached): x (B,T,C) are the new positions.
// The attention sublayer appends row b's keys and values to row b of `cache` (allocating
// (B,context,C) of each on first use, as activations) and attends over every position cached in
// that row (Backend::CachedAttentionForward: once for all rows when their lengths and first
// positions agree, else row by row); rotary positions turn row b's q and k by cache.end(b)
// onwards; the MLP
// sublayer is Forward's without a stash. Every intermediate is workspace, freed on return; y is
// booked as activations.
Tensor AttentionSublayerCached(Backend& backend, const AttentionParams& params, const Tensor& x,
                               int64_t context, KvCache& cache);
Tensor MlpSublayerInference(Backend& backend, const MlpParams& params, const Tensor& x);

// The collectives each sublayer issues over its tensor group (model/collectives.h), beside the
// code that issues them: x (B,S,C) of `rows` = B*S rows of the whole sequence, `act_dtype`;
// `norm_bias`: its norm has a bias (LayerNorm) besides the weight. Attention's and the MLP's are
// the same: a column-parallel linear in, a row-parallel one out.
LayerCollectives AttentionSublayerCollectives(int64_t rows, int64_t width, DType act_dtype,
                                              bool norm_bias, const TensorLayout& layout);
LayerCollectives MlpSublayerCollectives(int64_t rows, int64_t width, DType act_dtype,
                                        bool norm_bias, const TensorLayout& layout);

}  // namespace baton::model_ops
