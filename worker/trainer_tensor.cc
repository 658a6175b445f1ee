// The tensor-parallel parts of a Trainer (parallel.tensor > 1): checkpoints hold whole tensors,
// so a stage's tensor ranks make each cut tensor whole before it is written and take their part
// of it after it is read (docs/checkpoints.md).
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "model/init.h"
#include "worker/trainer.h"

namespace baton {
namespace {

// The tensors of a param that a checkpoint stores with it and that are cut like its value.
std::vector<Tensor ParamTensors::*> CutFields() {
  return {&ParamTensors::value, &ParamTensors::master, &ParamTensors::adam_m,
          &ParamTensors::adam_v};
}

}  // namespace

LayerTensors Trainer::WholeLayer(const LayerTensors& layer) {
  BATON_CHECK(tensor_group_ != nullptr, "WholeLayer is for tensor-parallel trainers");
  LayerTensors whole = layer;
  for (ParamTensors& p : whole.params) {
    if (!p.split.cut()) continue;
    BATON_CHECK(!p.adam_m_absmax.defined(),
                "{}: 8-bit optimizer state is not cut across tensor ranks", p.name);
    for (Tensor ParamTensors::*field : CutFields()) {
      Tensor& part = p.*field;
      if (!part.defined()) continue;
      // This rank's part at its place in zeros; the group's sum is then the whole (x + 0 = x).
      const Shape shape = WholeShape(part.shape(), p.split);
      Tensor sum =
          Tensor::Empty(backend_.allocator(), shape, part.dtype(), MemCategory::kWorkspace);
      if (!IsMeta(backend_)) {  // the memory planner books the sum and moves no bytes
        std::vector<std::byte> host(static_cast<size_t>(NumElements(shape)) * SizeOf(part.dtype()));
        InsertPart(HostBytes(backend_, part).data(), shape, SizeOf(part.dtype()), p.split,
                   host.data());
        backend_.Copy(Tensor::Wrap(host.data(), shape, part.dtype()), sum);
        backend_.Synchronize();
      }
      tensor_group_->AllReduceSum(sum);
      part = sum;
    }
    p.split = TensorSplit();
  }
  return whole;
}

LayerTensors Trainer::WholeTemporaries(const LayerTensors& layer) {
  LayerTensors whole = layer;
  for (ParamTensors& p : whole.params) {
    if (!p.split.cut()) continue;
    for (Tensor ParamTensors::*field : CutFields()) {
      Tensor& part = p.*field;
      if (!part.defined()) continue;
      part = Tensor::Empty(backend_.allocator(), WholeShape(part.shape(), p.split), part.dtype(),
                           MemCategory::kWorkspace);
    }
  }
  return whole;
}

void Trainer::KeepParts(const LayerTensors& whole, const LayerTensors& layer) {
  BATON_CHECK(whole.params.size() == layer.params.size(), "{}: {} whole tensors for {} params",
              layer.name, whole.params.size(), layer.params.size());
  for (size_t i = 0; i < layer.params.size(); ++i) {
    const ParamTensors& from = whole.params[i];
    const ParamTensors& to = layer.params[i];
    if (!to.split.cut()) continue;
    for (Tensor ParamTensors::*field : CutFields()) {
      const Tensor& source = from.*field;
      Tensor target = to.*field;
      if (!target.defined()) continue;
      std::vector<std::byte> part(target.nbytes());
      ExtractPart(HostBytes(backend_, source).data(), source.shape(), SizeOf(source.dtype()),
                  to.split, part.data());
      backend_.Copy(Tensor::Wrap(part.data(), target.shape(), target.dtype()), target);
      backend_.Synchronize();
    }
  }
}

}  // namespace baton
