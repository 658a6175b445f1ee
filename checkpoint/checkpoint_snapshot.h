// A host copy of the layers a rank checkpoints, so that a background thread can write the files
// while training goes on changing the originals (output.async_checkpoint; docs/checkpoints.md,
// "Background checkpoints").
//
// Its buffers come from the allocator it is given, booked as MemCategory::kCheckpoint, and are
// kept from one checkpoint to the next (a rank copies the same tensors every time): from its first
// checkpoint on, a rank holds them for the rest of the run. The memory planner books the same by
// running this class on its meta backend.
//
// Not thread-safe: one thread copies in (Begin, Add); another may read layers() once the copy is
// complete and until the next Begin, which its owner must not call before that reader is done.
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/layer_tensors.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace baton {

class CheckpointSnapshot {
 public:
  explicit CheckpointSnapshot(Allocator& host) : host_(host) {}
  CheckpointSnapshot(const CheckpointSnapshot&) = delete;
  CheckpointSnapshot& operator=(const CheckpointSnapshot&) = delete;

  // Starts a new copy: layers() is empty again; the buffers stay, to be reused in order.
  void Begin();
  // Appends copies of `layers` (any device) to layers(): every tensor a checkpoint file stores
  // (a tied copy is stored elsewhere and is not copied). Staged through `backend`, synchronised
  // before it returns, so the originals may change as soon as it has.
  void Add(const std::vector<LayerTensors>& layers, Backend& backend);

  // Host tensors, in the order added.
  const std::vector<LayerTensors>& layers() const { return layers_; }
  // What the buffers hold (booked as kCheckpoint).
  int64_t bytes() const;

 private:
  // A host copy of `t` in the next buffer (made, or remade when its shape or dtype differ);
  // undefined for an undefined `t`.
  Tensor CopyOf(const Tensor& t, Backend& backend);

  Allocator& host_;
  std::vector<Tensor> buffers_;  // in the order Add first needed them
  size_t next_ = 0;              // the buffer the next CopyOf uses
  std::vector<LayerTensors> layers_;
};

}  // namespace baton
