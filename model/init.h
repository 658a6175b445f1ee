// Parameter allocation and the GPT-2 / nanoGPT initialisation.
//
// Every parameter's value is a pure function of (seed, layer index, param index), so a layer's
// weights are the same whichever process builds it:
// - weight matrices and embeddings: N(0, 0.02); the two output projections of a block
//   (attn.c_proj.weight, mlp.c_proj.weight): N(0, 0.02 / sqrt(2 L)); biases 0; LayerNorm 1 / 0.
// - normals come from Rng::ForStream(seed, {layer_index, param_index}), param_index being the
//   parameter's position in the layer's params(); drawn in double, row-major, scaled by the std,
//   rounded to f32 (nearest) and then to the param dtype (nearest even).
// - the head's copy of "wte.weight" is drawn from the embedding's stream (layer 0, param 0), so it
//   equals the embedding's bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/expert_parallel.h"
#include "model/layer.h"

namespace baton {

inline constexpr double kInitStd = 0.02;
// The graph position of the embedding, whose stream the head's tied wte copy is drawn from.
inline constexpr int kEmbeddingLayerIndex = 0;

double OutputProjectionStd(int num_layers);  // 0.02 / sqrt(2 L)

// A parameter with an uninitialised value (`dtype`, booked as params) and a zeroed f32 grad
// (booked as grads); weight_decay is set for rank >= 2.
Param NewParam(Backend& backend, std::string name, Shape shape, DType dtype);

// `t` (any device, any dtype) as its raw bytes on the host.
std::vector<std::byte> HostBytes(Backend& backend, const Tensor& t);
// `value` (any device, any float dtype) as host f32 values.
std::vector<float> HostValues(Backend& backend, const Tensor& value);
// Writes host f32 values into `value` (any float dtype, any device), rounding to nearest even on
// the host so every backend ends with the same bits.
void UploadValues(Backend& backend, const std::vector<float>& host, Tensor& value);

// value ~ N(0, std^2) from the stream (seed, layer_index, param_index), as above. With a cut
// `split`, value is that part of the full tensor the stream draws (full shape PartShape's
// inverse: the sections), so every tensor-parallel layout holds the same numbers.
void InitNormal(Backend& backend, Tensor& value, uint64_t seed, int layer_index, int param_index,
                double std, const TensorSplit& split = {});
// value = constant everywhere.
void InitConstant(Backend& backend, Tensor& value, float constant);

enum class ParamInit {
  kNormal,            // N(0, 0.02)
  kOutputProjection,  // N(0, 0.02 / sqrt(2 L))
  kZeros,
  kOnes,
  kNormalStd,  // N(0, ParamDef::std^2): the factors of a low-rank matrix (model/block.h)
};

struct ParamDef {
  std::string name;
  Shape shape;
  ParamInit init;
  double std = 0.0;  // kNormalStd only
  // A copy of the parameter `name` of graph layer `source_layer` (a shared block's, model.share):
  // drawn from that layer's stream, marked Param::tied (when source_layer is not this layer).
  int source_layer = -1;
  // Tensor parallelism: how the full parameter (`shape`) is cut across the stage's tensor group
  // (dim and sections; part and parts come from the group). NewParams then allocates this rank's
  // part and fills it with that part of the full parameter's values.
  TensorSplit split = {};
};

// Finds a parameter of this process by name (the shared originals already built here), or null.
using LocalParams = std::function<Param*(const std::string& name)>;

// Allocates and initialises `defs` in order; a parameter's param_index is its position there.
// A def with a source layer whose parameter `local` finds is not allocated: the new Param shares
// that one's value and grad (so the memory is held once). With a tensor group of T > 1, a def
// with a split is allocated as this rank's part of it (Param::split set); so, with an expert
// group of E > 1, is a def whose split is over the experts (SplitOver::kExperts: part t E + j of
// T E, tensor rank t's fold split over its expert group); without one, such a def folds over the
// tensor ranks (a tensor cut of its dimension 0: whole experts each).
std::vector<Param> NewParams(Backend& backend, const std::vector<ParamDef>& defs, DType dtype,
                             uint64_t seed, int layer_index, int num_layers,
                             const LocalParams& local = nullptr,
                             const TensorGroup* tensor = nullptr,
                             const ExpertGroup* experts = nullptr);

}  // namespace baton
