// Layers: the units a pipeline cuts between. Each is a forward/backward pair over one
// micro-batch, owning its parameters and their gradients.
//
// Data flow: the first layer of the graph (the embedding) reads `MicroBatch::tokens` and ignores
// its input; every other layer maps an activation (B,T,C) to the next; the last layer (the head)
// reads `MicroBatch::targets` and returns the micro-batch's mean loss, shape (1) f32.
// Backward runs in reverse with the gradient of each output; the head starts it from the loss,
// scaled by `BackwardArgs::loss_grad_scale` (1/micro_batches, times the fp16 loss scale).
//
// What backward needs is kept in a Stash per (layer, micro-batch), booked as activations in the
// ledger; Backward/BackwardWeight release it. A layer keeps HANDLES, not copies, to the tensors it
// is given: Forward stashes its input x, BackwardInput may stash dy. The caller must not write
// into those tensors until the stash is released (Backward, or BackwardWeight after
// BackwardInput). The tensors a layer returns (its output, dx, the loss) are fresh allocations
// booked as activations. Layers are not thread-safe: one stage engine drives them from one thread.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/moe_routing.h"
#include "model/tensor_parallel.h"

namespace baton {

struct MicroBatch {
  Tensor tokens;   // (B,T) i32: read by the first layer
  Tensor targets;  // (B,T) i32: read by the last layer; kIgnoreTarget where not counted
  // Packed documents only (data.packing; undefined otherwise): (B,T) i32, the first position of
  // the document holding each token (data/packing.h), read by every layer with attention and by
  // the embedding (positions restart at each document). Every stage holds it.
  Tensor segment_starts = Tensor();  // (an initializer, so {tokens, targets} stays complete)
};

struct BackwardArgs {
  float loss_grad_scale = 1.0f;  // d(step loss)/d(this micro-batch's loss), loss scale included
};

// Tensors one layer keeps between forward and backward of one micro-batch, by name, in the
// order they were put.
class Stash {
 public:
  void Put(std::string name, Tensor t);              // throws if the name is taken
  const Tensor& Get(const std::string& name) const;  // throws if absent
  bool Has(const std::string& name) const;
  void Clear();
  bool empty() const { return entries_.empty(); }
  int size() const { return static_cast<int>(entries_.size()); }
  std::vector<std::string> names() const;
  // Sum of the stashed tensors' sizes (a tensor's nbytes, not its storage's: views count what
  // they see).
  int64_t bytes() const;

 private:
  std::vector<std::pair<std::string, Tensor>> entries_;
};

// One attention layer's keys and values of the positions run so far, for inference with a
// key-value cache (Layer::ForwardCached), for B sequences (rows) at once. keys, values (B,S,C) in
// the activation dtype, S = the attention window (model.context, or model.sliding_window); in
// row b, slots [0, length[b]) are filled, with the positions first[b] .. end(b) - 1. Rows are
// independent: each has its own length (prompts of different lengths) and first. first[b] is 0
// until DropOldest slides the row (rotary models only: their keys are turned by their own
// position, and attention depends only on differences of positions, so the kept slots stay valid
// when older ones go). The layer allocates both on first use through the backend's allocator,
// booked as activations; they are freed when the cache goes (or Release()). Reset() empties every
// row and keeps the memory. Owned by the caller, one per layer and batch of sequences.
struct KvCache {
  Tensor keys;
  Tensor values;
  std::vector<int64_t> length;  // per row; empty before first use
  std::vector<int64_t> first;   // per row: the position of slot 0

  // Rows held (B), 0 before first use.
  int64_t rows() const { return static_cast<int64_t>(length.size()); }
  void Reset() {
    std::fill(length.begin(), length.end(), 0);
    std::fill(first.begin(), first.end(), 0);
  }
  void Release() { *this = KvCache(); }
  int64_t bytes() const;  // of keys and values, 0 before first use
  // Row b's next position to run; 0 before first use.
  int64_t end(int64_t row) const {
    return length.empty() ? 0
                          : first.at(static_cast<size_t>(row)) + length[static_cast<size_t>(row)];
  }
  // Row b alone: a (1,S,C) view of its keys and values (the same memory) with its length and
  // first, for running that row by itself; Absorb(b, view) takes the view's length and first
  // back. An unused cache gives an unused view.
  KvCache Row(int64_t row) const;
  void Absorb(int64_t row, const KvCache& view);
};

// Drops the n oldest positions of row `row` of `cache` (0 <= n <= length[row]): its slots
// n .. length-1 move to 0 .. length-n-1 (through a workspace copy), first[row] += n. An unused
// cache (a layer without attention) is left alone.
void DropOldest(Backend& backend, KvCache& cache, int64_t row, int64_t n);

struct Param {
  std::string name;           // Hugging Face GPT-2 style: "h.3.attn.c_attn.weight", "wte.weight"
  Tensor value;               // booked as params, in the layer's param dtype
  Tensor grad;                // same shape, f32, booked as grads; zeroed at the start of every step
  bool weight_decay = false;  // AdamW decay applies to tensors of rank >= 2
  // True for a copy of another layer's parameter of the same name: the head's "wte.weight", tied
  // to the embedding's, and a shared block's copy of its group leader's parameter (model.share).
  // Its value equals the original bit for bit. The head's copy shares the embedding's storage
  // after TieEmbedding, its grad always separate, summed with the original's at step end; a
  // shared block copy built where the original lives shares both its value and its grad.
  bool tied = false;
  // For a tied copy: the graph index of the layer holding the original (the embedding, 0, for
  // the head's wte; the group's first block for a shared block parameter, model/block.h).
  int source_layer = -1;
  // INT8 weights only (model.weights: int8, model/int8_weights.h): value is i8 codes and scale
  // (cols) f32 its per-column scales, both booked as params; grad is undefined (inference only).
  Tensor scale;
  // Pruning only (prune.*, model/prune.h): u8, value's shape, 1 = kept; booked as params. The
  // trainer masks the gradient before and the value after every optimizer step.
  Tensor mask;
  // Tensor parallelism (parallel.tensor T > 1; model/tensor_parallel.h): which part of the full
  // parameter value and grad hold. Not cut (the default): the whole parameter, replicated on
  // every rank of the stage's tensor group.
  TensorSplit split = {};
  // A replicated parameter applied to this tensor rank's part of the work only (under sequence
  // parallelism the norms, to its positions; Qwen3's q/k norms, to its heads), so each tensor
  // rank's gradient is a part of the whole; the trainer sums them over the tensor group at step
  // end, after which every tensor rank holds the same.
  bool tensor_partial_grad = false;
  // A mixture-of-experts layer's stacked experts (E, a, b): cut along the experts over an expert
  // group (split.over kExperts) or whole; the gradient norm sums it expert by expert.
  bool stacked_experts = false;
};

// Expert parallelism (model/expert_parallel.h): an expert parameter (N/E, a, b), this member's
// part of the stacked (N, a, b) split over the expert group of E, and the weight-gradient
// accumulators of sources 1 .. E-1 beside its grad (source 0's): (E - 1, N/E, a, b) f32, booked as
// grads.
struct ExpertGradSources {
  Param* param = nullptr;
  Tensor others;
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual const std::string& name() const = 0;  // "embedding", "block.3", "head"
  // The layer's parameters in canonical order; the pointers stay valid as long as the layer.
  virtual std::vector<Param*> params() = 0;

  // Selective activation recompute (Megatron): when on, Forward stashes less and Backward
  // recomputes the rest; the results are bit-identical. Layers with nothing to recompute ignore
  // it. Off by default.
  virtual void set_selective_recompute(bool on) { (void)on; }
  virtual bool selective_recompute() const { return false; }
  // Attention computed flash-style (on by default): the stash keeps each row's log-sum-exp
  // instead of the T x T probabilities (model/sublayer_ops.h). Layers without attention ignore it.
  virtual void set_flash_attention(bool on) { (void)on; }
  virtual bool flash_attention() const { return false; }
  // A layer with experts (model.moe): what its routing did in the backward passes since the last
  // call (each micro-batch counted once, whatever the recompute), then forgotten; nullopt for
  // every other layer.
  virtual std::optional<ExpertStats> TakeExpertStats() { return std::nullopt; }
  // A layer with a sigmoid_bias router (model.moe.router): its per-expert routing bias, which
  // picks experts but weighs nothing and takes no gradient (docs/model.md, "Mixture of
  // experts"). `routing_bias` names it ("h.3.mlp.router.expert_bias") with a host f32 tensor over
  // the layer's own values (E), which checkpoints save and load; empty name and undefined tensor
  // for every other layer. UpdateRoutingBias moves it by a training step's expert loads (every
  // replica's choices of each expert, summed): overloaded experts down, underloaded up.
  struct RoutingBias {
    std::string name;
    Tensor values;
  };
  virtual RoutingBias routing_bias() { return {}; }
  virtual void UpdateRoutingBias(const std::vector<int64_t>& load) { (void)load; }
  // A layer whose experts split over an expert group: their gradients by source member, to fold
  // (FoldExpertGradSources) once the step's backward passes are done; empty for every other
  // layer.
  virtual std::vector<ExpertGradSources> expert_grad_sources() { return {}; }

  // Returns the output activation, or for the head the loss (1). Fills `stash` with what
  // backward needs (under selective recompute, less; see the layer).
  virtual Tensor Forward(const Tensor& x, const MicroBatch& batch, Stash& stash) = 0;

  // Inference with a key-value cache (baton generate): the forward of T new positions of each
  // of B sequences, row b's at starts[b] .. starts[b]+T-1 (starts: B entries), whose earlier
  // positions went through earlier calls with the same `cache`. x (B,T,C) (the embedding ignores
  // it and reads batch.tokens (B,T), the new positions' tokens); returns (B,T,C), or for the head
  // the logits (B*T,V) in the activation dtype (batch.targets is not read). No stash, no
  // gradients: every tensor but the result and the cache is freed on return. A layer with
  // attention appends each row's new keys and values to its row of `cache` (allocating it for B
  // rows on first use; starts[b] must equal cache.end(b), and each row must have room:
  // cache.length[b] + T <= S); the others leave it alone. Learned positions need
  // starts[b] + T <= context; rotary ones any starts[b] >= 0 (a slid cache, DropOldest). Layers
  // that cannot run this way throw (the default).
  virtual Tensor ForwardCached(const Tensor& x, const MicroBatch& batch,
                               const std::vector<int64_t>& starts, KvCache& cache);

  // Full backward: accumulates every parameter gradient, returns dx (undefined for the first
  // layer) and clears the stash. `dy` is undefined for the head.
  virtual Tensor Backward(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                          const BackwardArgs& args) = 0;

  // Zero-bubble split of Backward. BackwardInput returns dx and accumulates every gradient but
  // those of the weight matrices, leaving in the stash only the operands of the weight-gradient
  // GEMMs; BackwardWeight runs those GEMMs and clears the stash. Running both gives bit-identical
  // gradients to Backward.
  virtual Tensor BackwardInput(const Tensor& dy, const MicroBatch& batch, Stash& stash,
                               const BackwardArgs& args) = 0;
  virtual void BackwardWeight(Stash& stash) = 0;
};

}  // namespace baton
