// A symbolic replay of what the layers and the CPU backend book in the memory ledger: the memory
// planner's model of one layer call (docs/memory.md).
//
// SymTensor stands for a Tensor without its data: booked in a MemoryLedger when made, released
// when its last handle goes, exactly as Tensor storage is. The Replay* functions below mirror
// model/sublayers.cc, block.cc, head.cc and embedding.cc line by line -- the same allocations, in
// the same order, in the same categories, and the same handles kept in the stash -- and every
// CPU kernel call books its scratch and the f32 staging of its 16-bit operands
// (kernels/cpu/f32_staging.h) for the duration of the call. Replaying an engine's actions over
// these functions therefore reproduces the ledger's peaks per category and in total, without
// allocating or computing anything. memory_planner_test.cc holds the replay to the real ledger.
//
// Not thread-safe (one replay per thread); the ledger must outlive every SymTensor booked in it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"
#include "model/dims.h"
#include "model/graph.h"

namespace baton {

class SymTensor {
 public:
  SymTensor() = default;
  static SymTensor New(MemoryLedger& ledger, MemCategory category, int64_t numel, DType dtype);

  bool defined() const { return block_ != nullptr; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  const void* identity() const { return block_.get(); }

 private:
  struct Block {
    MemoryLedger* ledger;
    MemCategory category;
    int64_t bytes;
    Block(MemoryLedger* l, MemCategory c, int64_t b) : ledger(l), category(c), bytes(b) {}
    ~Block() { ledger->Release(category, bytes); }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
  };
  std::shared_ptr<Block> block_;
  int64_t numel_ = 0;
  DType dtype_ = DType::kF32;
};

// What a layer keeps between forward and backward (mirrors model::Stash).
class SymStash {
 public:
  void Put(std::string name, SymTensor t);
  const SymTensor& Get(const std::string& name) const;
  bool Has(const std::string& name) const;
  void Clear() { entries_.clear(); }
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<std::pair<std::string, SymTensor>> entries_;
};

// The shapes and dtypes every replayed call shares.
struct ReplayContext {
  MemoryLedger* ledger = nullptr;
  ModelDims dims;
  int64_t batch = 1;  // B: sequences per micro-batch
  int64_t seq = 1;    // T
  DType act_dtype = DType::kF32;
  DType param_dtype = DType::kF32;
  bool selective = false;  // selective recompute
  int threads = 1;         // the CPU backend's threads (attention backward scratch)

  int64_t rows() const { return batch * seq; }
  SymTensor New(MemCategory category, int64_t numel, DType dtype) const;
  SymTensor Act(int64_t numel) const {  // numel elements of the activation dtype, as activations
    return New(MemCategory::kActivations, numel, act_dtype);
  }
};

// One operand of a CPU kernel call: staged as an f32 workspace copy when it is 16-bit.
struct KernelOperand {
  int64_t numel = 0;
  DType dtype = DType::kF32;
  const void* identity = nullptr;    // operands with one identity share one copy (in-place kernels)
  KernelOperand(const SymTensor& t)  // NOLINT: implicit, so calls read like the kernels'
      : numel(t.numel()), dtype(t.dtype()), identity(t.identity()) {}
  KernelOperand(int64_t n, DType d) : numel(n), dtype(d) {}  // a parameter
};

// Books `scratch_bytes` of workspace and the staging of `operands`, then releases them all: the
// ledger's view of one kernel call.
void ReplayKernel(const ReplayContext& ctx, int64_t scratch_bytes,
                  std::initializer_list<KernelOperand> operands);

// Mirrors of Layer::Forward / Backward / BackwardInput / BackwardWeight for one micro-batch.
// `x` is undefined for the embedding; the head returns its loss (1) f32; Backward of the
// embedding returns an undefined tensor.
SymTensor ReplayForward(const ReplayContext& ctx, const LayerSpec& spec, const SymTensor& x,
                        SymStash& stash);
SymTensor ReplayBackward(const ReplayContext& ctx, const LayerSpec& spec, const SymTensor& dy,
                         SymStash& stash, bool defer_weights);
void ReplayBackwardWeight(const ReplayContext& ctx, const LayerSpec& spec, SymStash& stash);

// Parameter element counts of one layer, in the order the layer allocates them (the head's
// tied wte last).
std::vector<int64_t> ParamNumels(const LayerSpec& spec, const ModelDims& dims);

}  // namespace baton
