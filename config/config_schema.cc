// The config schema: every section and key, its type and its range (docs/config.md mirrors it),
// plus the enum names and the checkpoint-policy syntax.
#include "config/config_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace baton {
namespace config_internal {
namespace {

void VisitModel(ModelConfig& m, FieldVisitor& v) {
  v.BeginSection("model");
  v.Enum("preset", m.preset, kPresetNames);
  v.Int("vocab_size", m.vocab_size, IntRule{2, kMaxVocab});
  // Upper bounds keep every size within the types the model uses (ModelDims holds ints) and
  // refuse, naming the key, sizes no machine holds before anything is allocated.
  v.Int("context", m.context, IntRule{1, kMaxContext});
  v.Int("num_layers", m.num_layers, IntRule{1, kMaxLayers});
  v.Int("num_heads", m.num_heads, IntRule{1, kMaxWidth});
  v.Int("width", m.width, IntRule{1, kMaxWidth});
  v.VisitLayers("layers", m.layers);
  v.VisitString("init_from", m.init_from);
  v.Enum("attention", m.attention, kAttentionNames);
  v.Enum("weights", m.weights, kWeightFormatNames);
  // Nested keys (model: {share: {group: 2}}) are written with a dot here and in --set.
  v.Int("share.group", m.share_group, IntRule{1, kMaxLayers});
  v.Enum("share.what", m.share_what, kShareWhatNames);
  v.Int("low_rank.attn", m.low_rank_attn, IntRule{0, kMaxWidth});
  v.Int("low_rank.mlp", m.low_rank_mlp, IntRule{0, kMaxWidth});
  v.Int("num_kv_heads", m.num_kv_heads, IntRule{0, kMaxWidth});
  v.Int("intermediate_size", m.intermediate_size, IntRule{0, 4 * kMaxWidth});
  v.VisitFloat("rms_norm_eps", m.rms_norm_eps,
               FloatRule{std::numeric_limits<float>::min(), true, 1.0, false});
  v.VisitFloat("rope_theta", m.rope_theta, FloatRule{1.0, false, 1e12, true});
  v.VisitFloat("rope_scaling.factor", m.rope_scaling_factor, kNonNegativeFloat);
  v.VisitFloat("rope_scaling.low_freq_factor", m.rope_scaling_low_freq_factor, kPositiveFloat);
  v.VisitFloat("rope_scaling.high_freq_factor", m.rope_scaling_high_freq_factor, kPositiveFloat);
  v.Int("rope_scaling.original_context", m.rope_scaling_original_context, IntRule{1, kMaxContext});
  v.Int("sliding_window", m.sliding_window, IntRule{0, kMaxContext});
  v.Int("head_dim", m.head_dim, IntRule{0, kMaxWidth});
  v.Enum("tie_embeddings", m.tie_embeddings, kTieEmbeddingsNames);
  MoeConfig& e = m.moe;
  v.Int("moe.num_experts", e.num_experts, IntRule{0, kMaxExperts});
  v.Int("moe.top_k", e.top_k, IntRule{1, kMaxExperts});
  v.Int("moe.expert_intermediate_size", e.expert_intermediate_size, IntRule{0, 4 * kMaxWidth});
  v.Int("moe.shared_experts", e.shared_experts, IntRule{0, kMaxExperts});
  v.Int("moe.shared_expert_intermediate_size", e.shared_expert_intermediate_size,
        IntRule{0, 4 * kMaxWidth});
  v.Enum("moe.shared_expert_gate", e.shared_expert_gate, kBoolNames);
  v.Int("moe.first_dense_layers", e.first_dense_layers, IntRule{0, kMaxLayers});
  v.Int("moe.every", e.every, IntRule{1, kMaxLayers});
  v.Enum("moe.router", e.router, kMoeRouterNames);
  v.Enum("moe.norm_topk_prob", e.norm_topk_prob, kBoolNames);
  v.VisitFloat("moe.aux_loss_coef", e.aux_loss_coef, kNonNegativeFloat);
  v.VisitFloat("moe.z_loss_coef", e.z_loss_coef, kNonNegativeFloat);
  v.VisitFloat("moe.capacity_factor", e.capacity_factor, kNonNegativeFloat);
  v.VisitFloat("moe.bias_update_rate", e.bias_update_rate, kNonNegativeFloat);
}

void VisitData(DataConfig& d, FieldVisitor& v) {
  v.BeginSection("data");
  v.VisitString("path", d.path);
  v.Enum("format", d.format, kDataFormatNames);
  v.Int("seq_len", d.seq_len, IntRule{0, kMaxContext});
  v.VisitString("eval_path", d.eval_path);
  v.VisitFloat("eval_fraction", d.eval_fraction, kUnitInterval);
  v.VisitString("tokenizer", d.tokenizer);
  v.Int("document_separator", d.document_separator, IntRule{-1, kMaxVocab - 1});
  v.Enum("packing", d.packing, kBoolNames);
}

void VisitTrain(TrainConfig& t, FieldVisitor& v) {
  v.BeginSection("train");
  v.Int("steps", t.steps, IntRule{1, kMaxTrainSteps});
  v.Int("batch_size", t.batch_size, IntRule{1, kMaxBatch});
  v.Int("micro_batches", t.micro_batches, IntRule{1, kMaxMicroBatches});
  v.VisitFloat("lr", t.lr, kPositiveFloat);
  v.VisitFloat("min_lr", t.min_lr, kNonNegativeFloat);
  v.Int("warmup_steps", t.warmup_steps, kNonNegativeInt);
  v.Enum("lr_schedule", t.lr_schedule, kLrScheduleNames);
  v.Int("decay_steps", t.decay_steps, IntRule{0, kMaxTrainSteps});
  v.VisitFloat("weight_decay", t.weight_decay, kNonNegativeFloat);
  v.VisitFloat("grad_clip", t.grad_clip, kNonNegativeFloat);
  v.VisitFloat("beta1", t.beta1, kUnitInterval);
  v.VisitFloat("beta2", t.beta2, kUnitInterval);
  v.VisitFloat("eps", t.eps, kPositiveF32);
  v.Int("seed", t.seed, kNonNegativeInt);
  v.Int("log_every", t.log_every, kPositiveInt);
  v.Int("eval_every", t.eval_every, kNonNegativeInt);
  v.Int("eval_batches", t.eval_batches, kNonNegativeInt);
}

void VisitParallel(ParallelConfig& p, FieldVisitor& v) {
  v.BeginSection("parallel");
  v.Int("stages", p.stages, IntRule{1, kMaxStages});
  v.Enum("schedule", p.schedule, kScheduleNames);
  v.VisitString("schedule_file", p.schedule_file);
  v.Int("chunks", p.chunks, IntRule{1, kMaxChunks});
  v.Enum("partition", p.partition, kPartitionNames);
  v.VisitString("cut", p.cut);
  v.VisitCheckpoint("checkpoint", p.checkpoint);
  v.Int("replicas", p.replicas, IntRule{1, kMaxStages});
  v.Int("tensor", p.tensor, IntRule{1, kMaxStages});
  v.Enum("sequence_parallel", p.sequence_parallel, kBoolNames);
  v.Int("zero", p.zero, IntRule{0, 3});
  v.Int("experts", p.experts, IntRule{1, kMaxStages});
  v.Enum("zero3_keep", p.zero3_keep, kZero3KeepNames);
  // Seconds that still fit the milliseconds the waits count in, with room to spare (a week).
  v.VisitFloat("timeout_s", p.timeout_s, kTimeoutSeconds);
  v.VisitFloat("heartbeat_timeout_s", p.heartbeat_timeout_s, kTimeoutSeconds);
}

void VisitOptimizer(OptimizerConfig& o, FieldVisitor& v) {
  v.BeginSection("optimizer");
  v.Enum("state", o.state, kOptimizerStateNames);
}

void VisitPrune(PruneConfig& p, FieldVisitor& v) {
  v.BeginSection("prune");
  v.Int("at_step", p.at_step, kNonNegativeInt);
  v.VisitFloat("sparsity", p.sparsity, kUnitInterval);
  v.Enum("pattern", p.pattern, kPrunePatternNames);
}

void VisitPrecision(PrecisionConfig& p, FieldVisitor& v) {
  v.BeginSection("precision");
  v.Enum("dtype", p.dtype, kDTypeNames);
  v.VisitFloat("initial_loss_scale", p.initial_loss_scale, kPositiveFloat);
  v.Int("loss_scale_growth_interval", p.loss_scale_growth_interval, kPositiveInt);
  v.VisitFloat("max_loss_scale", p.max_loss_scale, kPositiveFloat);
}

void VisitDevice(DeviceConfig& d, FieldVisitor& v) {
  v.BeginSection("device");
  v.Enum("type", d.type, kDeviceTypeNames);
  v.Int("threads", d.threads, IntRule{1, 1024});
  v.Enum("pin_threads", d.pin_threads, kBoolNames);
}

void VisitOutput(OutputConfig& o, FieldVisitor& v) {
  v.BeginSection("output");
  v.VisitString("dir", o.dir);
  v.Int("checkpoint_every", o.checkpoint_every, kNonNegativeInt);
  v.Enum("final_checkpoint", o.final_checkpoint, kBoolNames);
  v.Int("keep_checkpoints", o.keep_checkpoints, kNonNegativeInt);
  v.Int("keep_every", o.keep_every, kNonNegativeInt);
  v.Enum("async_checkpoint", o.async_checkpoint, kBoolNames);
  v.VisitString("report", o.report);
  v.Enum("tensorboard", o.tensorboard, kBoolNames);
}

// Collects section and key names.
class KeyCollector final : public FieldVisitor {
 public:
  std::vector<std::pair<std::string, std::vector<std::string>>> sections;

  void BeginSection(std::string_view section) override {
    sections.push_back({std::string(section), {}});
  }
  void VisitInt(std::string_view key, int64_t&, const IntRule&) override { Add(key); }
  void VisitFloat(std::string_view key, double&, const FloatRule&) override { Add(key); }
  void VisitString(std::string_view key, std::string&) override { Add(key); }
  void VisitChoice(std::string_view key, int&, std::span<const std::string_view>) override {
    Add(key);
  }
  void VisitCheckpoint(std::string_view key, CheckpointPolicy&) override { Add(key); }
  void VisitLayers(std::string_view key, std::vector<LayerKind>&) override { Add(key); }

 private:
  void Add(std::string_view key) { sections.back().second.emplace_back(key); }
};

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string FormatNumber(double value) { return fmt::format("{}", value); }

template <typename E, size_t N>
std::string_view LookUpName(const NameTable<E, N>& table, E value) {
  for (const auto& [name, entry] : table) {
    if (entry == value) return name;
  }
  return "?";
}

}  // namespace

std::string IntRule::Describe() const {
  // The width of the field's type (int or int64_t) is not worth a user's attention.
  const bool unbounded = max == std::numeric_limits<int64_t>::max() || max == INT_MAX;
  if (unbounded && min == 1) return "a positive integer";
  if (unbounded && min == 0) return "a non-negative integer";
  if (unbounded) return fmt::format("an integer >= {}", min);
  return fmt::format("an integer in [{}, {}]", min, max);
}

bool FloatRule::Allows(double value) const {
  if (!std::isfinite(value)) return false;
  if (min_inclusive ? value < min : value <= min) return false;
  if (std::isinf(max)) return true;
  return max_inclusive ? value <= max : value < max;
}

std::string FloatRule::Describe() const {
  if (std::isinf(max) && min == 0.0)
    return min_inclusive ? "a non-negative number" : "a positive number";
  if (std::isinf(max))
    return fmt::format("a number {} {}", min_inclusive ? ">=" : ">", FormatNumber(min));
  return fmt::format("a number in {}{}, {}{}", min_inclusive ? '[' : '(', FormatNumber(min),
                     FormatNumber(max), max_inclusive ? ']' : ')');
}

void FieldVisitor::Int(std::string_view key, int& value, IntRule rule) {
  rule.max = std::min<int64_t>(rule.max, INT_MAX);
  int64_t wide = value;
  VisitInt(key, wide, rule);
  if (rule.Allows(wide)) value = static_cast<int>(wide);
}

void FieldVisitor::Int(std::string_view key, uint64_t& value, IntRule rule) {
  rule.min = std::max<int64_t>(rule.min, 0);
  int64_t wide = value > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(value);
  VisitInt(key, wide, rule);
  if (rule.Allows(wide)) value = static_cast<uint64_t>(wide);
}

void VisitConfig(Config& config, FieldVisitor& visitor) {
  VisitModel(config.model, visitor);
  VisitData(config.data, visitor);
  VisitTrain(config.train, visitor);
  VisitParallel(config.parallel, visitor);
  VisitOptimizer(config.optimizer, visitor);
  VisitPrune(config.prune, visitor);
  VisitPrecision(config.precision, visitor);
  VisitDevice(config.device, visitor);
  VisitOutput(config.output, visitor);
}

std::vector<std::pair<std::string, std::vector<std::string>>> SchemaKeys() {
  Config config;
  KeyCollector collector;
  VisitConfig(config, collector);
  return collector.sections;
}

std::string Suggest(std::string_view word, std::span<const std::string> candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

void ConfigError(std::string_view where, std::string_view key, std::string_view message) {
  // Thrown directly rather than with BATON_FAIL: the C++ source location would only bury the
  // config file's line, which is what the user has to fix.
  throw Error(fmt::format("{}: {}: {}", where, key, message));
}

}  // namespace config_internal

using namespace config_internal;

std::string_view Name(ModelPreset preset) { return LookUpName(kPresetNames, preset); }
std::string_view Name(AttentionKind attention) { return LookUpName(kAttentionNames, attention); }
std::string_view Name(WeightFormat weights) { return LookUpName(kWeightFormatNames, weights); }
std::string_view Name(ShareWhat what) { return LookUpName(kShareWhatNames, what); }
std::string_view Name(MoeRouter router) { return LookUpName(kMoeRouterNames, router); }
std::string_view Name(OptimizerState state) { return LookUpName(kOptimizerStateNames, state); }
std::string_view Name(PrunePattern pattern) { return LookUpName(kPrunePatternNames, pattern); }
std::string_view Name(Zero3Keep keep) { return LookUpName(kZero3KeepNames, keep); }
std::string_view Name(DataFormat format) { return LookUpName(kDataFormatNames, format); }
std::string_view Name(LrSchedule schedule) { return LookUpName(kLrScheduleNames, schedule); }
std::string_view Name(ScheduleKind schedule) { return LookUpName(kScheduleNames, schedule); }

bool IsVShaped(ScheduleKind schedule) { return InfoOf(schedule).chunks == ChunkRule::kV; }

int ScheduleChunks(const ParallelConfig& parallel) {
  const ChunkRule rule = InfoOf(parallel.schedule).chunks;
  if (rule == ChunkRule::kV || (rule == ChunkRule::kMany && parallel.chunks == 1)) return 2;
  return parallel.chunks;
}
std::string_view Name(PartitionPolicy policy) { return LookUpName(kPartitionNames, policy); }

std::string CheckpointPolicy::ToString() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kEvery:
      return fmt::format("every:{}", every);
    case Kind::kSelective:
      return "selective";
  }
  BATON_FAIL("unknown checkpoint policy kind {}", static_cast<int>(kind));
}

CheckpointPolicy ParseCheckpointPolicy(std::string_view text) {
  if (text == "none") return CheckpointPolicy::None();
  if (text == "selective") return CheckpointPolicy::Selective();
  constexpr std::string_view kEveryPrefix = "every:";
  if (text.starts_with(kEveryPrefix)) {
    const std::string_view digits = text.substr(kEveryPrefix.size());
    int k = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
    if (!digits.empty() && error == std::errc() && end == digits.data() + digits.size() && k >= 1) {
      return CheckpointPolicy::Every(k);
    }
  }
  throw Error(fmt::format("expected none, every:K with K >= 1, or selective, got '{}'", text));
}

std::vector<std::pair<int, int>> ParseCut(std::string_view text) {
  std::vector<std::pair<int, int>> ranges;
  if (text.empty()) return ranges;
  const auto number = [&](std::string_view digits) {
    int value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) {
      throw Error(fmt::format("expected FIRST-LAST layer ranges like 0-4,5-9, got '{}'", text));
    }
    return value;
  };
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view part = text.substr(start, comma - start);
    const size_t dash = part.find('-');
    if (dash == std::string_view::npos) number("");  // throws
    const int first = number(part.substr(0, dash)), last = number(part.substr(dash + 1));
    const int expected = ranges.empty() ? 0 : ranges.back().second + 1;
    if (first != expected || last < first) {
      throw Error(fmt::format("'{}': range {} must start at layer {} and not end before it", text,
                              ranges.size(), expected));
    }
    ranges.emplace_back(first, last);
    start = comma + 1;
  }
  return ranges;
}

std::string FormatCut(const std::vector<std::pair<int, int>>& ranges) {
  std::string text;
  for (const auto& [first, last] : ranges) {
    text += fmt::format("{}{}-{}", text.empty() ? "" : ",", first, last);
  }
  return text;
}

}  // namespace baton
