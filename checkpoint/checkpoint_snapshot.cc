#include "checkpoint/checkpoint_snapshot.h"

namespace baton {

void CheckpointSnapshot::Begin() {
  layers_.clear();
  next_ = 0;
}

void CheckpointSnapshot::Add(const std::vector<LayerTensors>& layers, Backend& backend) {
  for (const LayerTensors& layer : layers) {
    LayerTensors copy;
    copy.index = layer.index;
    copy.name = layer.name;
    for (const ParamTensors& p : layer.params) {
      ParamTensors& q = copy.params.emplace_back();
      q.name = p.name;
      q.tied = p.tied;
      q.source_layer = p.source_layer;
      q.split = p.split;
      if (p.tied) continue;  // stored in the file of p.source_layer
      q.value = CopyOf(p.value, backend);
      q.scale = CopyOf(p.scale, backend);
      q.mask = CopyOf(p.mask, backend);
      q.master = CopyOf(p.master, backend);
      q.adam_m = CopyOf(p.adam_m, backend);
      q.adam_v = CopyOf(p.adam_v, backend);
      q.adam_m_absmax = CopyOf(p.adam_m_absmax, backend);
      q.adam_v_absmax = CopyOf(p.adam_v_absmax, backend);
    }
    for (const BufferTensor& b : layer.buffers)
      copy.buffers.push_back({b.name, CopyOf(b.value, backend)});
    layers_.push_back(std::move(copy));
  }
  backend.Synchronize();
}

int64_t CheckpointSnapshot::bytes() const {
  int64_t total = 0;
  for (const Tensor& t : buffers_) total += static_cast<int64_t>(t.nbytes());
  return total;
}

Tensor CheckpointSnapshot::CopyOf(const Tensor& t, Backend& backend) {
  if (!t.defined()) return Tensor();
  if (next_ == buffers_.size()) buffers_.emplace_back();
  Tensor& buffer = buffers_[next_++];
  if (!buffer.defined() || buffer.shape() != t.shape() || buffer.dtype() != t.dtype()) {
    buffer = Tensor();  // its bytes go back before the new ones are booked
    buffer = Tensor::Empty(host_, t.shape(), t.dtype(), MemCategory::kCheckpoint);
  }
  backend.Copy(t, buffer);
  return buffer;
}

}  // namespace baton
