// JSON forms of checkpoint metadata (see checkpoint_manifest.h, docs/checkpoints.md).
#include "checkpoint/checkpoint_manifest.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/hash.h"

namespace baton {
namespace {

constexpr const char* kManifestFormat = "baton-checkpoint";
constexpr const char* kStateFormat = "baton-training-state";
constexpr int kVersion = 1;

uint64_t ParseHex64(const nlohmann::json& value, const std::string& what,
                    const std::string& source) {
  BATON_CHECK(value.is_string(), "{}: {} must be a string of 16 hex digits", source, what);
  const std::string text = value.get<std::string>();
  uint64_t result = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), result, 16);
  BATON_CHECK(text.size() == 16 && error == std::errc() && end == text.data() + text.size(),
              "{}: {} must be 16 hex digits, got \"{}\"", source, what, text);
  return result;
}

// An integer field read in its own type T: a number that does not fit (4294967304 for an int, -1
// for a size), a fraction or another type is an error naming the field, never narrowed.
template <typename T>
T GetInteger(const nlohmann::json& value, const std::string& what, const std::string& source) {
  const bool fits = value.is_number_unsigned()  ? std::in_range<T>(value.get<uint64_t>())
                    : value.is_number_integer() ? std::in_range<T>(value.get<int64_t>())
                                                : false;
  BATON_CHECK(fits, "{}: {} must be an integer in [{}, {}], got {}", source, what,
              std::numeric_limits<T>::min(), std::numeric_limits<T>::max(),
              value.is_primitive() && !value.is_string() ? value.dump() : value.type_name());
  return value.get<T>();
}

void CheckFormat(const nlohmann::json& json, const char* format, const std::string& source) {
  BATON_CHECK(json.is_object() && json.value("format", "") == format,
              "{}: not a {} file (\"format\" should be \"{}\")", source, format, format);
  const int version = GetInteger<int>(json.at("version"), "version", source);
  BATON_CHECK(version == kVersion, "{}: version {} is not supported (this Baton reads {})", source,
              version, kVersion);
}

nlohmann::json EntryJson(const CheckpointFileEntry& e) {
  nlohmann::json j = {{"name", e.name}, {"bytes", e.bytes}, {"fnv1a64", HexDigest(e.checksum)}};
  if (e.layer >= 0) j["layer"] = e.layer;
  if (e.rank >= 0) j["rank"] = e.rank;
  return j;
}

CheckpointFileEntry EntryFromJson(const nlohmann::json& j, const std::string& source) {
  CheckpointFileEntry e;
  e.name = j.at("name").get<std::string>();
  BATON_CHECK(!e.name.empty() && e.name.find('/') == std::string::npos && e.name[0] != '.',
              "{}: file name \"{}\" must be a plain name inside the step directory", source,
              e.name);
  e.bytes = GetInteger<uint64_t>(j.at("bytes"), "the bytes of " + e.name, source);
  e.checksum = ParseHex64(j.at("fnv1a64"), "the fnv1a64 of " + e.name, source);
  if (j.contains("layer")) e.layer = GetInteger<int>(j["layer"], "the layer of " + e.name, source);
  if (j.contains("rank")) e.rank = GetInteger<int>(j["rank"], "the rank of " + e.name, source);
  return e;
}

// Runs `parse`, turning nlohmann's type and key errors into a baton::Error naming `source`.
template <typename F>
auto Parsing(const std::string& source, F parse) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    BATON_FAIL("{}: malformed: {}", source, e.what());
  }
}

}  // namespace

std::string EncodeFileEntries(const std::vector<CheckpointFileEntry>& entries) {
  nlohmann::json j = nlohmann::json::array();
  for (const CheckpointFileEntry& e : entries) j.push_back(EntryJson(e));
  return j.dump();
}

std::vector<CheckpointFileEntry> DecodeFileEntries(const std::string& text) {
  const std::string source = "checkpoint file entries";
  return Parsing(source, [&] {
    const nlohmann::json j = nlohmann::json::parse(text);
    BATON_CHECK(j.is_array(), "{}: expected a JSON array", source);
    std::vector<CheckpointFileEntry> entries;
    for (const nlohmann::json& e : j) entries.push_back(EntryFromJson(e, source));
    return entries;
  });
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
  return Parsing(source, [&] {
    CheckFormat(j, kStateFormat, source);
    TrainingState state;
    state.step = GetInteger<int64_t>(j.at("step"), "step", source);
    BATON_CHECK(state.step >= 0, "{}: negative step {}", source, state.step);
    state.seed = GetInteger<uint64_t>(j.at("data").at("seed"), "data.seed", source);
    const nlohmann::json& scaler = j.at("loss_scaler");
    state.loss_scaler.scale = scaler.at("scale").get<double>();
    BATON_CHECK(std::isfinite(state.loss_scaler.scale) && state.loss_scaler.scale > 0,
                "{}: loss_scaler.scale must be a positive number, got {}", source,
                state.loss_scaler.scale);
    state.loss_scaler.clean =
        GetInteger<int64_t>(scaler.at("clean_steps"), "loss_scaler.clean_steps", source);
    state.loss_scaler.skipped =
        GetInteger<int64_t>(scaler.at("skipped_steps"), "loss_scaler.skipped_steps", source);
    BATON_CHECK(state.loss_scaler.clean >= 0 && state.loss_scaler.skipped >= 0,
                "{}: loss_scaler's step counts must be >= 0, got {} clean and {} skipped", source,
                state.loss_scaler.clean, state.loss_scaler.skipped);
    const nlohmann::json& rng = j.at("rng");
    if (!rng.is_null()) {
      Rng::State r{};
      for (int i = 0; i < 4; ++i) r.s[i] = ParseHex64(rng.at("s").at(i), "rng.s", source);
      r.has_spare = rng.at("has_spare").get<bool>();
      r.spare = std::bit_cast<double>(ParseHex64(rng.at("spare_bits"), "rng.spare_bits", source));
      state.rng = r;
    }
    if (j.contains("lr_segments")) {
      const nlohmann::json& extensions = j.at("lr_segments");
      BATON_CHECK(extensions.is_array(), "{}: lr_segments must be an array of [from, to]", source);
      for (const nlohmann::json& e : extensions) {
        BATON_CHECK(e.is_array() && e.size() == 2, "{}: lr_segments: expected [from, to], got {}",
                    source, e.dump());
        const LrSegment segment{GetInteger<int64_t>(e.at(0), "lr_segments[].from", source),
                                GetInteger<int64_t>(e.at(1), "lr_segments[].to", source)};
        // The first is the run as first planned, [0, train.steps]; each later one starts after it.
        const bool first = state.lr_segments.empty();
        const int64_t last = first ? 0 : state.lr_segments.back().from;
        BATON_CHECK((first ? segment.from == 0 : segment.from > last) && segment.to > segment.from,
                    "{}: lr_segments: [{}, {}] must start {} {} and end after it starts", source,
                    segment.from, segment.to, first ? "at" : "after", last);
        state.lr_segments.push_back(segment);
      }
    }
    state.config = j.value("config", nlohmann::json());
    return state;
  });
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
  return Parsing(source, [&] {
    CheckFormat(j, kManifestFormat, source);
    CheckpointManifest m;
    m.step = GetInteger<int64_t>(j.at("step"), "step", source);
    BATON_CHECK(m.step >= 0, "{}: negative step {}", source, m.step);
    const nlohmann::json& model = j.at("model");
    const auto dim = [&](const char* key) {
      return GetInteger<int>(model.at(key), std::string("model.") + key, source);
    };
    m.dims.vocab_size = dim("vocab_size");
    m.dims.context = dim("context");
    m.dims.num_layers = dim("num_layers");
    m.dims.num_heads = dim("num_heads");
    m.dims.width = dim("width");
    if (model.contains("share")) {
      const nlohmann::json& share = model.at("share");
      m.dims.share_group = GetInteger<int>(share.at("group"), "model.share.group", source);
      m.dims.share_attention = share.at("attention").get<bool>();
      m.dims.share_mlp = share.at("mlp").get<bool>();
    }
    if (model.contains("low_rank")) {
      const nlohmann::json& low_rank = model.at("low_rank");
      m.dims.low_rank_attn = GetInteger<int>(low_rank.at("attn"), "model.low_rank.attn", source);
      m.dims.low_rank_mlp = GetInteger<int>(low_rank.at("mlp"), "model.low_rank.mlp", source);
    }
    if (model.contains("llama")) {  // a Llama model (model/dims.h)
      const nlohmann::json& llama = model.at("llama");
      const nlohmann::json& rope = llama.at("rope");
      m.dims.family = ModelFamily::kLlama;
      m.dims.num_kv_heads =
          GetInteger<int>(llama.at("num_kv_heads"), "model.llama.num_kv_heads", source);
      m.dims.mlp_hidden = GetInteger<int>(llama.at("mlp_hidden"), "model.llama.mlp_hidden", source);
      m.dims.norm_eps = llama.at("norm_eps").get<float>();
      m.dims.rope = {rope.at("theta").get<double>(), rope.at("factor").get<double>(),
                     rope.at("low_freq_factor").get<double>(),
                     rope.at("high_freq_factor").get<double>(),
                     GetInteger<int64_t>(rope.at("original_context"),
                                         "model.llama.rope.original_context", source)};
    }
    if (model.contains("tie_embeddings"))
      m.dims.tie_embeddings = model.at("tie_embeddings").get<bool>();
    try {
      Validate(m.dims);  // positive sizes, width a multiple of num_heads
    } catch (const Error& e) {
      BATON_FAIL("{}: model: {}", source, e.what());
    }
    m.layer_names = model.at("layers").get<std::vector<std::string>>();
    for (const nlohmann::json& e : j.at("files")) m.files.push_back(EntryFromJson(e, source));
    return m;
  });
}

}  // namespace baton
