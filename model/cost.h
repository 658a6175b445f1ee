// The cost model: per layer of the graph, parameters, FLOPs and bytes, computed analytically
// (closed forms, not by building layers), so a planner can size stages before anything runs.
// docs/model.md derives every formula. Notation: V vocab, maxT context, C width, NH heads,
// L num_layers; per micro-batch B sequences of T tokens, N = B*T rows, a = bytes per activation
// element (the activation dtype), p = bytes per parameter element.
//
// - Parameters. ParamCount counts each model parameter once: the head's tied copy of wte is the
//   embedding's parameter, so ParamCount(head) = 2C (ln_f) and GPT-2 124M sums to 124,439,808.
//   StoredParamCount is what a layer allocates on its own: the head's includes its V*C copy.
// - FLOPs: 2 per multiply-add of every matrix product (GEMMs, and attention's QK^T and PV counted
//   for the full TxT, not halved for the causal mask: the PaLM / Megatron MFU convention);
//   elementwise work, LayerNorm, softmax and the loss are not counted. Backward = 2 x forward.
// - Bytes are exact: StashBytes is Stash::bytes() after Forward, WeightStashBytes after
//   BackwardInput, OutputBytes the returned tensor's size, and the workspace peaks what the layer
//   itself books as workspace (the CPU backend's f32 staging of 16-bit tensors comes on top).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/dims.h"
#include "model/graph.h"

namespace baton {

struct MicroBatchShape {
  int64_t batch_size = 1;  // B: sequences in the micro-batch
  int64_t seq_len = 1;     // T <= context
  DType act_dtype = DType::kF32;
  bool selective_recompute = false;
};

// ---- parameters
int64_t ParamCount(const LayerSpec& spec, const ModelDims& dims);
int64_t StoredParamCount(const LayerSpec& spec, const ModelDims& dims);
// Booked as params by the layer alone: StoredParamCount * p.
int64_t ParamBytes(const LayerSpec& spec, const ModelDims& dims, DType param_dtype);
// Booked as grads (always f32): StoredParamCount * 4.
int64_t GradBytes(const LayerSpec& spec, const ModelDims& dims);

// ---- per layer, per micro-batch
int64_t ForwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);
int64_t BackwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);
// The forward work Backward redoes under selective recompute (attention QK^T and PV, c_fc).
int64_t RecomputeFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);
int64_t StashBytes(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);
int64_t WeightStashBytes(const LayerSpec& spec, const ModelDims& dims,
                         const MicroBatchShape& shape);
int64_t OutputBytes(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);

// Peak bytes the layer books as workspace within one call of each kind.
struct WorkspacePeaks {
  int64_t forward = 0;
  int64_t backward = 0;
  int64_t backward_input = 0;
  int64_t backward_weight = 0;
  int64_t max() const;
};
WorkspacePeaks WorkspaceBytes(const LayerSpec& spec, const ModelDims& dims,
                              const MicroBatchShape& shape);

// ---- sums over graph[first..last] (inclusive, positions in the graph)
int64_t ParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims);  // whole model
// With both the embedding and the head in the range, TieEmbedding shares one wte value: it is
// booked once as params, but its two grads both are.
int64_t ParamBytes(const std::vector<LayerSpec>& graph, int first, int last, const ModelDims& dims,
                   DType param_dtype);
int64_t GradBytes(const std::vector<LayerSpec>& graph, int first, int last, const ModelDims& dims);
int64_t ForwardFlops(const std::vector<LayerSpec>& graph, int first, int last,
                     const ModelDims& dims, const MicroBatchShape& shape);
int64_t StashBytes(const std::vector<LayerSpec>& graph, int first, int last, const ModelDims& dims,
                   const MicroBatchShape& shape);

// Training FLOPs per token (forward + backward, no recompute) of the whole graph at sequence
// length T: 3 x the forward FLOPs per token. For GPT it equals 6 N_gemm + 12 L T C, N_gemm the
// parameters in weight matrices (the token matrix once, via the LM head; no wpe, biases, LN).
// This is the numerator of MFU.
double ModelFlopsPerToken(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                          int64_t seq_len);

}  // namespace baton
