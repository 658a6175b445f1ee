// Validate(): every field's range (from the schema) and the rules that tie fields together; and
// the checks of the files a config names, run when it is parsed.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>

#include "config/config_schema.h"
#include "core/error.h"
#include "core/quant_blocks.h"
#include "data/tokenizer.h"

namespace baton::config_internal {
namespace {

// Reports a broken rule at the first of `keys` that the config wrote, or at the fallback.
class Reporter {
 public:
  Reporter(const WhereFn& where, const std::string& fallback)
      : where_(where), fallback_(fallback) {}

  void Require(bool ok, std::initializer_list<std::string_view> keys,
               const std::string& message) const {
    if (ok) return;
    for (std::string_view key : keys) {
      const std::string place = where_(key);
      if (!place.empty()) ConfigError(place, key, message);
    }
    ConfigError(fallback_, *keys.begin(), message);
  }

 private:
  const WhereFn& where_;
  const std::string& fallback_;
};

// Range checks, for configs built or changed in code (LoadConfig's reader already applies them).
class RuleChecker final : public FieldVisitor {
 public:
  explicit RuleChecker(const Reporter& reporter) : reporter_(reporter) {}

  void BeginSection(std::string_view section) override { section_ = std::string(section); }
  void VisitInt(std::string_view key, int64_t& value, const IntRule& rule) override {
    Require(rule.Allows(value), key, fmt::format("expected {}, got {}", rule.Describe(), value));
  }
  void VisitFloat(std::string_view key, double& value, const FloatRule& rule) override {
    Require(rule.Allows(value), key, fmt::format("expected {}, got {}", rule.Describe(), value));
  }
  void VisitString(std::string_view, std::string&) override {}
  void VisitChoice(std::string_view key, int& index,
                   std::span<const std::string_view> names) override {
    Require(index >= 0, key, fmt::format("expected one of {}", fmt::join(names, ", ")));
  }
  void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) override {
    const bool every = value.kind == CheckpointPolicy::Kind::kEvery;
    Require(every ? value.every >= 1 : value.every == 0, key,
            fmt::format("expected none, every:K with K >= 1, or selective, got kind {} every {}",
                        static_cast<int>(value.kind), value.every));
  }
  void VisitLayers(std::string_view, std::vector<LayerKind>&) override {}

 private:
  void Require(bool ok, std::string_view key, const std::string& message) {
    const std::string dotted = section_ + "." + std::string(key);
    reporter_.Require(ok, {dotted}, message);
  }

  const Reporter& reporter_;
  std::string section_;
};

void ValidateMoe(const ModelConfig& m, const Reporter& r) {
  const MoeConfig& e = m.moe;
  if (e.num_experts == 0) return;
  r.Require(LlamaLike(m.preset), {"model.moe.num_experts", "model.preset"},
            fmt::format("experts are SwiGLU MLPs: model.moe is for preset llama, qwen2, "
                        "mistral or qwen3; preset {} has none",
                        Name(m.preset)));
  r.Require(
      e.top_k <= e.num_experts, {"model.moe.top_k", "model.moe.num_experts"},
      fmt::format("model.moe.top_k {} exceeds model.moe.num_experts {}", e.top_k, e.num_experts));
  r.Require(e.first_dense_layers < m.num_layers,
            {"model.moe.first_dense_layers", "model.num_layers"},
            fmt::format("model.moe.first_dense_layers {} leaves no block of model.num_layers {} "
                        "for experts",
                        e.first_dense_layers, m.num_layers));
  r.Require(!e.shared_expert_gate || e.shared_experts > 0,
            {"model.moe.shared_expert_gate", "model.moe.shared_experts"},
            "model.moe.shared_expert_gate scales the shared experts' output: it needs "
            "model.moe.shared_experts > 0");
  r.Require(e.router != MoeRouter::kTopkSoftmax || e.norm_topk_prob,
            {"model.moe.norm_topk_prob", "model.moe.router"},
            "model.moe.norm_topk_prob is softmax_topk's and sigmoid_bias's choice: topk_softmax's "
            "weights are a softmax over the k chosen logits, which always sum to 1");
  r.Require(e.router != MoeRouter::kSigmoidBias || e.aux_loss_coef == 0.0,
            {"model.moe.aux_loss_coef", "model.moe.router"},
            "model.moe.router sigmoid_bias balances the experts by its bias (aux-loss-free): "
            "model.moe.aux_loss_coef must be 0 with it");
  r.Require(m.share_group <= 1 || m.share_what == ShareWhat::kAttention,
            {"model.share.what", "model.moe.num_experts"},
            "experts are not shared across blocks: with model.moe set model.share.what to "
            "attention");
  r.Require(m.low_rank_mlp == 0, {"model.low_rank.mlp", "model.moe.num_experts"},
            "experts are dense: model.low_rank.mlp must be 0 with model.moe");
  r.Require(m.weights == WeightFormat::kDense, {"model.weights", "model.moe.num_experts"},
            "experts hold dense weights: model.weights must be dense with model.moe");
}

void ValidateModel(const ModelConfig& m, const DataConfig& d, const Reporter& r) {
  const bool custom = m.preset == ModelPreset::kCustom;
  r.Require(custom || m.layers.empty(), {"model.layers", "model.preset"},
            fmt::format("a layers list is only for preset custom, not {}", Name(m.preset)));
  if (custom) {
    r.Require(m.layers.size() >= 2, {"model.layers", "model.preset"},
              "preset custom needs a layers list of at least embedding and head");
    r.Require(m.layers.size() <= static_cast<size_t>(kMaxLayers) + 2, {"model.layers"},
              fmt::format("{} layers is over the limit of {} blocks plus embedding and head",
                          m.layers.size(), kMaxLayers));
    r.Require(m.layers.front() == LayerKind::kEmbedding && m.layers.back() == LayerKind::kHead,
              {"model.layers"}, "a custom graph starts with embedding and ends with head");
    const auto count = [&](LayerKind kind) { return std::ranges::count(m.layers, kind); };
    r.Require(count(LayerKind::kEmbedding) == 1 && count(LayerKind::kHead) == 1, {"model.layers"},
              "embedding and head appear once each, at the ends");
  }
  const bool llama = LlamaLike(m.preset);
  const bool attention = m.preset == ModelPreset::kGpt || llama ||
                         (custom && std::ranges::count(m.layers, LayerKind::kBlock) > 0);
  r.Require(
      !attention || m.head_dim > 0 || m.width % m.num_heads == 0,
      {"model.width", "model.num_heads"},
      fmt::format("model.width {} is not divisible by model.num_heads {}", m.width, m.num_heads));
  r.Require(m.sliding_window == 0 || m.preset == ModelPreset::kMistral,
            {"model.sliding_window", "model.preset"},
            fmt::format("model.sliding_window is for preset mistral (a Llama block with Mistral's "
                        "sliding-window attention); preset {} has none",
                        Name(m.preset)));
  for (const auto& [key, set] : {std::pair{"model.num_kv_heads", m.num_kv_heads != 0},
                                 {"model.intermediate_size", m.intermediate_size != 0},
                                 {"model.head_dim", m.head_dim != 0}}) {
    r.Require(llama || !set, {key, "model.preset"},
              fmt::format("{} is for preset llama, qwen2, mistral or qwen3; preset {} has none",
                          key, Name(m.preset)));
  }
  if (llama) {
    r.Require(
        m.num_kv_heads == 0 || m.num_heads % m.num_kv_heads == 0,
        {"model.num_kv_heads", "model.num_heads"},
        fmt::format("model.num_kv_heads {} does not divide model.num_heads {} (each key/value "
                    "head serves a group of query heads)",
                    m.num_kv_heads, m.num_heads));
    if (m.head_dim > 0) {
      r.Require(m.head_dim % 2 == 0, {"model.head_dim"},
                fmt::format("rotary positions turn pairs of a head's channels: model.head_dim {} "
                            "must be even",
                            m.head_dim));
    } else {
      r.Require(m.width % m.num_heads != 0 || (m.width / m.num_heads) % 2 == 0,
                {"model.width", "model.num_heads"},
                fmt::format("rotary positions turn pairs of a head's channels: the head size {} "
                            "(model.width / model.num_heads) must be even",
                            m.width / std::max<int64_t>(1, m.num_heads)));
    }
    r.Require(m.rope_scaling_factor == 0.0 ||
                  m.rope_scaling_high_freq_factor > m.rope_scaling_low_freq_factor,
              {"model.rope_scaling.high_freq_factor", "model.rope_scaling.low_freq_factor"},
              "Llama 3 rope scaling needs high_freq_factor > low_freq_factor");
  }
  ValidateMoe(m, r);
  r.Require(d.seq_len <= m.context, {"data.seq_len", "model.context"},
            fmt::format("data.seq_len {} exceeds model.context {}", d.seq_len, m.context));
  r.Require(
      ResolvedDataFormat(d) != DataFormat::kText || !d.tokenizer.empty() || m.vocab_size >= 256,
      {"model.vocab_size", "data.format", "data.path"},
      fmt::format("byte-level text data needs model.vocab_size >= 256, got {}", m.vocab_size));
  // A .bin file read as text would train on its raw bytes (token ids as pairs of bytes), rc 0.
  for (const auto& [key, path] :
       {std::pair{"data.path", d.path}, {"data.eval_path", d.eval_path}}) {
    r.Require(d.format != DataFormat::kText || std::filesystem::path(path).extension() != ".bin",
              {"data.format", key},
              fmt::format("{} {} is a token file (.bin) but data.format is text: set data.format "
                          "to bin or auto",
                          key, path));
  }
}

void ValidateTrain(const TrainConfig& t, const Reporter& r) {
  r.Require(t.batch_size % t.micro_batches == 0, {"train.batch_size", "train.micro_batches"},
            fmt::format("train.batch_size {} is not divisible by train.micro_batches {}",
                        t.batch_size, t.micro_batches));
  r.Require(t.min_lr <= t.lr, {"train.min_lr", "train.lr"},
            fmt::format("train.min_lr {} exceeds train.lr {}", t.min_lr, t.lr));
  if (t.lr_schedule == LrSchedule::kWsd) {
    r.Require(t.decay_steps >= 1 && t.decay_steps <= t.steps - t.warmup_steps,
              {"train.decay_steps", "train.lr_schedule"},
              fmt::format("train.lr_schedule wsd decays over train.decay_steps, which must be "
                          "1 to train.steps - train.warmup_steps = {}, got {}",
                          t.steps - t.warmup_steps, t.decay_steps));
  } else {
    r.Require(t.decay_steps == 0, {"train.decay_steps", "train.lr_schedule"},
              fmt::format("train.decay_steps is the wsd schedule's; train.lr_schedule is {}",
                          Name(t.lr_schedule)));
  }
}

void ValidatePrune(const Config& c, const Reporter& r) {
  const PruneConfig& p = c.prune;
  if (!p.enabled()) return;
  r.Require(p.at_step <= c.train.steps, {"prune.at_step", "train.steps"},
            fmt::format("prune.at_step {} is after the last step (train.steps {})", p.at_step,
                        c.train.steps));
  r.Require(p.sparsity > 0.0, {"prune.sparsity"}, "pruning needs prune.sparsity > 0");
  r.Require(c.model.weights == WeightFormat::kDense, {"prune.at_step", "model.weights"},
            "pruning trains: it needs model.weights: dense");
  r.Require(c.model.moe.num_experts == 0, {"prune.at_step", "model.moe.num_experts"},
            "pruning masks a block's weight matrices; the experts' stacked matrices take none yet: "
            "a model with model.moe cannot be pruned");
  if (p.pattern == PrunePattern::k2of4) {
    r.Require(p.sparsity == 0.5, {"prune.sparsity", "prune.pattern"},
              fmt::format("prune.pattern 2:4 keeps 2 of every 4 weights: prune.sparsity must be "
                          "0.5, got {}",
                          p.sparsity));
    r.Require(c.model.width % 4 == 0, {"prune.pattern", "model.width"},
              fmt::format("prune.pattern 2:4 groups a matrix's inputs by 4: model.width {} is not "
                          "divisible by 4",
                          c.model.width));
  }
}

// Sharing and low rank (model.share.*, model.low_rank.*).
void ValidateStructure(const Config& c, const Reporter& r) {
  const ModelConfig& m = c.model;
  const bool shares = m.share_group > 1;
  const bool low_rank = m.low_rank_attn > 0 || m.low_rank_mlp > 0;
  if (shares) {
    r.Require(m.preset != ModelPreset::kCustom, {"model.share.group", "model.preset"},
              "model.share needs preset gpt, mlp or llama: a custom graph's blocks may differ in "
              "kind");
    r.Require(m.preset == ModelPreset::kCustom || m.share_group <= m.num_layers,
              {"model.share.group", "model.num_layers"},
              fmt::format("model.share.group {} exceeds model.num_layers {}", m.share_group,
                          m.num_layers));
    r.Require(m.preset != ModelPreset::kMlp || m.share_what != ShareWhat::kAttention,
              {"model.share.what", "model.preset"},
              "model.share.what attention needs attention: preset mlp has none");
  }
  const bool attention =
      m.preset == ModelPreset::kGpt || LlamaLike(m.preset) ||
      (m.preset == ModelPreset::kCustom && std::ranges::count(m.layers, LayerKind::kBlock) > 0);
  r.Require(m.low_rank_attn == 0 || attention, {"model.low_rank.attn", "model.preset"},
            "model.low_rank.attn needs attention blocks: this model has none");
  // A linear's rank is at most min(in, out) = C (full rank, which saves nothing: what baton
  // compress --low-rank C writes to check the factorisation).
  r.Require(m.low_rank_attn <= m.width, {"model.low_rank.attn", "model.width"},
            fmt::format("model.low_rank.attn {} exceeds model.width {}, the largest rank of "
                        "attention's matrices",
                        m.low_rank_attn, m.width));
  r.Require(m.low_rank_mlp <= m.width, {"model.low_rank.mlp", "model.width"},
            fmt::format("model.low_rank.mlp {} exceeds model.width {}, the largest rank of the "
                        "MLP's matrices",
                        m.low_rank_mlp, m.width));
  if (shares || low_rank) {
    const char* key = shares ? "model.share.group" : "model.low_rank.mlp";
    r.Require(m.weights == WeightFormat::kDense, {"model.weights", key},
              "model.weights int8 holds dense block matrices: it does not combine with "
              "model.share or model.low_rank");
    r.Require(!c.prune.enabled(), {"prune.at_step", key},
              "pruning masks dense block matrices: it does not combine with model.share or "
              "model.low_rank");
  }
}

void ValidateEval(const DataConfig& d, const TrainConfig& t, const Reporter& r) {
  r.Require(d.eval_path.empty() || d.eval_fraction == 0.0, {"data.eval_fraction", "data.eval_path"},
            "held-out data is data.eval_path or data.eval_fraction, not both");
  r.Require(t.eval_every == 0 || HasEvalData(d), {"train.eval_every"},
            fmt::format("train.eval_every {} needs held-out data: data.eval_path or "
                        "data.eval_fraction",
                        t.eval_every));
}

void ValidatePacking(const Config& c, const Reporter& r) {
  const DataConfig& d = c.data;
  r.Require(!d.packing || d.document_separator >= 0, {"data.packing", "data.document_separator"},
            "data.packing needs data.document_separator: the token id that ends each document "
            "(GPT-2's <|endoftext|> is 50256)");
  r.Require(d.document_separator < c.model.vocab_size,
            {"data.document_separator", "model.vocab_size"},
            fmt::format("data.document_separator {} is not below model.vocab_size {}",
                        d.document_separator, c.model.vocab_size));
}

void ValidateParallel(const Config& c, const Reporter& r) {
  const ParallelConfig& p = c.parallel;
  const bool looped = InfoOf(p.schedule).chunks == ChunkRule::kMany;
  if (p.schedule_file.empty() && IsVShaped(p.schedule)) {
    r.Require(p.chunks <= 2, {"parallel.chunks", "parallel.schedule"},
              fmt::format("parallel.schedule {} places 2 model chunks per stage in a V; "
                          "parallel.chunks {} cannot apply (leave it out, or set 2)",
                          Name(p.schedule), p.chunks));
  } else if (p.schedule_file.empty()) {
    r.Require(p.chunks == 1 || looped, {"parallel.chunks", "parallel.schedule"},
              fmt::format("parallel.chunks {} > 1 needs parallel.schedule interleaved, "
                          "interleaved-zb or looped-bfs (or a schedule_file), not {}",
                          p.chunks, Name(p.schedule)));
  }
  size_t cut_ranges = 0;
  std::string cut_error;
  try {
    cut_ranges = ParseCut(p.cut).size();
  } catch (const Error& e) {
    cut_error = e.what();
  }
  r.Require(cut_error.empty(), {"parallel.cut"}, cut_error);
  // A schedule file says its own chunks (checked when the plan loads it).
  const int chunks = p.schedule_file.empty() ? ScheduleChunks(p) : p.chunks;
  r.Require(p.cut.empty() || !p.schedule_file.empty() ||
                static_cast<int64_t>(cut_ranges) == int64_t{p.stages} * chunks,
            {"parallel.cut", "parallel.stages"},
            fmt::format("parallel.cut has {} ranges; it needs one per virtual stage: stages {} x "
                        "chunks {}",
                        cut_ranges, p.stages, chunks));
  // Each replica runs an equal share of every step's micro-batches (docs/parallel.md).
  r.Require(c.train.micro_batches % p.replicas == 0, {"parallel.replicas", "train.micro_batches"},
            fmt::format("train.micro_batches {} is not divisible by parallel.replicas {}: each "
                        "replica runs an equal share of a step's micro-batches",
                        c.train.micro_batches, p.replicas));
  r.Require(p.replicas == 1 || c.model.weights == WeightFormat::kDense,
            {"parallel.replicas", "model.weights"},
            "data-parallel replicas train: they need model.weights: dense");
  if (c.model.moe.num_experts > 0 && p.tensor > 1) {
    // Whole experts fold over a stage's tensor ranks (docs/parallel.md, "Tensor parallelism").
    const MoeConfig& moe = c.model.moe;
    r.Require(moe.num_experts % p.tensor == 0, {"parallel.tensor", "model.moe.num_experts"},
              fmt::format("parallel.tensor {} folds each MoE layer's experts over the tensor "
                          "ranks: it must divide model.moe.num_experts {}",
                          p.tensor, moe.num_experts));
    const int64_t shared_width =
        moe.shared_experts * (moe.shared_expert_intermediate_size > 0
                                  ? moe.shared_expert_intermediate_size
                                  : (moe.expert_intermediate_size > 0 ? moe.expert_intermediate_size
                                                                      : c.model.intermediate_size));
    r.Require(shared_width % p.tensor == 0,
              {"parallel.tensor", "model.moe.shared_expert_intermediate_size"},
              fmt::format("parallel.tensor {} splits the shared experts' hidden units: it must "
                          "divide their {}",
                          p.tensor, shared_width));
    // With an expert group too, each tensor rank's fold splits over it.
    r.Require(moe.num_experts % (p.tensor * p.experts) == 0,
              {"parallel.tensor", "parallel.experts", "model.moe.num_experts"},
              fmt::format("parallel.tensor {} x parallel.experts {} split each MoE layer's "
                          "experts: their product must divide model.moe.num_experts {}",
                          p.tensor, p.experts, moe.num_experts));
  }
  if (p.experts > 1) {
    const int64_t experts = c.model.moe.num_experts;
    r.Require(experts > 0 && experts % p.experts == 0,
              {"parallel.experts", "model.moe.num_experts"},
              fmt::format("parallel.experts {} splits each MoE layer's experts: it needs "
                          "model.moe.num_experts divisible by it, not {}",
                          p.experts, experts));
    r.Require(p.replicas % p.experts == 0, {"parallel.experts", "parallel.replicas"},
              fmt::format("parallel.experts {} forms its expert groups inside the data-parallel "
                          "replicas: parallel.replicas {} must be a multiple of it",
                          p.experts, p.replicas));
    // 8-bit state: a member's part of each stacked expert matrix (its N/E experts of c x i and
    // c x 2i elements) must be whole quantisation blocks, so that its blocks are E = 1's.
    const int64_t hidden = c.model.moe.expert_intermediate_size > 0
                               ? c.model.moe.expert_intermediate_size
                               : c.model.intermediate_size;
    const int64_t part = experts / p.experts * c.model.width * hidden;
    r.Require(
        c.optimizer.state == OptimizerState::kF32 || (experts > 0 && part % kQuantBlock == 0),
        {"parallel.experts", "optimizer.state", "model.moe.expert_intermediate_size"},
        fmt::format("optimizer.state int8 with parallel.experts {} needs each member's part of "
                    "an expert matrix in whole blocks of {}: {} experts of {} x {} are {} "
                    "elements",
                    p.experts, kQuantBlock, experts / p.experts, c.model.width, hidden, part));
    // Not yet with expert parallelism (docs/parallel.md says so).
    r.Require(!c.prune.enabled(), {"parallel.experts", "prune.sparsity"},
              "parallel.experts > 1 does not combine with pruning yet");
  }
  r.Require(!p.sequence_parallel || p.tensor > 1, {"parallel.sequence_parallel", "parallel.tensor"},
            "parallel.sequence_parallel cuts the activations over a stage's tensor ranks: it needs "
            "parallel.tensor >= 2");
  if (p.sequence_parallel && p.tensor > 1) {
    const int64_t seq_len = c.data.seq_len > 0 ? c.data.seq_len : c.model.context;
    r.Require(seq_len % p.tensor == 0,
              {"parallel.sequence_parallel", "data.seq_len", "model.context"},
              fmt::format("parallel.sequence_parallel cuts each sequence of {} positions into "
                          "parallel.tensor {} equal parts: it must divide the sequence length",
                          seq_len, p.tensor));
  }
  if (p.tensor > 1) {
    const ModelConfig& m = c.model;
    const int64_t kv_heads = m.num_kv_heads > 0 ? m.num_kv_heads : m.num_heads;
    r.Require(m.num_heads % p.tensor == 0 && kv_heads % p.tensor == 0,
              {"parallel.tensor", "model.num_heads"},
              fmt::format("parallel.tensor {} splits each stage's attention heads: it must divide "
                          "model.num_heads {} and the key/value heads {}",
                          p.tensor, m.num_heads, kv_heads));
    r.Require(m.intermediate_size % p.tensor == 0, {"parallel.tensor", "model.intermediate_size"},
              fmt::format("parallel.tensor {} splits the MLP's hidden units: it must divide "
                          "model.intermediate_size {}",
                          p.tensor, m.intermediate_size));
    r.Require(m.vocab_size >= p.tensor, {"parallel.tensor", "model.vocab_size"},
              fmt::format("parallel.tensor {} splits the vocabulary: model.vocab_size {} is "
                          "smaller",
                          p.tensor, m.vocab_size));
    r.Require(m.low_rank_attn == 0 && m.low_rank_mlp == 0,
              {"parallel.tensor", "model.low_rank.attn", "model.low_rank.mlp"},
              "parallel.tensor > 1 cuts dense matrices; it does not combine with model.low_rank");
    r.Require(m.weights == WeightFormat::kDense, {"parallel.tensor", "model.weights"},
              "parallel.tensor > 1 trains; model.weights int8 is for inference on one tensor rank");
    r.Require(c.optimizer.state == OptimizerState::kF32, {"parallel.tensor", "optimizer.state"},
              "parallel.tensor > 1 cuts f32 optimizer state; optimizer.state int8's blocks are "
              "not cut");
    r.Require(!c.prune.enabled(), {"parallel.tensor", "prune.at_step"},
              "parallel.tensor > 1 does not combine with pruning (each matrix's threshold would "
              "be its part's)");
  }
  if (p.zero >= 1) {
    r.Require(p.replicas >= 2, {"parallel.zero", "parallel.replicas"},
              fmt::format("parallel.zero {} shards the optimizer state across data-parallel "
                          "replicas: it needs parallel.replicas >= 2",
                          p.zero));
  }
  r.Require(p.zero3_keep == Zero3Keep::kMicrobatch || p.zero == 3,
            {"parallel.zero3_keep", "parallel.zero"},
            fmt::format("parallel.zero3_keep step keeps ZeRO-3's gathered layers for a step; it "
                        "needs parallel.zero 3, not {}",
                        p.zero));
}

}  // namespace

void CheckConfigFiles(const Config& config, const WhereFn& where, const std::string& fallback) {
  const Reporter reporter(where, fallback);
  if (config.data.tokenizer.empty()) return;
  int64_t vocab_size = 0;
  try {
    vocab_size = Tokenizer::Load(config.data.tokenizer).vocab_size();
  } catch (const Error& e) {
    reporter.Require(false, {"data.tokenizer"}, e.what());
  }
  reporter.Require(vocab_size <= config.model.vocab_size, {"data.tokenizer", "model.vocab_size"},
                   fmt::format("the tokenizer {} has {} tokens, more than model.vocab_size {}",
                               config.data.tokenizer, vocab_size, config.model.vocab_size));
}

void ValidateConfig(const Config& config, const WhereFn& where, const std::string& fallback) {
  const Reporter reporter(where, fallback);
  Config copy = config;
  RuleChecker checker(reporter);
  VisitConfig(copy, checker);
  reporter.Require(!config.data.path.empty(), {"data.path"},
                   "required: a text file, a folder of text files, or a .bin token file");
  ValidateEval(config.data, config.train, reporter);
  ValidatePacking(config, reporter);
  ValidateModel(config.model, config.data, reporter);
  ValidateTrain(config.train, reporter);
  ValidateParallel(config, reporter);
  ValidatePrune(config, reporter);
  ValidateStructure(config, reporter);
  reporter.Require(!config.output.dir.empty(), {"output.dir"}, "must not be empty");
}

}  // namespace baton::config_internal
