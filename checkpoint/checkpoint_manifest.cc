// JSON forms of checkpoint metadata (see checkpoint_manifest.h, docs/checkpoints.md).
#include "checkpoint/checkpoint_manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_fields.h"

// Every value is read through a JsonField, so an error names the file and the key path
// ("x/state.json: loss_scaler.scale: expected a number, got string \"NaN\""), never the JSON
// library's message.
namespace baton {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();

constexpr const char* kManifestFormat = "baton-checkpoint";
constexpr const char* kStateFormat = "baton-training-state";
constexpr int kVersion = 1;

uint64_t ParseHex64(const JsonField& field) {
  const std::string text = field.String();
  uint64_t result = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), result, 16);
  if (text.size() != 16 || error != std::errc() || end != text.data() + text.size()) {
    field.Fail("expected 16 hex digits, got " + DescribeJson(field.json()));
  }
  return result;
}

// An unsigned 64-bit integer (a seed): the whole range, which JsonField::Int (int64) does not
// cover.
uint64_t ReadUint64(const JsonField& field) {
  const nlohmann::json& value = field.json();
  if (!value.is_number_unsigned()) {  // a non-negative integer parses as unsigned
    field.Fail(fmt::format("expected an integer in [0, {}], got {}",
                           std::numeric_limits<uint64_t>::max(), DescribeJson(value)));
  }
  return value.get<uint64_t>();
}

// An int-typed field (a model dimension, a layer index).
int ReadInt(const JsonField& field) {
  return static_cast<int>(
      field.Int(std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

int64_t ReadNonNegative(const JsonField& field) {
  return field.Int(0, std::numeric_limits<int64_t>::max());
}

void CheckFormat(const JsonField& root, const char* format) {
  const bool named = root.json().is_object() && root["format"].json() == format;
  if (!named) root.Fail(fmt::format("not a {} file (\"format\" should be \"{}\")", format, format));
  const int64_t version =
      root["version"].Int(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  if (version != kVersion) {
    root.Fail(fmt::format("version {} is not supported (this Baton reads {})", version, kVersion));
  }
}

nlohmann::json EntryJson(const CheckpointFileEntry& e) {
  nlohmann::json j = {{"name", e.name}, {"bytes", e.bytes}, {"fnv1a64", HexDigest(e.checksum)}};
  if (e.layer >= 0) j["layer"] = e.layer;
  if (e.rank >= 0) j["rank"] = e.rank;
  return j;
}

CheckpointFileEntry EntryFromJson(const JsonField& j) {
  CheckpointFileEntry e;
  e.name = j["name"].String();
  if (e.name.empty() || e.name.find('/') != std::string::npos || e.name[0] == '.') {
    j["name"].Fail(fmt::format("file name {} must be a plain name inside the step directory",
                               DescribeJson(j["name"].json())));
  }
  e.bytes = static_cast<uint64_t>(ReadNonNegative(j["bytes"]));
  e.checksum = ParseHex64(j["fnv1a64"]);
  if (j["layer"].present()) e.layer = ReadInt(j["layer"]);
  if (j["rank"].present()) e.rank = ReadInt(j["rank"]);
  return e;
}

// The learning-rate segments of state.json (see TrainingState::lr_segments), checked against
// the checkpoint's step: each segment was made by a run at or before it, and ends within
// kMaxTrainSteps.
std::vector<LrSegment> LrSegmentsFromJson(const JsonField& field, int64_t step) {
  std::vector<LrSegment> segments;
  if (!field.present()) return segments;
  const size_t count = field.Array().json().size();
  for (size_t i = 0; i < count; ++i) {
    const JsonField e = field[i];
    if (!e.json().is_array() || e.json().size() != 2) {
      e.Fail("expected [from, to], got " + DescribeJson(e.json()));
    }
    // The first is the run as first planned, [0, train.steps]; each later one starts after the
    // one before and no later than this checkpoint's step (an extension starts at the step of
    // the checkpoint it resumed).
    const bool first = segments.empty();
    const int64_t after = first ? 0 : segments.back().from;
    const int64_t from = e[0].Int(0, std::numeric_limits<int64_t>::max());
    const int64_t to = e[1].Int(0, std::numeric_limits<int64_t>::max());
    if (first ? from != 0 : from <= after) {
      e.Fail(fmt::format("[{}, {}] must start {} {}", from, to, first ? "at" : "after", after));
    }
    if (from > step) {
      e.Fail(
          fmt::format("[{}, {}] starts after this checkpoint's step {}: an extension starts at "
                      "the step of the checkpoint it resumed",
                      from, to, step));
    }
    if (to <= from || to > kMaxTrainSteps) {
      e.Fail(fmt::format("[{}, {}] must end after it starts and at most at step {}", from, to,
                         kMaxTrainSteps));
    }
    segments.push_back({from, to});
  }
  return segments;
}

// The loss scaler's state, checked against the checkpoint's step: every step either was clean or
// was skipped, and clean_steps counts only those since the last skipped one.
LossScalerState LossScalerFromJson(const JsonField& scaler, int64_t step) {
  LossScalerState state{};
  state.scale = scaler["scale"].Number();
  if (!std::isfinite(state.scale) || state.scale <= 0) {
    scaler["scale"].Fail(fmt::format("must be a positive number, got {}", state.scale));
  }
  state.clean = ReadNonNegative(scaler["clean_steps"]);
  state.skipped = ReadNonNegative(scaler["skipped_steps"]);
  if (state.skipped > step) {
    scaler["skipped_steps"].Fail(
        fmt::format("{} is more than the checkpoint's {} steps (each skipped one is one of them)",
                    state.skipped, step));
  }
  if (state.clean > step - state.skipped) {
    scaler["clean_steps"].Fail(fmt::format(
        "{} with skipped_steps {} is more than the checkpoint's {} steps (clean_steps counts "
        "those since the last skipped one)",
        state.clean, state.skipped, step));
  }
  return state;
}

}  // namespace

std::string EncodeFileEntries(const std::vector<CheckpointFileEntry>& entries) {
  nlohmann::json j = nlohmann::json::array();
  for (const CheckpointFileEntry& e : entries) j.push_back(EntryJson(e));
  return j.dump();
}

std::vector<CheckpointFileEntry> DecodeFileEntries(const std::string& text) {
  const std::string source = "checkpoint file entries";
  const nlohmann::json j = ParseJson(text, source);
  const JsonField entries(j, source);
  std::vector<CheckpointFileEntry> decoded;
  for (size_t i = 0; i < entries.Array().json().size(); ++i) {
    decoded.push_back(EntryFromJson(entries[i]));
  }
  return decoded;
}

nlohmann::json ToJson(const TrainingState& state) {
  nlohmann::json j = {{"format", kStateFormat},
                      {"version", kVersion},
                      {"step", state.step},
                      {"data", {{"seed", state.seed}, {"next_step", state.step + 1}}},
                      {"loss_scaler",
                       {{"scale", state.loss_scaler.scale},
                        {"clean_steps", state.loss_scaler.clean},
                        {"skipped_steps", state.loss_scaler.skipped}}},
                      {"rng", nullptr},
                      {"config", state.config}};
  if (state.rng) {
    const Rng::State& r = *state.rng;
    j["rng"] = {{"s", {HexDigest(r.s[0]), HexDigest(r.s[1]), HexDigest(r.s[2]), HexDigest(r.s[3])}},
                {"has_spare", r.has_spare},
                {"spare_bits", HexDigest(std::bit_cast<uint64_t>(r.spare))}};
  }
  if (!state.lr_segments.empty()) {
    nlohmann::json& extensions = j["lr_segments"] = nlohmann::json::array();
    for (const LrSegment& s : state.lr_segments) extensions.push_back({s.from, s.to});
  }
  return j;
}

TrainingState TrainingStateFromJson(const nlohmann::json& j, const std::string& source) {
  const JsonField root(j, source);
  CheckFormat(root, kStateFormat);
  TrainingState state;
  state.step = ReadNonNegative(root["step"]);
  state.seed = ReadUint64(root["data"]["seed"]);
  state.loss_scaler = LossScalerFromJson(root["loss_scaler"].Object(), state.step);
  if (const JsonField rng = root["rng"]; rng.present()) {
    Rng::State r{};
    for (size_t i = 0; i < 4; ++i) r.s[i] = ParseHex64(rng["s"].Array()[i]);
    r.has_spare = rng["has_spare"].Bool();
    r.spare = std::bit_cast<double>(ParseHex64(rng["spare_bits"]));
    state.rng = r;
  }
  state.lr_segments = LrSegmentsFromJson(root["lr_segments"], state.step);
  state.config = root["config"].json();  // informational (TrainingState::config): kept as is
  return state;
}

std::string CheckpointsRoot(const std::string& output_dir) {
  return (std::filesystem::path(output_dir) / kCheckpointsDirName).string();
}

std::string StepDirName(int64_t step) { return "step-" + std::to_string(step); }

std::string LayerFileName(int layer_index) {
  return "layer-" + std::to_string(layer_index) + ".safetensors";
}

std::optional<int64_t> ParseStepDirName(const std::string& name) {
  const std::string prefix = "step-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return std::nullopt;
  int64_t step = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, error] = std::from_chars(first, last, step);
  if (error != std::errc() || end != last || step < 0) return std::nullopt;
  return step;
}

std::vector<std::pair<int64_t, std::string>> StepDirs(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, std::string>> dirs;
  std::error_code error;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    const std::optional<int64_t> step = ParseStepDirName(it->path().filename().string());
    std::error_code is_dir_error;  // false too for a path stat cannot resolve (a dangling link)
    if (step && fs::is_directory(it->path(), is_dir_error)) {
      dirs.emplace_back(*step, it->path().string());
    }
  }
  BATON_CHECK(!error, "{}: cannot list: {}", root, error.message());
  std::sort(dirs.begin(), dirs.end(), std::greater<>());
  return dirs;
}

nlohmann::json ToJson(const CheckpointManifest& m) {
  nlohmann::json files = nlohmann::json::array();
  for (const CheckpointFileEntry& e : m.files) files.push_back(EntryJson(e));
  nlohmann::json model = {{"vocab_size", m.dims.vocab_size},
                          {"context", m.dims.context},
                          {"num_layers", m.dims.num_layers},
                          {"num_heads", m.dims.num_heads},
                          {"width", m.dims.width}};
  // The model's structure, written only when it has any, so dense checkpoints read as before.
  if (m.dims.shares()) {
    model["share"] = {{"group", m.dims.share_group},
                      {"attention", m.dims.share_attention},
                      {"mlp", m.dims.share_mlp}};
  }
  if (m.dims.low_rank_attn > 0 || m.dims.low_rank_mlp > 0) {
    model["low_rank"] = {{"attn", m.dims.low_rank_attn}, {"mlp", m.dims.low_rank_mlp}};
  }
  if (m.dims.llama()) {
    const RopeConfig& rope = m.dims.rope;
    model["llama"] = {{"num_kv_heads", m.dims.kv_heads()},
                      {"mlp_hidden", m.dims.hidden()},
                      {"norm_eps", m.dims.norm_eps},
                      {"rope",
                       {{"theta", rope.theta},
                        {"factor", rope.factor},
                        {"low_freq_factor", rope.low_freq_factor},
                        {"high_freq_factor", rope.high_freq_factor},
                        {"original_context", rope.original_context}}}};
    // A Llama's reads as before.
    if (m.dims.qwen2()) model["llama"]["family"] = "qwen2";
    if (m.dims.mistral()) model["llama"]["family"] = "mistral";
    if (m.dims.qwen3()) model["llama"]["family"] = "qwen3";
    if (m.dims.sliding_window > 0) model["llama"]["sliding_window"] = m.dims.sliding_window;
    if (m.dims.head_size > 0) model["llama"]["head_dim"] = m.dims.head_size;
  }
  if (m.dims.moe.enabled()) {
    const MoeDims& e = m.dims.moe;
    model["moe"] = {
        {"num_experts", e.num_experts},         {"top_k", e.top_k},
        {"expert_hidden", e.expert_hidden},     {"shared_experts", e.shared_experts},
        {"shared_hidden", e.shared_hidden},     {"shared_gate", e.shared_gate},
        {"first_dense", e.first_dense},         {"every", e.every},
        {"router", RouterName(e.router)},       {"norm_topk_prob", e.norm_topk_prob},
        {"aux_loss_coef", e.aux_loss_coef},     {"z_loss_coef", e.z_loss_coef},
        {"capacity_factor", e.capacity_factor}, {"bias_update_rate", e.bias_update_rate}};
  }
  if (!m.dims.tie_embeddings) model["tie_embeddings"] = false;
  model["layers"] = m.layer_names;
  return {{"format", kManifestFormat},
          {"version", kVersion},
          {"step", m.step},
          {"model", model},
          {"files", files}};
}

CheckpointManifest ManifestFromJson(const nlohmann::json& j, const std::string& source) {
  const JsonField root(j, source);
  CheckFormat(root, kManifestFormat);
  CheckpointManifest m;
  m.step = ReadNonNegative(root["step"]);
  const JsonField model = root["model"].Object();
  m.dims.vocab_size = ReadInt(model["vocab_size"]);
  m.dims.context = ReadInt(model["context"]);
  m.dims.num_layers = ReadInt(model["num_layers"]);
  m.dims.num_heads = ReadInt(model["num_heads"]);
  m.dims.width = ReadInt(model["width"]);
  if (const JsonField share = model["share"]; share.present()) {
    m.dims.share_group = ReadInt(share["group"]);
    m.dims.share_attention = share["attention"].Bool();
    m.dims.share_mlp = share["mlp"].Bool();
  }
  if (const JsonField low_rank = model["low_rank"]; low_rank.present()) {
    m.dims.low_rank_attn = ReadInt(low_rank["attn"]);
    m.dims.low_rank_mlp = ReadInt(low_rank["mlp"]);
  }
  if (const JsonField llama = model["llama"]; llama.present()) {  // a Llama model (model/dims.h)
    const JsonField rope = llama["rope"].Object();
    m.dims.family = ModelFamily::kLlama;
    if (const std::optional<std::string> family = llama["family"].OptionalString()) {
      if (*family != "qwen2" && *family != "mistral" && *family != "qwen3") {
        llama["family"].Fail("\"" + *family + "\", not \"qwen2\", \"mistral\" or \"qwen3\"");
      }
      m.dims.family = *family == "qwen2"     ? ModelFamily::kQwen2
                      : *family == "mistral" ? ModelFamily::kMistral
                                             : ModelFamily::kQwen3;
    }
    m.dims.sliding_window = static_cast<int>(
        llama["sliding_window"].OptionalInt(1, std::numeric_limits<int>::max()).value_or(0));
    m.dims.head_size = static_cast<int>(
        llama["head_dim"].OptionalInt(1, std::numeric_limits<int>::max()).value_or(0));
    m.dims.num_kv_heads = ReadInt(llama["num_kv_heads"]);
    m.dims.mlp_hidden = ReadInt(llama["mlp_hidden"]);
    m.dims.norm_eps = static_cast<float>(llama["norm_eps"].Number());
    m.dims.rope = {rope["theta"].Number(), rope["factor"].Number(),
                   rope["low_freq_factor"].Number(), rope["high_freq_factor"].Number(),
                   rope["original_context"].Int(std::numeric_limits<int64_t>::min(),
                                                std::numeric_limits<int64_t>::max())};
  }
  if (const JsonField moe = model["moe"]; moe.present()) {  // experts (model/dims.h MoeDims)
    MoeDims& e = m.dims.moe;
    e.num_experts = ReadInt(moe["num_experts"]);
    e.top_k = ReadInt(moe["top_k"]);
    e.expert_hidden = ReadInt(moe["expert_hidden"]);
    e.shared_experts = static_cast<int>(moe["shared_experts"].Int(0, kMaxInt));
    e.shared_hidden = static_cast<int>(moe["shared_hidden"].Int(0, kMaxInt));
    e.shared_gate = moe["shared_gate"].Bool();
    e.first_dense = static_cast<int>(moe["first_dense"].Int(0, kMaxInt));
    e.every = ReadInt(moe["every"]);
    const std::string router = moe["router"].String();
    const std::optional<MoeDims::Router> known = RouterFromName(router);
    if (!known) {
      moe["router"].Fail("\"" + router +
                         "\", not \"softmax_topk\", \"topk_softmax\" or \"sigmoid_bias\"");
    }
    e.router = *known;
    e.norm_topk_prob = moe["norm_topk_prob"].Bool();
    e.aux_loss_coef = moe["aux_loss_coef"].Number();
    e.z_loss_coef = moe["z_loss_coef"].Number();
    e.capacity_factor = moe["capacity_factor"].Number();
    // Absent from the manifests written before sigmoid_bias (no bias to update there).
    e.bias_update_rate = moe["bias_update_rate"].OptionalNumber().value_or(0.0);
  }
  if (const std::optional<bool> tie = model["tie_embeddings"].OptionalBool()) {
    m.dims.tie_embeddings = *tie;
  }
  try {
    Validate(m.dims);  // positive sizes, width a multiple of num_heads
  } catch (const Error& e) {
    BATON_FAIL("{}: model: {}", source, e.what());
  }
  const JsonField layers = model["layers"].Array();
  for (size_t i = 0; i < layers.json().size(); ++i) m.layer_names.push_back(layers[i].String());
  const JsonField files = root["files"].Array();
  for (size_t i = 0; i < files.json().size(); ++i) m.files.push_back(EntryFromJson(files[i]));
  return m;
}

}  // namespace baton
