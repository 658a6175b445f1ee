// Fuzzing the safetensors reader (docs/safetensors.md) and GPT-2 import: real files written by the
// project (WriteSafetensors with every loadable dtype and an empty tensor, a GPT-2 export, a
// hub-style GPT-2 with buffers and lm_head), then the 8-byte header length, the JSON header (dtype,
// shapes whose product overflows, offsets out of range, backwards or overlapping, duplicate names,
// bytes that are not UTF-8, metadata) and the data mutated. Every case reads the file as the
// worker does for model.init_from (ReadSafetensors, every tensor's bytes and a copy of each,
// ValidateGpt2File, InitFromSafetensors) and ends in success or a baton::Error naming the file, and
// the tensor when one tensor's entry was made invalid.
#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_gpt2.h"
#include "tests/fuzz_util.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {

using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using fuzz::CaseId;
using fuzz::Mutator;
using nlohmann::json;

constexpr uint64_t kSeed = 0x5eed0004;

std::string Header(const std::string& bytes, uint64_t& length) {
  length = 0;
  if (bytes.size() >= 8) std::memcpy(&length, bytes.data(), 8);
  return 8 + length <= bytes.size() ? bytes.substr(8, length) : std::string();
}

std::string WithHeader(const std::string& header, uint64_t length, const std::string& data) {
  return std::string(reinterpret_cast<const char*>(&length), 8) + header + data;
}

// What a case did to one tensor's entry, when the error must then name that tensor.
struct Target {
  std::string tensor;  // "" when the case did more than break one entry
};

// One change to one tensor's entry: its dtype, shape or offsets, its name, or its removal.
void MutateEntry(Mutator& m, json& header, Target& target) {
  std::vector<std::string> names;
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") names.push_back(name);
  }
  if (names.empty()) return;
  const std::string name = m.Pick(names);
  json& entry = header[name];
  if (!entry.is_object()) return;
  switch (m.Below(6)) {
    case 0:  // a dtype that is unknown, of another size, or not a string
      entry["dtype"] = m.Pick(std::vector<json>{"F64", "U8", "BOOL", "X", "", 5, nullptr, "f32",
                                                "F8_E4M3", "I64", "I32", "F16"});
      if (!entry["dtype"].is_string() ||
          SafetensorsDTypeSize(entry["dtype"].get<std::string>()) == 0) {
        target.tensor = name;
      }
      return;
    case 1: {  // a shape that overflows, is negative, fractional, nested or of another size
      const json big = uint64_t{1} << 32;
      const std::vector<json> shapes = {{big, big},
                                        {uint64_t{1} << 63},
                                        {UINT64_MAX},
                                        {UINT64_MAX, UINT64_MAX, 0},
                                        {0, uint64_t{1} << 62, uint64_t{1} << 62},
                                        {big, big, big},
                                        {-1},
                                        {1.5},
                                        {"a"},
                                        {{1}},
                                        json::array()};
      const size_t pick = m.Below(shapes.size());
      entry["shape"] = shapes[pick];
      // Every shape but {0, 2^62, 2^62} and {} (which an empty or one-element tensor may have)
      // is invalid for any tensor.
      if (pick != 4 && pick + 1 != shapes.size()) target.tensor = name;
      return;
    }
    case 2: {  // offsets past the end, backwards, negative, of another tensor, malformed
      const json& neighbour = header[m.Pick(names)];
      const json other = neighbour.is_object() ? neighbour.value("data_offsets", json()) : json();
      entry["data_offsets"] = m.Pick(std::vector<json>{{0, UINT64_MAX},
                                                       {UINT64_MAX, 0},
                                                       {-1, 4},
                                                       {0},
                                                       {0, 4, 8},
                                                       {1.5, 2},
                                                       {"0", "4"},
                                                       other,
                                                       {uint64_t{1} << 63, uint64_t{1} << 63}});
      return;
    }
    case 3:  // renamed: unknown, a block past the model, both spellings of one name
      header[m.Pick(std::vector<std::string>{"unknown", "h.99999999999.ln_1.weight",
                                             "transformer.h.7.ln_1.weight", "wte.weight",
                                             "transformer.wte.weight", "lm_head.weight",
                                             "h.0.attn.bias", "h.-1.ln_1.weight", "h..x"})] = entry;
      header.erase(name);
      return;
    case 4:
      header.erase(name);
      return;
    default:
      fuzz::MutateJson(m, entry);
      return;
  }
}

// Mutates the file's bytes: header length, header JSON (structurally or as text), data, or all.
std::string MutateFile(Mutator& m, const std::string& original, Target& target) {
  uint64_t length = 0;
  const std::string header_text = Header(original, length);
  const std::string data = original.substr(std::min<size_t>(original.size(), 8 + length));
  switch (m.Below(8)) {
    case 0: {  // the header length alone
      const uint64_t size = original.size();
      return WithHeader(header_text,
                        m.Pick(std::vector<uint64_t>{0, 1, 2, length - 1, length + 1, size - 8,
                                                     size - 7, size, uint64_t{1} << 63, UINT64_MAX,
                                                     100'000'001, length + (uint64_t{1} << 32)}),
                        data);
    }
    case 1:
    case 2:
    case 3: {  // one tensor's entry, the length kept consistent (or not)
      json header = json::parse(header_text);
      MutateEntry(m, header, target);
      std::string text = header.dump();
      text.append(m.Below(9), ' ');
      const bool consistent = m.Chance(0.85);
      if (!consistent) target.tensor.clear();
      return WithHeader(text, consistent ? text.size() : length, data);
    }
    case 4: {  // anywhere in the header, metadata included
      json header = json::parse(header_text);
      for (size_t i = 0, n = 1 + m.Below(3); i < n; ++i) fuzz::MutateJson(m, header);
      const std::string text = header.dump();
      return WithHeader(text, text.size(), data);
    }
    case 5: {  // as text: a duplicate name, bytes that are not UTF-8, flipped bytes
      std::string text = header_text;
      const size_t quote = text.find('"');
      const size_t end = text.find('"', quote + 1);
      switch (m.Below(3)) {
        case 0:
          if (end != std::string::npos) {
            text.insert(1, text.substr(quote, end - quote + 1) +
                               R"(:{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)");
          }
          break;
        case 1:
          if (end != std::string::npos && end > quote + 1) {
            text[quote + 1 + m.Below(end - quote - 1)] =
                m.Pick(std::vector<char>{'\xff', '\xc0', '\x80', '\xed', '\0'});
          }
          break;
        default:
          for (size_t i = 0, n = 1 + m.Below(4); i < n; ++i) m.MutateBytes(text);
          break;
      }
      return WithHeader(text, m.Chance(0.9) ? text.size() : length, data);
    }
    case 6: {  // the data: flipped (values change, the format holds), truncated or extended
      std::string bytes = original;
      const size_t start = original.size() - data.size();
      switch (m.Below(3)) {
        case 0:
          if (!data.empty()) bytes[start + m.Below(data.size())] ^= 0x40;
          break;
        case 1:
          bytes.resize(start + m.Below(data.size() + 1));
          break;
        default:
          bytes += m.Junk(1 + m.Below(16));
          break;
      }
      return bytes;
    }
    default: {  // the whole file's bytes
      std::string bytes = original;
      for (size_t i = 0, n = 1 + m.Below(4); i < n; ++i) m.MutateBytes(bytes);
      return bytes;
    }
  }
}

// What reading a file means here: every tensor's bytes touched and each loadable one copied into a
// tensor of its shape (as checkpoints load), then GPT-2 validation and import (model.init_from).
void ReadFile(Mutator& m, Fixture& f, const std::string& path) {
  const SafetensorsFile file = ReadSafetensors(path);
  uint64_t sum = 0;
  for (const SafetensorsEntry& entry : file.entries()) {
    for (const std::byte b : file.Bytes(entry)) sum += std::to_integer<uint64_t>(b);
    if (entry.nbytes() > (uint64_t{1} << 24)) continue;
    const DType dtype = entry.dtype == "I32" ? DType::kI32 : DType::kF32;
    Tensor dst = Tensor::Empty(f.backend->allocator(), entry.shape, dtype, MemCategory::kWorkspace);
    file.CopyTo(entry.name, dst, *f.backend);
  }
  EXPECT_GE(sum, 0u);
  ValidateGpt2File(file, f.dims);
  Rank rank = f.MakeRank({{0, f.last_layer()}}, 0, 1,
                         m.Pick(std::vector<DType>{DType::kF32, DType::kBF16, DType::kF16}));
  InitFromSafetensors(file, rank.model->params(), rank.optimizer.get(), *f.backend);
}

TEST(SafetensorsFuzzTest, MutatedFilesLoadOrFailNamingTheFileAndTheTensor) {
  Fixture f;
  checkpoint_test::TempDir dir;
  std::vector<std::string> bases;
  {  // every dtype Baton loads, an empty tensor, metadata
    CpuAllocator host(f.ledger);
    const auto filled = [&](Shape shape, DType dtype) {
      Tensor t = Tensor::Zeros(host, shape, dtype, MemCategory::kWorkspace);
      auto* bytes = static_cast<unsigned char*>(t.raw());
      for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 1);
      return t;
    };
    WriteSafetensors(dir / "mixed.safetensors",
                     {{"a", filled({3, 4}, DType::kF32)},
                      {"b", filled({5}, DType::kBF16)},
                      {"c", filled({2, 2}, DType::kF16)},
                      {"d", filled({7}, DType::kI32)},
                      {"e", filled({0, 3}, DType::kF32)}},
                     {{"format", "pt"}, {"note", "fuzz"}});
    bases.push_back(fuzz::ReadBytes(dir / "mixed.safetensors"));
  }
  Rank source = f.MakeRank({{0, f.last_layer()}}, 0, 1);
  ExportHfGpt2(dir / "gpt2", source.param_tensors(), f.dims, *f.backend);
  bases.push_back(fuzz::ReadBytes(dir / "gpt2/model.safetensors"));
  {  // the hub's layout: plain names, attention buffers, lm_head stored as wte's copy
    CpuAllocator host(f.ledger);
    NamedTensors tensors;
    for (const Param* p : source.model->params()) {
      if (!p->tied) tensors.emplace_back(p->name, p->value);
    }
    tensors.emplace_back("h.0.attn.bias",
                         Tensor::Zeros(host, {1, 1, 5, 5}, DType::kF32, MemCategory::kWorkspace));
    tensors.emplace_back("lm_head.weight", source.model->embedding_wte()->value);
    WriteSafetensors(dir / "hub.safetensors", tensors, {});
    bases.push_back(fuzz::ReadBytes(dir / "hub.safetensors"));
  }

  fuzz::AddressSpaceCap cap(fuzz::kAddressSpaceCap);
  int loaded = 0, refused = 0;
  for (const int index : fuzz::Cases()) {
    const CaseId id{"safetensors", kSeed, index};
    Mutator m(fuzz::CaseSeed(kSeed, index));
    Target target;
    const std::string bytes = MutateFile(m, bases[m.Below(bases.size())], target);
    const std::string path = dir / ("case-" + std::to_string(index) + ".safetensors");
    fuzz::WriteBytes(path, bytes);
    const fuzz::Outcome outcome = fuzz::RunCase(id, [&] { ReadFile(m, f, path); });
    std::filesystem::remove(path);
    if (outcome.ok) {
      ++loaded;
      continue;
    }
    ++refused;
    fuzz::ExpectErrorNames(id, outcome.error, path, "the file");
    if (!target.tensor.empty()) {
      fuzz::ExpectErrorNames(id, outcome.error, "tensor " + target.tensor, "the broken tensor");
    }
  }
  std::printf("safetensors fuzz: %d loaded, %d refused\n", loaded, refused);
  if (fuzz::Cases().size() >= 100) {
    EXPECT_GE(loaded, 10);
  }
}

}  // namespace
}  // namespace baton
