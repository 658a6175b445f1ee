// Loading a Config: YAML text -> a raw (section, key) -> node table checked against the schema ->
// --set overrides -> typed fields -> Validate(). Also the YAML and JSON dumps.
#include "config/config.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "config/config_schema.h"
#include "core/error.h"
#include "core/files.h"

namespace baton {
namespace {

using namespace config_internal;

// One value as written: the YAML node and where it came from.
struct RawEntry {
  YAML::Node node;
  std::string where;  // "file:line" or "--set train.steps=5"
  std::string file;   // the file name when the node came from a file, else ""
};

// section -> key -> entry, for the keys actually written.
using RawConfig = std::map<std::string, std::map<std::string, RawEntry>>;

using Schema = std::vector<std::pair<std::string, std::vector<std::string>>>;

std::string Where(const std::string& file, const YAML::Mark& mark) {
  if (mark.line < 0) return file;
  return fmt::format("{}:{}", file, mark.line + 1);
}

const std::vector<std::string>* FindSection(const Schema& schema, const std::string& section) {
  for (const auto& [name, keys] : schema) {
    if (name == section) return &keys;
  }
  return nullptr;
}

std::string DidYouMean(std::string_view word, std::span<const std::string> candidates) {
  const std::string suggestion = Suggest(word, candidates);
  return suggestion.empty() ? "" : fmt::format(" (did you mean {}?)", suggestion);
}

// Checks that `section`.`key` exists; `where` names the place that wrote it.
void CheckKnown(const Schema& schema, const std::string& where, const std::string& section,
                const std::string& key) {
  const std::vector<std::string>* keys = FindSection(schema, section);
  if (keys == nullptr) {
    std::vector<std::string> names;
    for (const auto& entry : schema) names.push_back(entry.first);
    ConfigError(where, section,
                fmt::format("unknown section{}; sections are {}", DidYouMean(section, names),
                            fmt::join(names, ", ")));
  }
  if (key.empty()) return;
  if (std::find(keys->begin(), keys->end(), key) == keys->end()) {
    ConfigError(where, section + "." + key, "unknown key" + DidYouMean(key, *keys));
  }
}

std::string KeyName(const YAML::Node& key, const std::string& where) {
  if (!key.IsScalar()) ConfigError(where, "(key)", "expected a plain name as key");
  return key.Scalar();
}

// True when the schema has keys "<key>.<sub>" in `section`.
bool HasNestedKeys(const Schema& schema, const std::string& section, const std::string& key) {
  const std::vector<std::string>* keys = FindSection(schema, section);
  if (keys == nullptr) return false;
  const std::string prefix = key + ".";
  return std::any_of(keys->begin(), keys->end(),
                     [&](const std::string& k) { return k.starts_with(prefix); });
}

void AddRaw(const std::string& section, const std::string& key, RawEntry entry, RawConfig& raw) {
  const std::string where = entry.where;
  auto [it, inserted] = raw[section].emplace(key, std::move(entry));
  if (!inserted) {
    ConfigError(where, section + "." + key,
                fmt::format("duplicate key (first set at {})", it->second.where));
  }
}

void ReadNested(const Schema& schema, const std::string& file, const std::string& section,
                const std::string& group, const YAML::Node& body, RawConfig& raw) {
  for (const auto& pair : body) {
    const std::string where = Where(file, pair.first.Mark());
    const std::string key = group + "." + KeyName(pair.first, where);
    CheckKnown(schema, where, section, key);
    AddRaw(section, key, RawEntry{pair.second, where, file}, raw);
  }
}

void ReadSection(const Schema& schema, const std::string& file, const std::string& section,
                 const YAML::Node& body, RawConfig& raw) {
  if (body.IsNull()) return;
  if (!body.IsMap()) {
    ConfigError(Where(file, body.Mark()), section, "expected a map of keys (key: value)");
  }
  for (const auto& pair : body) {
    const std::string where = Where(file, pair.first.Mark());
    const std::string key = KeyName(pair.first, where);
    if (pair.second.IsMap() && HasNestedKeys(schema, section, key)) {
      // A nested group (model: {share: {group: 2}}): its keys are "share.group" in the schema.
      ReadNested(schema, file, section, key, pair.second, raw);
      continue;
    }
    CheckKnown(schema, where, section, key);
    AddRaw(section, key, RawEntry{pair.second, where, file}, raw);
  }
}

// Where the YAML documents of a text start: each document's start and its first node. Walks two
// documents at most: yaml-cpp's LoadAll never returns on some text (a lone ',' yields empty
// documents forever without consuming it, taking all memory).
class DocumentStarts final : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts;       // each document's first token
  std::vector<YAML::Mark> first_nodes;  // each document's first node (its start when it has none)

  void OnDocumentStart(const YAML::Mark& mark) override {
    starts.push_back(mark);
    first_nodes.push_back(mark);
    awaiting_node_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& mark) {
    if (awaiting_node_) first_nodes.back() = mark;
    awaiting_node_ = false;
  }
  bool awaiting_node_ = false;
};

// The text's one YAML document (a null node for none).
YAML::Node LoadOneDocument(const std::string& text, const std::string& file) {
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentStarts documents;
    while (documents.starts.size() < 2 && parser.HandleNextDocument(documents)) {
    }
    if (documents.starts.size() == 2) {
      const YAML::Mark& second = documents.starts[1];
      if (second.pos == documents.starts[0].pos) {  // the parser made no progress
        throw Error(fmt::format("{}: YAML syntax error: unexpected '{}'", Where(file, second),
                                text.substr(static_cast<size_t>(second.pos), 1)));
      }
      // A second document ("---") would otherwise be dropped without a word.
      throw Error(fmt::format("{}: a second YAML document; a config is one document",
                              Where(file, documents.first_nodes[1])));
    }
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}: YAML syntax error: {}", Where(file, e.mark), e.msg));
  }
}

RawConfig ReadRaw(const Schema& schema, const std::string& text, const std::string& file) {
  const YAML::Node root = LoadOneDocument(text, file);
  RawConfig raw;
  if (root.IsNull()) return raw;
  if (!root.IsMap()) {
    throw Error(fmt::format("{}: expected a map of sections (model:, data:, train:, ...)",
                            Where(file, root.Mark())));
  }
  std::set<std::string> seen;
  for (const auto& pair : root) {
    const std::string where = Where(file, pair.first.Mark());
    const std::string section = KeyName(pair.first, where);
    CheckKnown(schema, where, section, "");
    if (!seen.insert(section).second) ConfigError(where, section, "duplicate section");
    ReadSection(schema, file, section, pair.second, raw);
  }
  return raw;
}

void ApplyOverride(const Schema& schema, const std::string& text, RawConfig& raw) {
  const std::string where = "--set " + text;
  const size_t equals = text.find('=');
  const size_t dot = text.find('.');
  if (equals == std::string::npos || dot == std::string::npos || dot > equals || dot == 0 ||
      dot + 1 == equals) {  // "train.=5" and ".steps=5" name no key
    throw Error(fmt::format("{}: expected section.key=value", where));
  }
  const std::string section = text.substr(0, dot);
  const std::string key = text.substr(dot + 1, equals - dot - 1);
  CheckKnown(schema, where, section, key);
  YAML::Node node;
  try {
    node = YAML::Load(text.substr(equals + 1));
  } catch (const YAML::ParserException& e) {
    ConfigError(where, section + "." + key, "YAML syntax error in the value: " + e.msg);
  }
  raw[section][key] = RawEntry{node, where, ""};
}

// How a node looks in an error message: got 'abc', got a list, got nothing.
std::string Got(const YAML::Node& node) {
  if (node.IsScalar()) return fmt::format("got '{}'", node.Scalar());
  if (node.IsSequence()) return "got a list";
  if (node.IsMap()) return "got a map";
  return "got nothing";
}

// Fills a Config from a RawConfig, converting and range-checking each value written.
class Reader final : public FieldVisitor {
 public:
  explicit Reader(const RawConfig& raw) : raw_(raw) {}

  // Where each written key came from, by dotted key.
  std::map<std::string, std::string> where;

  void BeginSection(std::string_view section) override {
    section_ = std::string(section);
    const auto it = raw_.find(section_);
    entries_ = it == raw_.end() ? nullptr : &it->second;
  }

  void VisitInt(std::string_view key, int64_t& value, const IntRule& rule) override {
    const RawEntry* entry = Find(key);
    if (entry == nullptr) return;
    const std::string text = entry->node.IsScalar() ? entry->node.Scalar() : "";
    int64_t parsed = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data(), end, parsed);
    if (text.empty() || error != std::errc() || ptr != end || !rule.Allows(parsed)) {
      Fail(*entry, key, fmt::format("expected {}, {}", rule.Describe(), Got(entry->node)));
    }
    value = parsed;
  }

  void VisitFloat(std::string_view key, double& value, const FloatRule& rule) override {
    const RawEntry* entry = Find(key);
    if (entry == nullptr) return;
    const std::string text = entry->node.IsScalar() ? entry->node.Scalar() : "";
    double parsed = 0.0;
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data(), end, parsed);
    if (text.empty() || error != std::errc() || ptr != end || !rule.Allows(parsed)) {
      Fail(*entry, key, fmt::format("expected {}, {}", rule.Describe(), Got(entry->node)));
    }
    value = parsed;
  }

  void VisitString(std::string_view key, std::string& value) override {
    const RawEntry* entry = Find(key);
    if (entry == nullptr) return;
    if (entry->node.IsNull()) {
      value.clear();
    } else if (entry->node.IsScalar()) {
      value = entry->node.Scalar();
    } else {
      Fail(*entry, key, "expected a string, " + Got(entry->node));
    }
  }

  void VisitChoice(std::string_view key, int& index,
                   std::span<const std::string_view> names) override {
    const RawEntry* entry = Find(key);
    if (entry == nullptr) return;
    index = entry->node.IsScalar() ? IndexOf(names, entry->node.Scalar()) : -1;
    if (index < 0) {
      Fail(*entry, key,
           fmt::format("expected one of {}, {}", fmt::join(names, ", "), Got(entry->node)));
    }
  }

  void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) override {
    const RawEntry* entry = Find(key);
    if (entry == nullptr) return;
    if (!entry->node.IsScalar()) {
      Fail(*entry, key, "expected none, every:K with K >= 1, or selective, " + Got(entry->node));
    }
    try {
      value = ParseCheckpointPolicy(entry->node.Scalar());
    } catch (const Error& e) {
      Fail(*entry, key, e.what());
    }
  }

  void VisitLayers(std::string_view key, std::vector<LayerKind>& value) override {
    const RawEntry* entry = Find(key);
    if (entry == nullptr) return;
    value.clear();
    if (entry->node.IsNull()) return;
    if (!entry->node.IsSequence()) {
      Fail(*entry, key, "expected a list of layer kinds, " + Got(entry->node));
    }
    std::array<std::string_view, kLayerKindNames.size()> names;
    for (size_t i = 0; i < names.size(); ++i) names[i] = kLayerKindNames[i].first;
    for (size_t i = 0; i < entry->node.size(); ++i) {
      const YAML::Node element = entry->node[i];
      const int index = element.IsScalar() ? IndexOf(names, element.Scalar()) : -1;
      if (index < 0) {
        const std::string place =
            entry->file.empty() ? entry->where : Where(entry->file, element.Mark());
        ConfigError(place, fmt::format("{}.{}[{}]", section_, key, i),
                    fmt::format("expected one of {}, {}", fmt::join(names, ", "), Got(element)));
      }
      value.push_back(kLayerKindNames[static_cast<size_t>(index)].second);
    }
  }

 private:
  const RawEntry* Find(std::string_view key) {
    if (entries_ == nullptr) return nullptr;
    const auto it = entries_->find(std::string(key));
    if (it == entries_->end()) return nullptr;
    where[section_ + "." + std::string(key)] = it->second.where;
    return &it->second;
  }

  [[noreturn]] void Fail(const RawEntry& entry, std::string_view key, const std::string& message) {
    ConfigError(entry.where, section_ + "." + std::string(key), message);
  }

  static int IndexOf(std::span<const std::string_view> names, const std::string& value) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == value) return static_cast<int>(i);
    }
    return -1;
  }

  const RawConfig& raw_;
  const std::map<std::string, RawEntry>* entries_ = nullptr;
  std::string section_;
};

// Writes "section:" headers and "  key: value" lines.
class YamlWriter final : public FieldVisitor {
 public:
  // `skip`: dotted keys left out of the dump.
  explicit YamlWriter(std::set<std::string> skip) : skip_(std::move(skip)) {}

  std::ostringstream out;

  void BeginSection(std::string_view section) override {
    out << (section_count_++ == 0 ? "" : "\n") << section << ":\n";
    section_ = std::string(section);
  }
  void VisitInt(std::string_view key, int64_t& value, const IntRule&) override {
    Line(key, fmt::format("{}", value));
  }
  void VisitFloat(std::string_view key, double& value, const FloatRule&) override {
    Line(key, fmt::format("{}", value));  // shortest text that reads back to the same double
  }
  void VisitString(std::string_view key, std::string& value) override {
    Line(key, nlohmann::json(value).dump());  // a JSON string is a YAML double-quoted scalar
  }
  void VisitChoice(std::string_view key, int& index,
                   std::span<const std::string_view> names) override {
    BATON_CHECK(index >= 0, "{}: value has no name", key);
    Line(key, std::string(names[static_cast<size_t>(index)]));
  }
  void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) override {
    Line(key, value.ToString());
  }
  void VisitLayers(std::string_view key, std::vector<LayerKind>& value) override {
    if (value.empty()) return;  // only custom graphs list their layers
    std::vector<std::string_view> names;
    for (LayerKind kind : value) names.push_back(Name(kind));
    Line(key, fmt::format("[{}]", fmt::join(names, ", ")));
  }

 private:
  void Line(std::string_view key, const std::string& value) {
    if (skip_.contains(section_ + "." + std::string(key))) return;
    out << "  " << key << ": " << value << "\n";
  }
  std::set<std::string> skip_;
  std::string section_;
  int section_count_ = 0;
};

class JsonWriter final : public FieldVisitor {
 public:
  nlohmann::json out = nlohmann::json::object();

  void BeginSection(std::string_view section) override {
    section_ = &out[std::string(section)];
    *section_ = nlohmann::json::object();
  }
  void VisitInt(std::string_view key, int64_t& value, const IntRule&) override { Set(key, value); }
  void VisitFloat(std::string_view key, double& value, const FloatRule&) override {
    Set(key, value);
  }
  void VisitString(std::string_view key, std::string& value) override { Set(key, value); }
  void VisitChoice(std::string_view key, int& index,
                   std::span<const std::string_view> names) override {
    Set(key, index < 0 ? std::string("?") : std::string(names[static_cast<size_t>(index)]));
  }
  void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) override {
    Set(key, value.ToString());
  }
  void VisitLayers(std::string_view key, std::vector<LayerKind>& value) override {
    nlohmann::json list = nlohmann::json::array();
    for (LayerKind kind : value) list.push_back(std::string(Name(kind)));
    Set(key, list);
  }

 private:
  void Set(std::string_view key, nlohmann::json value) {
    (*section_)[std::string(key)] = std::move(value);
  }
  nlohmann::json* section_ = nullptr;
};

Config ParseRaw(const RawConfig& raw, const std::string& source_name) {
  Config config;
  Reader reader(raw);
  VisitConfig(config, reader);
  // num_layers means nothing to a custom graph; writing it suggests a misunderstanding.
  const auto num_layers = reader.where.find("model.num_layers");
  if (config.model.preset == ModelPreset::kCustom && num_layers != reader.where.end()) {
    ConfigError(num_layers->second, "model.num_layers",
                "not used with preset custom (model.layers is the whole graph); remove it");
  }
  const auto where = [&](std::string_view dotted_key) {
    const auto it = reader.where.find(std::string(dotted_key));
    return it == reader.where.end() ? std::string() : it->second;
  };
  ValidateConfig(config, where, source_name);
  CheckConfigFiles(config, where, source_name);
  return config;
}

}  // namespace

Config ParseConfigString(const std::string& yaml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  const Schema schema = SchemaKeys();
  RawConfig raw = ReadRaw(schema, yaml_text, source_name);
  for (const std::string& text : overrides) ApplyOverride(schema, text, raw);
  return ParseRaw(raw, source_name);
}

Config LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  // Opened without blocking (a FIFO is refused, not waited on); its size is checked before the
  // text is read.
  const MappedFile file = MappedFile::Open(path);
  if (file.size() > kMaxConfigBytes) {
    throw Error(fmt::format("{}: {} bytes is not a config (the limit is {} bytes)", path,
                            file.size(), kMaxConfigBytes));
  }
  return ParseConfigString(std::string(reinterpret_cast<const char*>(file.data()), file.size()),
                           path, overrides);
}

void Validate(const Config& config) {
  ValidateConfig(
      config, [](std::string_view) { return std::string(); }, "config");
}

std::string ToYaml(const Config& config) {
  Config copy = config;
  std::set<std::string> skip;
  if (config.model.preset == ModelPreset::kCustom) skip.insert("model.num_layers");
  YamlWriter writer(std::move(skip));
  writer.out << "# Baton config (canonical dump: every field, schema order; see docs/config.md)\n";
  VisitConfig(copy, writer);
  return writer.out.str();
}

nlohmann::json ToJson(const Config& config) {
  Config copy = config;
  JsonWriter writer;
  VisitConfig(copy, writer);
  return writer.out;
}

int64_t SequenceLength(const Config& config) {
  return config.data.seq_len > 0 ? config.data.seq_len : config.model.context;
}

int MicroBatchSize(const Config& config) {
  return config.train.batch_size / config.train.micro_batches;
}

int MicroBatchesPerReplica(const Config& config) {
  return config.train.micro_batches / config.parallel.replicas;
}

DataFormat ResolvedDataFormat(const DataConfig& data) {
  if (data.format != DataFormat::kAuto) return data.format;
  return std::filesystem::path(data.path).extension() == ".bin" ? DataFormat::kBin
                                                                : DataFormat::kText;
}

}  // namespace baton
