// The cost model: per layer of the graph, parameters and FLOPs, computed analytically (closed
// forms, not by building layers; a block's are its sublayers', model/sublayer.h), so a
// partitioner can balance stages and a simulator can time them before anything runs.
// docs/model.md derives every formula. Memory is not modelled here: the memory planner runs the
// real layers on a meta backend (planner/memory_planner.h).
// Notation: V vocab, maxT context, C width, NH heads, L num_layers; per micro-batch B sequences of
// T tokens, N = B*T rows.
//
// - Parameters. ParamCount counts each model parameter once: the head's tied copy of wte is the
//   embedding's parameter, so ParamCount(head) = 2C (ln_f) and GPT-2 124M sums to 124,439,808;
//   a shared block (model.share) counts only what its group's first block does not hold.
//   StoredParamCount is what a layer allocates on its own: the head's includes its V*C copy,
//   which a range holding the embedding too shares (one stage: GPT-2 124M stores 124,439,808).
//   A low-rank linear (model.low_rank) holds r(in + out) weights instead of in*out.
// - FLOPs: 2 per multiply-add of every matrix product (a low-rank linear's two) (GEMMs, and
// attention's QK^T and PV counted
//   for the full TxT, not halved for the causal mask: the PaLM / Megatron MFU convention);
//   elementwise work, LayerNorm, softmax and the loss are not counted. Backward = 2 x forward.
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
  bool flash_attention = false;  // model.attention: flash (false: materialized)
};

// ---- parameters
int64_t ParamCount(const LayerSpec& spec, const ModelDims& dims);
int64_t StoredParamCount(const LayerSpec& spec, const ModelDims& dims);
// A block with experts: its stacked experts' elements, every expert's c_fc (C, 2I) and c_proj
// (I, C); 0 for every other layer.
int64_t ExpertParamCount(const LayerSpec& spec, const ModelDims& dims);
// What a process holding graph[first..last] allocates: each layer's stored parameters, a share
// group's shared parameters once (model.share).
int64_t StoredParamCount(const std::vector<LayerSpec>& graph, int first, int last,
                         const ModelDims& dims);

// ---- per layer, per micro-batch
int64_t ForwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);
int64_t BackwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);
// The forward work Backward redoes, not counted in BackwardFlops: under selective recompute c_fc
// and, with materialized attention, attention's QK^T and PV; with flash attention its QK^T
// (the backward recomputes the probabilities block by block), selective or not.
int64_t RecomputeFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape);

// ---- sums over graph[first..last] (inclusive, positions in the graph)
int64_t ParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims);  // whole model
// The parameters one token passes through: the whole model less, in each MoE block, the
// experts it is not routed to (num_experts - top_k of them).
int64_t ActiveParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims);
int64_t ForwardFlops(const std::vector<LayerSpec>& graph, int first, int last,
                     const ModelDims& dims, const MicroBatchShape& shape);

// Training FLOPs per token (forward + backward, no recompute) of the whole graph at sequence
// length T: 3 x the forward FLOPs per token. For GPT it equals 6 N_gemm + 12 L T C, N_gemm the
// parameters in weight matrices (the token matrix once, via the LM head; no wpe, biases, LN).
// This is the numerator of MFU.
double ModelFlopsPerToken(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                          int64_t seq_len);

}  // namespace baton
