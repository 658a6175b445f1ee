// The shape of a GPT-style model: what every layer and the cost model are built from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/rope.h"

namespace baton {

// The block a preset builds (docs/model.md): GPT-2's (LayerNorm with bias, learned positions,
// GELU MLP, multi-head attention, biases), Llama's (RMSNorm, rotary positions, SwiGLU MLP,
// grouped-query attention, no biases), Qwen2's (Llama's with biases on q, k and v), Mistral's
// (Llama's block under Mistral's names; its sliding window is ModelDims::sliding_window) or
// Qwen3's (Llama's with an RMSNorm on each query and key head before the rotation).
enum class ModelFamily { kGpt2, kLlama, kQwen2, kMistral, kQwen3 };

// What a block (and the embedding and head around it) is made of, as every layer and the cost
// model ask it: a family is one choice of these (ModelDims::spec()), so a new family is a new
// row of choices where the layers already know each one (docs/architecture.md, "Adding a layer
// kind").
struct BlockSpec {
  enum class Norm { kLayerNorm, kRmsNorm };    // ln_1, ln_2, ln_f; a LayerNorm has a bias
  enum class Positions { kLearned, kRotary };  // wpe in the embedding, or q and k rotated
  enum class Mlp { kGelu, kSwiGlu };           // c_fc (C, H) then GELU, or (C, 2H) gate and up
  Norm norm = Norm::kLayerNorm;
  Positions positions = Positions::kLearned;
  Mlp mlp = Mlp::kGelu;
  bool linear_biases = true;  // every linear's bias (c_attn, c_proj, c_fc)
  bool qkv_bias = false;      // c_attn's bias without the others (Qwen2's q, k, v biases)
  bool qk_norm = false;       // attn.q_norm / attn.k_norm: RMSNorm of each q and k head (Qwen3)

  bool rms_norm() const { return norm == Norm::kRmsNorm; }
  bool norm_bias() const { return norm == Norm::kLayerNorm; }
  bool rotary() const { return positions == Positions::kRotary; }
  bool swiglu() const { return mlp == Mlp::kSwiGlu; }
  bool attention_in_bias() const { return linear_biases || qkv_bias; }  // c_attn's
  bool operator==(const BlockSpec&) const = default;
};

// GPT-2's: LayerNorm, learned positions, GELU, biases. Llama's: RMSNorm, rotary positions,
// SwiGLU, no biases. Qwen2's: Llama's and c_attn's bias. Qwen3's: Llama's and the q/k norms.
BlockSpec SpecOf(ModelFamily family);

// A mixture-of-experts block's MLP (model.moe; docs/model.md, "Mixture of experts"): each token
// goes to top_k of num_experts SwiGLU experts of width expert_hidden, picked by a linear router,
// plus shared_experts always-on experts fused into one SwiGLU MLP of width
// shared_experts * shared_hidden (its output scaled by sigmoid(x w) with shared_gate).
struct MoeDims {
  enum class Router { kSoftmaxTopk, kTopkSoftmax, kSigmoidBias };
  int num_experts = 0;  // 0: every block is dense
  int top_k = 1;
  int expert_hidden = 0;
  int shared_experts = 0;
  int shared_hidden = 0;
  bool shared_gate = false;
  int first_dense = 0;  // blocks 0 .. first_dense - 1 are dense
  int every = 1;        // then block i is MoE when (i - first_dense) % every == 0
  Router router = Router::kSoftmaxTopk;
  bool norm_topk_prob = true;
  double aux_loss_coef = 0.0;
  double z_loss_coef = 0.0;
  double capacity_factor = 0.0;   // 0 = dropless
  double bias_update_rate = 0.0;  // sigmoid_bias: the routing bias's step per training step

  bool enabled() const { return num_experts > 0; }
  bool block(int block_index) const {
    return enabled() && block_index >= first_dense && (block_index - first_dense) % every == 0;
  }
  // Rows an expert takes from `tokens` tokens: all of them (dropless) or
  // ceil(capacity_factor * tokens * top_k / num_experts).
  int64_t capacity(int64_t tokens) const;
  // Rows of the experts' permuted input for `tokens` tokens: tokens * top_k, at most
  // num_experts * capacity.
  int64_t routed_rows(int64_t tokens) const;
  // Of them, the rows `held` of the experts can take (experts folded over tensor ranks): every
  // token's choices that can land on them, at most their capacity.
  int64_t routed_rows(int64_t tokens, int held) const;
  int64_t shared_width() const { return int64_t{shared_experts} * shared_hidden; }
  // sigmoid_bias's per-expert routing bias, kept by each MoE layer beside its parameters.
  bool routing_bias() const { return router == Router::kSigmoidBias; }
  bool operator==(const MoeDims&) const = default;
};
// "softmax_topk", "topk_softmax", "sigmoid_bias" (the config's names); nullopt for another name.
const char* RouterName(MoeDims::Router router);
std::optional<MoeDims::Router> RouterFromName(std::string_view name);

struct ModelDims {
  int vocab_size = 0;  // V
  int context = 0;     // maxT: rows of the position embedding; a micro-batch's T <= context
  int num_layers = 0;  // L: blocks (block or mlp_block) in the graph
  int num_heads = 0;   // NH; head size D = head_size, or width / num_heads
  int width = 0;       // C
  // Cross-layer sharing (model.share): blocks i and j with i / share_group == j / share_group
  // hold one parameter set for their shared sublayers (model/block.h); 1 = none.
  int share_group = 1;
  bool share_attention = false;  // ln_1.*, attn.*
  bool share_mlp = false;        // ln_2.*, mlp.*
  // Low-rank factorisation (model.low_rank): the rank r of attention's c_attn and c_proj, and
  // of the MLP's c_fc and c_proj; 0 = dense.
  int low_rank_attn = 0;
  int low_rank_mlp = 0;
  // ---- the block's kind and its Llama knobs (GPT-2 ignores them but tie_embeddings)
  ModelFamily family = ModelFamily::kGpt2;
  int num_kv_heads = 0;        // grouped-query attention's key/value heads; 0 = num_heads
  int mlp_hidden = 0;          // the MLP's hidden width; 0 = 4C (GPT-2). Llama: intermediate_size
  float norm_eps = 1e-5f;      // RMSNorm's epsilon (GPT-2's LayerNorm always uses 1e-5)
  RopeConfig rope{};           // rotary positions (Llama)
  bool tie_embeddings = true;  // the LM head is the token embedding's transpose
  // Sliding-window attention (Mistral's; rotary positions only): each token attends over itself
  // and the sliding_window - 1 tokens before it; 0 = the whole causal context.
  int sliding_window = 0;
  MoeDims moe{};  // dense unless moe.num_experts > 0 (Llama-family blocks only)
  // A head size set apart from the width (Qwen3's head_dim: NH D need not be C; Llama-family
  // blocks only); 0 = width / num_heads, the only spelling of that size.
  int head_size = 0;

  int head_dim() const { return head_size > 0 ? head_size : width / num_heads; }
  // The queries' columns NH D: attention's output, c_proj's input (C unless head_size is set).
  int64_t attention_width() const { return int64_t{num_heads} * head_dim(); }
  // The family's block (the layers and the cost model ask it, not the family).
  BlockSpec spec() const { return SpecOf(family); }
  // Llama's block or a variant of it (Qwen2): Hugging Face's Llama names, the Llama knobs.
  bool llama() const { return family != ModelFamily::kGpt2; }
  bool qwen2() const { return family == ModelFamily::kQwen2; }
  bool mistral() const { return family == ModelFamily::kMistral; }
  bool qwen3() const { return family == ModelFamily::kQwen3; }
  // The keys a query attends at most: itself and the W - 1 before it (sliding-window attention),
  // within `seq` positions; `seq` without a window (sliding_window 0).
  int64_t attention_window(int64_t seq) const {
    return sliding_window > 0 && sliding_window < seq ? sliding_window : seq;
  }
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int hidden() const { return mlp_hidden > 0 ? mlp_hidden : 4 * width; }
  // Columns of the attention's fused projection c_attn: queries NH*D, keys and values KVH*D each.
  int64_t qkv_width() const { return attention_width() + 2 * int64_t{kv_heads()} * head_dim(); }
  // Columns of the MLP's c_fc: the hidden width, twice for SwiGLU (gate, then up).
  int64_t fc_width() const { return spec().swiglu() ? 2 * int64_t{hidden()} : hidden(); }
  // Whether the embedding holds learned positions (wpe); rotary positions turn q and k instead.
  bool learned_positions() const { return !spec().rotary(); }
  // Whether block `block_index` holds experts in place of its dense MLP.
  bool moe_block(int block_index) const { return moe.block(block_index); }
  bool shares() const { return share_group > 1 && (share_attention || share_mlp); }
  // The first block of block i's share group (i itself without sharing).
  int share_leader(int block) const { return shares() ? block - block % share_group : block; }
  bool operator==(const ModelDims&) const = default;
};

// Whether a and b hold the same parameters computing the same function: equal but for the
// training choices of their experts (the router losses' weights, the capacity factor), which a
// resumed or re-partitioned run may change.
bool SameModel(const ModelDims& a, const ModelDims& b);

// Throws baton::Error unless every field is positive and width is a multiple of num_heads.
void Validate(const ModelDims& dims);
std::string ToString(const ModelDims& dims);  // "V=50257 T=1024 L=12 NH=12 C=768"

}  // namespace baton
