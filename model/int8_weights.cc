// INT8 weights (see int8_weights.h).
#include "model/int8_weights.h"

#include <vector>

#include "core/error.h"
#include "kernels/quantize.h"
#include "model/init.h"

namespace baton {

bool TakesInt8Weights(const Param& param) {
  return param.value.dim() == 2 && param.name != "wte.weight" && param.name != "wpe.weight" &&
         param.name != "lm_head.weight";
}

void QuantizeParamInt8(Backend& backend, Param& param) {
  BATON_CHECK(TakesInt8Weights(param) && IsFloating(param.value.dtype()),
              "parameter {} ({}) cannot take INT8 weights", param.name, param.value.ToString());
  const int64_t rows = param.value.size(0), cols = param.value.size(1);
  Tensor codes =
      Tensor::Empty(backend.allocator(), param.value.shape(), DType::kI8, MemCategory::kParams);
  Tensor scale = Tensor::Empty(backend.allocator(), {cols}, DType::kF32, MemCategory::kParams);
  if (!IsMeta(backend)) {
    // Host staging is transient setup memory outside any device ledger.
    const std::vector<float> dense = HostValues(backend, param.value);
    std::vector<int8_t> q(dense.size());
    std::vector<float> s(static_cast<size_t>(cols));
    QuantizeColumnsInt8(dense.data(), rows, cols, q.data(), s.data());
    backend.Copy(Tensor::Wrap(q.data(), codes.shape(), DType::kI8), codes);
    backend.Copy(Tensor::Wrap(s.data(), scale.shape(), DType::kF32), scale);
    backend.Synchronize();
  }
  param.value = std::move(codes);
  param.scale = std::move(scale);
  param.grad = Tensor();
}

void MakeInt8InferenceLayer(Backend& backend, Layer& layer) {
  for (Param* p : layer.params()) {
    if (TakesInt8Weights(*p)) {
      QuantizeParamInt8(backend, *p);
    } else {
      p->grad = Tensor();
    }
  }
}

}  // namespace baton
