// Internal to the config library: the schema as one table of fields, walked by visitors.
//
// VisitConfig() lists every section and key of a Config in schema order, with each field's type
// and range rule. Parsing, range checking, the YAML dump, the JSON dump and the list of known keys
// are visitors over it, so a field is declared in exactly one place (config_schema.cc).
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/lr_segment.h"  // kMaxTrainSteps

namespace baton::config_internal {

// An integer field's allowed range, inclusive.
struct IntRule {
  int64_t min = 0;
  int64_t max = std::numeric_limits<int64_t>::max();
  bool Allows(int64_t value) const { return value >= min && value <= max; }
  std::string Describe() const;  // "a positive integer", "an integer in [2, 65536]"
};

// A floating-point field's allowed range; values must also be finite.
struct FloatRule {
  double min = 0.0;
  bool min_inclusive = true;
  double max = std::numeric_limits<double>::infinity();
  bool max_inclusive = false;
  bool Allows(double value) const;
  std::string Describe() const;  // "a positive number", "a number in [0, 1)"
};

inline constexpr IntRule kPositiveInt{1};
inline constexpr IntRule kNonNegativeInt{0};
inline constexpr FloatRule kPositiveFloat{0.0, false};
// A positive number that stays positive as a 32-bit float (the kernels' epsilons): below float's
// least normal value it would be a denormal or 0.
inline constexpr FloatRule kPositiveF32{std::numeric_limits<float>::min(), true};
inline constexpr FloatRule kNonNegativeFloat{0.0, true};
inline constexpr FloatRule kUnitInterval{0.0, true, 1.0, false};         // [0, 1)
inline constexpr FloatRule kTimeoutSeconds{0.0, false, 604800.0, true};  // (0, a week]

// Upper bounds of sizes (docs/config.md states them).
inline constexpr int64_t kMaxContext = 1 << 20;  // tokens
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxWidth = 1 << 16;  // channels, and heads
inline constexpr int64_t kMaxExperts = 1 << 12;
// Token ids: data files hold uint16 or (llm.c's Llama 3 layout) uint32 ids (docs/data.md); the
// bound keeps the embedding's rows within what a machine holds.
inline constexpr int64_t kMaxVocab = 1 << 24;
inline constexpr int64_t kMaxBatch = 1 << 20;  // sequences per step
inline constexpr int64_t kMaxMicroBatches = 1 << 16;
inline constexpr int64_t kMaxStages = 4096;
inline constexpr int64_t kMaxChunks = 1024;
inline constexpr uint64_t kMaxConfigBytes = 1 << 20;  // a config file's size

template <typename E, size_t N>
using NameTable = std::array<std::pair<std::string_view, E>, N>;

inline constexpr NameTable<ModelPreset, 7> kPresetNames{{{"gpt", ModelPreset::kGpt},
                                                         {"mlp", ModelPreset::kMlp},
                                                         {"custom", ModelPreset::kCustom},
                                                         {"llama", ModelPreset::kLlama},
                                                         {"qwen2", ModelPreset::kQwen2},
                                                         {"mistral", ModelPreset::kMistral},
                                                         {"qwen3", ModelPreset::kQwen3}}};
inline constexpr NameTable<MoeRouter, 3> kMoeRouterNames{
    {{"softmax_topk", MoeRouter::kSoftmaxTopk},
     {"topk_softmax", MoeRouter::kTopkSoftmax},
     {"sigmoid_bias", MoeRouter::kSigmoidBias}}};
inline constexpr NameTable<TieEmbeddings, 3> kTieEmbeddingsNames{
    {{"auto", TieEmbeddings::kAuto},
     {"true", TieEmbeddings::kTied},
     {"false", TieEmbeddings::kUntied}}};
inline constexpr NameTable<AttentionKind, 2> kAttentionNames{
    {{"flash", AttentionKind::kFlash}, {"materialized", AttentionKind::kMaterialized}}};
inline constexpr NameTable<WeightFormat, 2> kWeightFormatNames{
    {{"dense", WeightFormat::kDense}, {"int8", WeightFormat::kInt8}}};
inline constexpr NameTable<ShareWhat, 3> kShareWhatNames{
    {{"all", ShareWhat::kAll}, {"attention", ShareWhat::kAttention}, {"mlp", ShareWhat::kMlp}}};
inline constexpr NameTable<OptimizerState, 2> kOptimizerStateNames{
    {{"f32", OptimizerState::kF32}, {"int8", OptimizerState::kInt8}}};
inline constexpr NameTable<PrunePattern, 2> kPrunePatternNames{
    {{"unstructured", PrunePattern::kUnstructured}, {"2:4", PrunePattern::k2of4}}};
inline constexpr NameTable<Zero3Keep, 2> kZero3KeepNames{
    {{"microbatch", Zero3Keep::kMicrobatch}, {"step", Zero3Keep::kStep}}};
inline constexpr NameTable<LayerKind, 4> kLayerKindNames{{{"embedding", LayerKind::kEmbedding},
                                                          {"block", LayerKind::kBlock},
                                                          {"mlp_block", LayerKind::kMlpBlock},
                                                          {"head", LayerKind::kHead}}};
inline constexpr NameTable<DataFormat, 3> kDataFormatNames{
    {{"auto", DataFormat::kAuto}, {"text", DataFormat::kText}, {"bin", DataFormat::kBin}}};
inline constexpr NameTable<LrSchedule, 4> kLrScheduleNames{{{"constant", LrSchedule::kConstant},
                                                            {"cosine", LrSchedule::kCosine},
                                                            {"linear", LrSchedule::kLinear},
                                                            {"wsd", LrSchedule::kWsd}}};
// From the schedules' one table (scheduler/schedule_kinds.h), in its order.
inline constexpr NameTable<ScheduleKind, kScheduleKinds.size()> kScheduleNames = [] {
  NameTable<ScheduleKind, kScheduleKinds.size()> names{};
  for (size_t i = 0; i < names.size(); ++i)
    names[i] = {kScheduleKinds[i].name, kScheduleKinds[i].kind};
  return names;
}();
inline constexpr NameTable<PartitionPolicy, 3> kPartitionNames{
    {{"uniform", PartitionPolicy::kUniform},
     {"parameters", PartitionPolicy::kParameters},
     {"flops", PartitionPolicy::kFlops}}};
inline constexpr NameTable<DType, 3> kDTypeNames{
    {{"fp32", DType::kF32}, {"bf16", DType::kBF16}, {"fp16", DType::kF16}}};
inline constexpr NameTable<bool, 2> kBoolNames{{{"true", true}, {"false", false}}};
inline constexpr NameTable<DeviceType, 2> kDeviceTypeNames{
    {{"cpu", DeviceType::kCpu}, {"cuda", DeviceType::kCuda}}};

// Receives every field of a Config. Sections arrive in order, each announced by BeginSection.
class FieldVisitor {
 public:
  virtual ~FieldVisitor() = default;

  virtual void BeginSection(std::string_view section) = 0;
  virtual void VisitInt(std::string_view key, int64_t& value, const IntRule& rule) = 0;
  virtual void VisitFloat(std::string_view key, double& value, const FloatRule& rule) = 0;
  virtual void VisitString(std::string_view key, std::string& value) = 0;
  // `index` is the value's position in `names`, or -1 when the value has no name there.
  virtual void VisitChoice(std::string_view key, int& index,
                           std::span<const std::string_view> names) = 0;
  virtual void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) = 0;
  virtual void VisitLayers(std::string_view key, std::vector<LayerKind>& value) = 0;

  // Typed front ends used by the schema.
  void Int(std::string_view key, int64_t& value, IntRule rule) { VisitInt(key, value, rule); }
  void Int(std::string_view key, int& value, IntRule rule);
  void Int(std::string_view key, uint64_t& value, IntRule rule);
  template <typename E, size_t N>
  void Enum(std::string_view key, E& value, const NameTable<E, N>& table);
};

template <typename E, size_t N>
void FieldVisitor::Enum(std::string_view key, E& value, const NameTable<E, N>& table) {
  std::array<std::string_view, N> names;
  int index = -1;
  for (size_t i = 0; i < N; ++i) {
    names[i] = table[i].first;
    if (table[i].second == value) index = static_cast<int>(i);
  }
  VisitChoice(key, index, names);
  if (index >= 0) value = table[static_cast<size_t>(index)].second;
}

// Walks every field of `config` in schema order (the order of docs/config.md).
void VisitConfig(Config& config, FieldVisitor& visitor);

// The known keys of each section, in schema order.
std::vector<std::pair<std::string, std::vector<std::string>>> SchemaKeys();

// The candidate closest to `word` by edit distance, or "" when none is close enough to suggest.
std::string Suggest(std::string_view word, std::span<const std::string> candidates);

// Throws baton::Error "WHERE: KEY: MESSAGE" (no C++ source location: the user needs the config's).
[[noreturn]] void ConfigError(std::string_view where, std::string_view key,
                              std::string_view message);

// Range checks of every field, then the cross-field rules. `where` maps a dotted key to the
// place that set it ("configs/x.yaml:12", "--set train.steps=0"), or "" when nothing did; such
// keys are reported at `fallback` (the file name).
using WhereFn = std::function<std::string(std::string_view dotted_key)>;
void ValidateConfig(const Config& config, const WhereFn& where, const std::string& fallback);

// The checks that read the files a config names, reported like ValidateConfig's. Run where a
// config is parsed (LoadConfig, ParseConfigString), not by Validate(), which does no I/O: today
// data.tokenizer loads and its vocabulary fits model.vocab_size.
void CheckConfigFiles(const Config& config, const WhereFn& where, const std::string& fallback);

}  // namespace baton::config_internal
