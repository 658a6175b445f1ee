// Baton's typed run configuration: the YAML file parsed once, at the edge, into these structs.
//
// LoadConfig reads a YAML file, applies `--set section.key=value` overrides, converts every value
// to its type and runs Validate(); any unknown section or key, wrong type, out-of-range value or
// inconsistent combination is a baton::Error whose message names the file and line (or the
// --set) and the full dotted key, e.g.
//   configs/x.yaml:12: train.stepz: unknown key (did you mean steps?)
// Past this point nothing parses strings: code reads the fields below. The schema with its
// defaults is documented in docs/config.md; config/config_schema.cc is its single source of truth.
//
// A Config is a plain value: copy it freely; all functions here are thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/layer_kind.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/timeouts.h"
#include "core/units.h"
#include "scheduler/schedule_kinds.h"

namespace baton {

// gpt: GPT-2 blocks; mlp: attention-free GPT-2 MLP blocks; custom: a graph of GPT-2 layers;
// llama: Llama blocks (RMSNorm, rotary positions, SwiGLU, grouped-query attention; docs/model.md);
// qwen2: Llama blocks with biases on q, k and v (Qwen2 / Qwen2.5); mistral: Llama blocks, named
// as Mistral's (sliding-window attention with model.sliding_window, which any of them takes);
// qwen3: Llama blocks with an RMSNorm of each query and key head (Qwen3, Qwen3-MoE).
enum class ModelPreset { kGpt, kMlp, kCustom, kLlama, kQwen2, kMistral, kQwen3 };
// Llama's blocks or a variant of them: the presets the Llama knobs (num_kv_heads, rope_*, ...)
// and Hugging Face Llama-layout folders are for.
inline bool LlamaLike(ModelPreset preset) {
  return preset == ModelPreset::kLlama || preset == ModelPreset::kQwen2 ||
         preset == ModelPreset::kMistral || preset == ModelPreset::kQwen3;
}
// Whether the LM head is the token embedding's transpose: auto = the preset's (GPT-2 tied, Llama
// untied).
enum class TieEmbeddings { kAuto, kTied, kUntied };
// How attention is computed (docs/model.md): flash-style, keeping only each row's log-sum-exp
// for backward, or with the T x T probabilities materialised and stashed.
enum class AttentionKind { kFlash, kMaterialized };
// How the blocks' weight matrices are held: dense in precision.dtype, or INT8 codes with f32
// per-column scales (model/int8_weights.h), for inference only (baton eval, baton generate).
enum class WeightFormat { kDense, kInt8 };
// Which sublayers of a block cross-layer sharing (model.share) shares: both (ALBERT), the
// attention sublayer (ln_1, attn.*) or the MLP sublayer (ln_2, mlp.*).
enum class ShareWhat { kAll, kAttention, kMlp };
// How AdamW keeps m and v: f32, or block-wise quantised to 8 bits (kernels/quantize.h).
enum class OptimizerState { kF32, kInt8 };
// Which weights magnitude pruning removes (prune.pattern): the smallest of each matrix, or the two
// smallest of every four consecutive inputs of each output channel (NVIDIA's 2:4 sparsity).
enum class PrunePattern { kUnstructured, k2of4 };
// ZeRO-3: how long a layer's gathered parameters stay (docs/parallel.md, "ZeRO-3").
enum class Zero3Keep { kMicrobatch, kStep };
enum class DataFormat { kAuto, kText, kBin };
enum class LrSchedule { kConstant, kCosine, kLinear, kWsd };
// ScheduleKind and its names: scheduler/schedule_kinds.h's table.
// The V-shaped schedules (zb-v, v-half, v-min, dualpipev): 2 chunks per stage, whatever
// parallel.chunks says (scheduler/generators.h ChunksFor).
bool IsVShaped(ScheduleKind schedule);
struct ParallelConfig;
// The chunks per stage parallel.schedule runs (without a schedule_file): 2 for the V-shaped ones
// and, when parallel.chunks is 1 (left out), for those of several chunks (interleaved,
// interleaved-zb, looped-bfs); else parallel.chunks.
int ScheduleChunks(const ParallelConfig& parallel);
enum class PartitionPolicy { kUniform, kParameters, kFlops };

// Activation checkpointing: `none`, `every:K` (segments of K layers keep only their input) or
// `selective` (recompute attention scores/softmax and the GELU input only).
struct CheckpointPolicy {
  enum class Kind { kNone, kEvery, kSelective };
  Kind kind = Kind::kNone;
  int every = 0;  // K >= 1 for kEvery, 0 otherwise

  static CheckpointPolicy None() { return {}; }
  static CheckpointPolicy Every(int k) { return {Kind::kEvery, k}; }
  static CheckpointPolicy Selective() { return {Kind::kSelective, 0}; }
  std::string ToString() const;  // "none", "every:2", "selective"
  bool operator==(const CheckpointPolicy&) const = default;
};

// Parses "none" | "every:K" (K >= 1) | "selective"; throws baton::Error otherwise.
CheckpointPolicy ParseCheckpointPolicy(std::string_view text);

// parallel.cut: "A-B,C-D,..." -> {{A, B}, {C, D}, ...} (first, last layer of each virtual stage,
// each first <= last, each starting right after the previous one ends, the first at 0); "" gives
// {}. Throws baton::Error otherwise. FormatCut is its inverse.
std::vector<std::pair<int, int>> ParseCut(std::string_view text);
std::string FormatCut(const std::vector<std::pair<int, int>>& ranges);

// The names used in YAML: "gpt", "embedding", "bin", "cosine", "1f1b", "flops", ...
std::string_view Name(ModelPreset preset);
std::string_view Name(AttentionKind attention);
std::string_view Name(WeightFormat weights);
std::string_view Name(ShareWhat what);
std::string_view Name(OptimizerState state);
std::string_view Name(PrunePattern pattern);
std::string_view Name(Zero3Keep keep);
std::string_view Name(DataFormat format);
std::string_view Name(LrSchedule schedule);
std::string_view Name(ScheduleKind schedule);
std::string_view Name(PartitionPolicy policy);

// How a mixture-of-experts layer picks a token's experts (docs/model.md, "Mixture of experts").
enum class MoeRouter {
  kSoftmaxTopk,  // softmax over all experts, the top k (renormalised when norm_topk_prob)
  kTopkSoftmax,  // the top k logits, softmax over those k
  kSigmoidBias,  // sigmoid scores, the top k of score + a per-expert bias that only routes
};

struct MoeConfig {
  int64_t num_experts = 0;               // 0: dense blocks
  int64_t top_k = 2;                     // experts per token
  int64_t expert_intermediate_size = 0;  // each expert's SwiGLU width; 0 = the model's
  int64_t shared_experts = 0;            // experts every token passes through (one fused MLP)
  int64_t shared_expert_intermediate_size = 0;  // per shared expert; 0 = the experts'
  bool shared_expert_gate = false;              // sigmoid(x w) scales the shared output
  int64_t first_dense_layers = 0;               // the first blocks keep a dense MLP
  int64_t every = 1;                            // then every `every`-th block is MoE
  MoeRouter router = MoeRouter::kSoftmaxTopk;
  bool norm_topk_prob = true;       // softmax_topk: renormalise the k weights (Mixtral)
  double aux_loss_coef = 0.0;       // Switch load-balancing loss's weight
  double z_loss_coef = 0.0;         // router z-loss's weight
  double capacity_factor = 0.0;     // 0 = dropless; else per-expert capacity factor
  double bias_update_rate = 0.001;  // sigmoid_bias: the bias's step per training step
  bool operator==(const MoeConfig&) const = default;
};
std::string_view Name(MoeRouter router);

struct ModelConfig {
  ModelPreset preset = ModelPreset::kGpt;
  int64_t vocab_size = 256;
  int64_t context = 128;  // maximum sequence length (positions)
  int num_layers = 4;     // transformer (gpt) or MLP (mlp) blocks; not used by custom
  int num_heads = 4;
  int64_t width = 128;            // the residual stream's channels C
  std::vector<LayerKind> layers;  // the graph, for preset custom only (empty otherwise)
  std::string init_from;          // a safetensors file to start from; "" = random init
  AttentionKind attention = AttentionKind::kFlash;
  WeightFormat weights = WeightFormat::kDense;
  // ALBERT-style sharing (docs/model.md, "Sharing and low rank"): consecutive groups of
  // share.group blocks use one parameter set for the shared sublayers; 1 = no sharing.
  int share_group = 1;
  ShareWhat share_what = ShareWhat::kAll;
  // Low-rank layers: W (in, out) = U (in, r) V (r, out) for attention's c_attn and c_proj
  // (low_rank.attn) and the MLP's c_fc and c_proj (low_rank.mlp); 0 = dense.
  int64_t low_rank_attn = 0;
  int64_t low_rank_mlp = 0;
  // Llama (preset llama; Hugging Face LlamaConfig's names): key/value heads (0 = num_heads),
  // the SwiGLU hidden width (0 = 8C/3 rounded up to a multiple of 256, Meta's rule), the
  // RMSNorm epsilon, rotary positions' theta and optional Llama 3 scaling (factor 0 = none).
  int64_t num_kv_heads = 0;
  int64_t intermediate_size = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double rope_scaling_factor = 0.0;
  double rope_scaling_low_freq_factor = 1.0;
  double rope_scaling_high_freq_factor = 4.0;
  int64_t rope_scaling_original_context = 8192;
  // Sliding-window attention (Mistral's): each token attends over itself and the W - 1 tokens
  // before it; 0 = the whole causal context.
  int64_t sliding_window = 0;
  // A head size set apart from the width (Qwen3's head_dim: the queries' NH x head_dim columns
  // need not be C); 0 = width / num_heads.
  int64_t head_dim = 0;
  TieEmbeddings tie_embeddings = TieEmbeddings::kAuto;
  // Mixture of experts (model.moe; docs/model.md, "Mixture of experts"): moe.num_experts > 0
  // replaces the MLP of the chosen Llama-family blocks by `num_experts` SwiGLU experts, each
  // token going to `top_k` of them (and to `shared_experts` shared ones), chosen by `router`.
  MoeConfig moe;
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  std::string path;  // a text file, a folder of text files, or a .bin token file (required)
  DataFormat format = DataFormat::kAuto;
  int64_t seq_len = 0;  // tokens per sequence; 0 = model.context
  // Held-out data (docs/data.md, "Evaluation"): its own file or folder, or the tail fraction of
  // `path`'s stream, which training windows then never reach. At most one of the two.
  std::string eval_path;
  double eval_fraction = 0.0;
  // A byte-level BPE tokenizer (data/tokenizer.h: a tokenizer.json, a vocab.json with merges.txt
  // beside it, or a folder holding either) that text data is encoded with and that generate and
  // export use; "" = byte-level (one token per byte).
  std::string tokenizer;
  // Packed documents (docs/data.md, "Packed documents"): each row is cut into documents at
  // document_separator (which ends its document); attention stays within a document, positions
  // restart at each, and the prediction across a boundary is not counted. -1 = no separator.
  int64_t document_separator = -1;
  bool packing = false;  // needs document_separator
  bool operator==(const DataConfig&) const = default;
};

// True when the config names held-out data (data.eval_path or data.eval_fraction).
inline bool HasEvalData(const DataConfig& data) {
  return !data.eval_path.empty() || data.eval_fraction > 0.0;
}

struct TrainConfig {
  int64_t steps = 100;
  int batch_size = 16;    // sequences per optimizer step
  int micro_batches = 4;  // the batch is cut into this many equal micro-batches
  double lr = 1e-3;
  double min_lr = 0.0;  // the floor the decaying schedules end at
  int64_t warmup_steps = 0;
  LrSchedule lr_schedule = LrSchedule::kCosine;
  int64_t decay_steps = 0;  // wsd: the last steps, decaying linearly to min_lr; 0 for the others
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global-norm clip; 0 disables
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  uint64_t seed = 1337;
  int64_t log_every = 10;
  int64_t eval_every = 0;    // steps between evaluations (and after the last); 0: none
  int64_t eval_batches = 0;  // batches of batch_size windows per evaluation; 0: all that fit
  bool operator==(const TrainConfig&) const = default;
};

struct ParallelConfig {
  int stages = 1;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  std::string schedule_file;  // a schedule saved as CSV; when set it replaces `schedule`
  // Model chunks per stage (interleaved, interleaved-zb, looped-bfs, or a schedule file); 1 (left
  // out) with a schedule of several chunks means the least it runs, 2: ScheduleChunks().
  int chunks = 1;
  PartitionPolicy partition = PartitionPolicy::kFlops;
  // An explicit cut, e.g. "0-4,5-9": the first-last graph layers of each virtual stage in order
  // (what `baton tune` writes); "" = cut by `partition`. The planner checks it covers the graph.
  std::string cut;
  CheckpointPolicy checkpoint;
  int replicas = 1;  // data-parallel replicas of the whole pipeline
  // Tensor-parallel ranks per stage (Megatron; docs/parallel.md, "Tensor parallelism"): each
  // stage's heads, hidden units and vocabulary split over this many processes.
  int tensor = 1;
  // Megatron's sequence parallelism with tensor > 1: the activations between the layers' cut
  // parts (norms, residuals) are cut along the sequence over the tensor ranks too.
  bool sequence_parallel = false;
  // 1: ZeRO-1, optimizer state and fp32 masters sharded across the replicas; 2: ZeRO-2, the
  // gradients' reduced sums too (the full gradients released between steps); 3: ZeRO-3, the
  // parameters too (each layer's gathered for its use and released after, per zero3_keep)
  int zero = 0;
  // Expert parallelism (docs/parallel.md, "Expert parallelism"): each MoE layer's experts split
  // over this many replicas of a stage (an expert group: replicas [g E, (g + 1) E)); the tokens
  // go to their experts and back by all-to-all. Divides replicas and model.moe.num_experts.
  int experts = 1;
  // ZeRO-3: release a layer's gathered parameters after each use (microbatch) or at the step's
  // end (step): bytes moved per step against the peak.
  Zero3Keep zero3_keep = Zero3Keep::kMicrobatch;
  double timeout_s = Seconds(kDefaultWait);  // longest any blocking wait may take
  double heartbeat_timeout_s =
      Seconds(kDefaultHeartbeatTimeout);  // a silent worker is dead after this
  bool operator==(const ParallelConfig&) const = default;
};

struct OptimizerConfig {
  // int8: m and v of every tensor of >= kMinQuantizedElements elements in 8 bits per value plus
  // an f32 absmax per block of 256 (docs/memory.md); smaller tensors keep f32.
  OptimizerState state = OptimizerState::kF32;
  bool operator==(const OptimizerConfig&) const = default;
};

// Magnitude pruning during training (docs/memory.md, "Pruning"): at the end of step at_step the
// blocks' weight matrices lose their `sparsity` smallest weights (by `pattern`), and masks keep
// them at zero from then on (gradients masked before, weights after every optimizer step).
struct PruneConfig {
  int64_t at_step = 0;  // 0: no pruning
  double sparsity = 0.5;
  PrunePattern pattern = PrunePattern::kUnstructured;
  bool enabled() const { return at_step > 0; }
  bool operator==(const PruneConfig&) const = default;
};

struct PrecisionConfig {
  DType dtype = DType::kF32;  // kF32, kBF16 or kF16 ("fp32", "bf16", "fp16")
  double initial_loss_scale = 65536.0;
  int64_t loss_scale_growth_interval = 2000;
  double max_loss_scale = 16777216.0;  // 2^24: growth stops here (a scale at f32's limit is inf)
  bool operator==(const PrecisionConfig&) const = default;
};

struct DeviceConfig {
  DeviceType type = DeviceType::kCpu;
  int threads = 1;  // threads per process
  // Each worker process on CPUs of its own (core/cpu_affinity.h): local rank k on the k-th block
  // of `threads` CPUs; a rank whose block is not there runs unpinned (with a warning).
  bool pin_threads = false;
  bool operator==(const DeviceConfig&) const = default;
};

struct OutputConfig {
  std::string dir = "out";
  int64_t checkpoint_every = 0;  // steps between intermediate checkpoints; 0 = none
  bool final_checkpoint = true;  // every run ends with a checkpoint of its last step
  // Checkpoint retention (CheckpointWriter::Prune): keep the newest N complete checkpoints (0 =
  // all) and every one whose step is a multiple of keep_every (0 = none).
  int64_t keep_checkpoints = 0;
  int64_t keep_every = 0;
  // Checkpoints written by a background thread from a host copy of the state (the step waits
  // only for the copy; docs/checkpoints.md, "Background checkpoints").
  bool async_checkpoint = false;
  std::string report;        // JSON report path; "" = none
  bool tensorboard = false;  // TensorBoard event files in dir/tensorboard
  bool operator==(const OutputConfig&) const = default;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  ParallelConfig parallel;
  OptimizerConfig optimizer;
  PruneConfig prune;
  PrecisionConfig precision;
  DeviceConfig device;
  OutputConfig output;
  bool operator==(const Config&) const = default;
};

// Reads `path`, applies `overrides` ("section.key=value", value in YAML syntax, e.g.
// "train.steps=300", "model.layers=[embedding, block, head]"), validates, and checks the files
// it names that a config alone cannot (data.tokenizer loads and has <= model.vocab_size tokens).
// Throws baton::Error.
Config LoadConfig(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from text; `source_name` stands in for the file name in error messages.
Config ParseConfigString(const std::string& yaml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides = {});

// Checks every field's range and the cross-field rules (batch divisible by micro-batches, width
// by heads, ...). LoadConfig calls it; call it again after changing a Config in code. Reads no
// files.
void Validate(const Config& config);

// A canonical YAML dump: every field, schema order; LoadConfig of it gives an equal Config.
std::string ToYaml(const Config& config);
// The same fields as JSON, enums as their YAML names (for reports and checkpoint headers).
nlohmann::json ToJson(const Config& config);

// Derived values.
int64_t SequenceLength(const Config& config);  // data.seq_len, or model.context when 0
int MicroBatchSize(const Config& config);      // train.batch_size / train.micro_batches
// The micro-batches each data-parallel replica runs per step: train.micro_batches / replicas.
int MicroBatchesPerReplica(const Config& config);
// data.format with auto resolved: a path ending in ".bin" is kBin, anything else kText.
DataFormat ResolvedDataFormat(const DataConfig& data);

}  // namespace baton
