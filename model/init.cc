// Parameter allocation and initialisation (see init.h for the rule).
#include "model/init.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/random.h"

namespace baton {
double OutputProjectionStd(int num_layers) {
  BATON_CHECK(num_layers > 0, "num_layers must be positive, got {}", num_layers);
  return kInitStd / std::sqrt(2.0 * num_layers);
}

Param NewParam(Backend& backend, std::string name, Shape shape, DType dtype) {
  BATON_CHECK(IsFloating(dtype), "parameter {} must be a float dtype, got {}", name, Name(dtype));
  Param param;
  param.name = std::move(name);
  param.value = Tensor::Empty(backend.allocator(), shape, dtype, MemCategory::kParams);
  param.grad = Tensor::Empty(backend.allocator(), shape, DType::kF32, MemCategory::kGrads);
  backend.Zero(param.grad);
  param.weight_decay = shape.size() >= 2;
  return param;
}

// Writes host f32 values into `value` (any float dtype, any device). The conversion happens
// here, on the host, so every backend ends with the same bits; the backend only moves bytes.
void UploadValues(Backend& backend, const std::vector<float>& host, Tensor& value) {
  BATON_CHECK(static_cast<int64_t>(host.size()) == value.numel(), "{} values for {}", host.size(),
              value.ToString());
  // Host staging is transient setup memory outside any device ledger.
  std::vector<char> bytes(host.size() * SizeOf(value.dtype()));
  ConvertFloats(host.data(), DType::kF32, bytes.data(), value.dtype(), host.size());
  const Tensor staged = Tensor::Wrap(bytes.data(), value.shape(), value.dtype());
  backend.Copy(staged, value);
  backend.Synchronize();  // `bytes` dies on return
}

std::vector<std::byte> HostBytes(Backend& backend, const Tensor& t) {
  std::vector<std::byte> bytes(t.nbytes());
  Tensor host = Tensor::Wrap(bytes.data(), t.shape(), t.dtype());
  backend.Copy(t, host);
  backend.Synchronize();
  return bytes;
}

std::vector<float> HostValues(Backend& backend, const Tensor& value) {
  const size_t n = static_cast<size_t>(value.numel());
  const std::vector<std::byte> raw = HostBytes(backend, value);
  std::vector<float> values(n);
  ConvertFloats(raw.data(), value.dtype(), values.data(), DType::kF32, n);
  return values;
}

void InitNormal(Backend& backend, Tensor& value, uint64_t seed, int layer_index, int param_index,
                double std, const TensorSplit& split) {
  BATON_CHECK(layer_index >= 0 && param_index >= 0, "stream ids ({}, {}) must be non-negative",
              layer_index, param_index);
  if (IsMeta(backend)) return;  // the memory planner: no values to draw
  Rng rng = Rng::ForStream(
      seed, {static_cast<uint64_t>(layer_index), static_cast<uint64_t>(param_index)});
  const Shape full_shape = WholeShape(value.shape(), split);
  std::vector<float> host(static_cast<size_t>(NumElements(full_shape)));
  for (float& v : host) v = static_cast<float>(rng.NextNormal() * std);
  if (split.cut()) {
    BATON_CHECK(PartShape(full_shape, split) == value.shape(), "{} is not part {} of {} of {}",
                value.ToString(), split.part, split.parts, ToString(full_shape));
    std::vector<float> part(static_cast<size_t>(value.numel()));
    ExtractPart(host.data(), full_shape, sizeof(float), split, part.data());
    host = std::move(part);
  }
  UploadValues(backend, host, value);
}

void InitConstant(Backend& backend, Tensor& value, float constant) {
  if (constant == 0.0f || IsMeta(backend)) {
    backend.Zero(value);
    return;
  }
  UploadValues(backend, std::vector<float>(static_cast<size_t>(value.numel()), constant), value);
}

std::vector<Param> NewParams(Backend& backend, const std::vector<ParamDef>& defs, DType dtype,
                             uint64_t seed, int layer_index, int num_layers,
                             const LocalParams& local, const TensorGroup* tensor,
                             const ExpertGroup* experts) {
  std::vector<Param> params;
  params.reserve(defs.size());
  for (const ParamDef& def : defs) {
    const int param_index = static_cast<int>(params.size());
    const bool copy = def.source_layer >= 0 && def.source_layer != layer_index;
    const Param* original = copy && local ? local(def.name) : nullptr;
    TensorSplit split;
    // Stacked experts split over an expert group (inside each tensor rank's fold: part t E + j of
    // T E), or without one fold over the tensor ranks (a tensor cut of their dimension 0;
    // model/moe_sublayer.cc).
    const bool over_experts = def.split.over == SplitOver::kExperts && ExpertSize(experts) > 1;
    const int parts = over_experts ? TensorSize(tensor) * ExpertSize(experts) : TensorSize(tensor);
    if (def.split.dim >= 0 && parts > 1) {
      split = def.split;
      split.part = over_experts ? TensorRank(tensor) * ExpertSize(experts) + ExpertRank(experts)
                                : TensorRank(tensor);
      split.parts = parts;
      split.over = over_experts ? SplitOver::kExperts : SplitOver::kTensor;
    }
    const Shape shape = PartShape(def.shape, split);
    if (original != nullptr) {  // the group's parameter already lives here: hold it once
      BATON_CHECK(original->value.shape() == shape && original->value.dtype() == dtype,
                  "shared parameter {}: {} here, {} where it lives", def.name, ToString(shape),
                  original->value.ToString());
      Param& param = params.emplace_back(*original);
      param.tied = true;
      param.source_layer = def.source_layer;
      continue;
    }
    Param& param = params.emplace_back(NewParam(backend, def.name, shape, dtype));
    param.split = split;
    param.stacked_experts = def.split.over == SplitOver::kExperts;
    param.weight_decay = def.shape.size() >= 2;
    if (copy) {
      param.tied = true;
      param.source_layer = def.source_layer;
    }
    const int stream_layer = def.source_layer >= 0 ? def.source_layer : layer_index;
    switch (def.init) {
      case ParamInit::kNormal:
        InitNormal(backend, param.value, seed, stream_layer, param_index, kInitStd, split);
        break;
      case ParamInit::kOutputProjection:
        InitNormal(backend, param.value, seed, stream_layer, param_index,
                   OutputProjectionStd(num_layers), split);
        break;
      case ParamInit::kNormalStd:
        InitNormal(backend, param.value, seed, stream_layer, param_index, def.std, split);
        break;
      case ParamInit::kZeros:
        InitConstant(backend, param.value, 0.0f);
        break;
      case ParamInit::kOnes:
        InitConstant(backend, param.value, 1.0f);
        break;
    }
  }
  return params;
}

}  // namespace baton
