// Fuzzing checkpoints (docs/checkpoints.md): a real checkpoint of a tiny GPT written by the
// project's writer, then its manifest.json mutated (bytes, wrong types, missing fields, numbers
// past int and int64), its state.json and layer files mutated (flipped, truncated, extended, a
// header changed), some of them crafted with a matching manifest checksum, and its files replaced
// by folders, FIFOs or nothing. Every case reads it as resume and export do (Open, CheckCompatible,
// VerifyAll, LoadLayers on a partition, ExportCheckpointToHf) and ends in success or a baton::Error
// naming the file (or the checkpoint's directory). A success must be exact: what was not crafted
// loads bitwise as saved, and the manifest's numbers are the ones read, not narrowed ones.
#include <sys/stat.h>

#include <cmath>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_test_util.h"
#include "config/config.h"
#include "core/files.h"
#include "core/hash.h"
#include "launcher/export.h"
#include "tests/fuzz_util.h"

namespace baton {
namespace {

using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using fuzz::CaseId;
using fuzz::Mutator;
namespace fs = std::filesystem;

constexpr uint64_t kSeed = 0x5eed0003;
constexpr int64_t kStep = 3;

// A saved checkpoint: the rank that wrote it, and its files (relative to the root) as bytes.
struct Saved {
  DType dtype;
  Rank rank;
  std::vector<std::pair<std::string, std::string>> files;
};

Saved SaveCheckpoint(Fixture& f, DType dtype, const std::string& root) {
  Saved saved{dtype, f.MakeRank({{0, f.last_layer()}}, 0, 1, dtype), {}};
  for (int step = 1; step <= kStep; ++step) checkpoint_test::FakeStep({&saved.rank}, step);
  CheckpointWriter writer(root);
  TrainingState state;
  state.step = kStep;
  state.seed = 1337;
  state.loss_scaler = {32768.0, 2, 1};  // 2 clean steps since 1 skipped: the 3 steps
  // The run's config, as the worker stores it: `baton export` reads it back (data.tokenizer).
  state.config = ToJson(ParseConfigString(
      "model:\n  vocab_size: 11\n  context: 5\n  num_layers: 2\n  num_heads: 2\n  width: 8\n"
      "data:\n  path: data.bin\n",
      "tiny.yaml"));
  writer.WriteManifest(kStep,
                       writer.WriteLayers(kStep, 0, saved.rank.checkpoint_tensors(), *f.backend),
                       state, f.dims, f.graph);
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file()) continue;
    saved.files.emplace_back(fs::relative(entry.path(), root).string(),
                             fuzz::ReadBytes(entry.path().string()));
  }
  return saved;
}

// Sets the manifest's entry for `name` to the file's current size and checksum, as someone crafting
// a file would.
void CraftChecksum(const std::string& step_dir, const std::string& name) {
  const std::string manifest_path = step_dir + "/" + kManifestFileName;
  nlohmann::json manifest =
      nlohmann::json::parse(fuzz::ReadBytes(manifest_path), nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_array()) return;
  const std::string bytes = fuzz::ReadBytes(step_dir + "/" + name);
  Fnv1a64 hash;
  hash.Update(bytes.data(), bytes.size());
  for (nlohmann::json& entry : manifest["files"]) {
    if (entry.is_object() && entry.value("name", nlohmann::json()) == name) {
      entry["bytes"] = bytes.size();
      entry["fnv1a64"] = hash.hex();
    }
  }
  fuzz::WriteBytes(manifest_path, manifest.dump(2));
}

// Mutates a JSON file structurally (or its bytes, when it does not parse).
void MutateJsonFile(Mutator& m, const std::string& path) {
  std::string text = fuzz::ReadBytes(path);
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || m.Chance(0.25)) {
    m.MutateBytes(text);
    fuzz::WriteBytes(path, text);
    return;
  }
  for (size_t i = 0, n = 1 + m.Below(2); i < n; ++i) fuzz::MutateJson(m, json);
  fuzz::WriteBytes(path, json.dump(2));
}

// What one case did to the checkpoint: whether a layer file's contents were crafted to pass the
// manifest's checksum (then a successful load may differ from what was saved).
struct Damage {
  bool crafted_layer = false;
};

void Mutate(Mutator& m, const std::string& root, Damage& damage) {
  const std::string step_dir = root + "/" + StepDirName(kStep);
  const std::string layer = LayerFileName(static_cast<int>(m.Below(4)));
  switch (m.Below(10)) {
    case 0:
    case 1:
    case 2:
      MutateJsonFile(m, step_dir + "/" + kManifestFileName);
      return;
    case 3:  // state.json, with or without a matching checksum
      MutateJsonFile(m, step_dir + "/" + kStateFileName);
      if (m.Chance(0.8)) CraftChecksum(step_dir, kStateFileName);
      return;
    case 4:
    case 5: {  // a layer file's bytes, or its header's JSON, with or without a matching checksum
      const std::string path = step_dir + "/" + layer;
      std::string bytes = fuzz::ReadBytes(path);
      uint64_t header_length = 0;
      if (bytes.size() >= 8) std::memcpy(&header_length, bytes.data(), 8);
      nlohmann::json header;
      if (m.Chance(0.5) && 8 + header_length <= bytes.size()) {
        header = nlohmann::json::parse(bytes.substr(8, header_length), nullptr, false);
      }
      if (header.is_object()) {
        fuzz::MutateJson(m, header);
        const std::string text = header.dump();
        const uint64_t length = text.size();
        bytes = std::string(reinterpret_cast<const char*>(&length), 8) + text +
                bytes.substr(8 + header_length);
      } else {
        for (size_t i = 0, n = 1 + m.Below(3); i < n; ++i) m.MutateBytes(bytes);
      }
      fuzz::WriteBytes(path, bytes);
      if (m.Chance(0.7)) {
        CraftChecksum(step_dir, layer);
        damage.crafted_layer = true;
      }
      return;
    }
    case 6:  // `latest` pointing elsewhere, or junk
      fuzz::WriteBytes(root + "/" + kLatestFileName,
                       m.Pick(std::vector<std::string>{"step-4\n", "step--1", "", "../step-3",
                                                       "step-99999999999999999999", "\xff\n",
                                                       "step-3 step-3", std::string(5000, 's')}));
      return;
    case 7: {  // a newer step: incomplete, with a copy of the manifest, or a link to itself
      const std::string newer =
          root + "/" + m.Pick(std::vector<std::string>{"step-4", "step-10", "step-x", "step-04"});
      if (m.Chance(0.2)) {
        if (!fs::exists(fs::symlink_status(newer))) fs::create_symlink(newer, newer);  // ELOOP
        return;
      }
      if (fs::is_symlink(fs::symlink_status(newer))) return;
      fs::create_directories(newer);
      if (m.Chance(0.5)) {
        fuzz::WriteBytes(newer + "/" + kManifestFileName,
                         fuzz::ReadBytes(step_dir + "/" + kManifestFileName));
      }
      return;
    }
    default: {  // a file replaced by nothing, a folder, a FIFO, a link to a device, or renamed
      const std::string path =
          step_dir + "/" +
          m.Pick(std::vector<std::string>{layer, kStateFileName, kManifestFileName});
      fs::remove(path);
      switch (m.Below(5)) {
        case 0:
          fs::create_directories(path);
          return;
        case 1:
          ::mkfifo(path.c_str(), 0600);
          return;
        case 2:
          fs::create_symlink("/dev/zero", path);
          return;
        case 3:
          fuzz::WriteBytes(path + ".bak", "");
          return;
        default:
          return;
      }
    }
  }
}

// The manifest's numbers are the ones read: nothing narrowed on the way (4294967304 is not 8).
void ExpectManifestReadExactly(const CheckpointReader& reader) {
  const nlohmann::json manifest = nlohmann::json::parse(
      fuzz::ReadBytes(reader.step_dir() + "/" + kManifestFileName), nullptr, false);
  EXPECT_EQ(manifest["step"], reader.step());
  for (const auto& [key, value] :
       {std::pair<const char*, int>{"vocab_size", reader.dims().vocab_size},
        {"context", reader.dims().context},
        {"num_layers", reader.dims().num_layers},
        {"num_heads", reader.dims().num_heads},
        {"width", reader.dims().width}}) {
    EXPECT_EQ(manifest["model"][key], value) << key;
  }
  // A state the trainer can continue from (a crafted state.json is checksummed like any other).
  const LossScalerState& scaler = reader.state().loss_scaler;
  EXPECT_TRUE(std::isfinite(scaler.scale) && scaler.scale > 0) << scaler.scale;
  EXPECT_GE(scaler.clean, 0);
  EXPECT_GE(scaler.skipped, 0);
}

// Resume as the worker runs it (every rank of a partition loads what it holds), `baton export`
// (ExportCommand: the reader, the stored config, the GPT-2 files), or both. `original`: the rank
// that saved, for the exactness of a success.
void ReadBack(Mutator& m, Fixture& f, const std::string& case_dir, Saved& original,
              const Damage& damage) {
  const std::string root = case_dir + "/" + kCheckpointsDirName;
  // The folder given: a checkpoints root, an output dir, a step, or paths stat cannot resolve.
  const std::string loop = case_dir + "/loop";
  if (!fs::exists(fs::symlink_status(loop))) fs::create_symlink(loop, loop);
  const std::string target =
      m.Chance(0.9)
          ? m.Pick(std::vector<std::string>{root, case_dir, root + "/" + StepDirName(kStep)})
          : m.Pick(std::vector<std::string>{loop, case_dir + "/" + std::string(300, 'n'),
                                            root + "/" + kLatestFileName + "/x"});
  const CheckpointReader reader = CheckpointReader::Open(target);
  ExpectManifestReadExactly(reader);
  const size_t paths = m.Below(3);  // 0: resume, 1: export, 2: both
  if (paths != 1) {
    reader.CheckCompatible(f.dims, f.graph);
    reader.VerifyAll();
    const int split = static_cast<int>(m.Below(static_cast<size_t>(f.last_layer())));
    Rank first = f.MakeRank({{0, split}}, 0, 2, original.dtype, /*seed=*/99);
    Rank second = f.MakeRank({{split + 1, f.last_layer()}}, 1, 2, original.dtype, /*seed=*/99);
    for (Rank* r : {&first, &second}) reader.LoadLayers(r->checkpoint_tensors(), *f.backend);
    if (!damage.crafted_layer) {
      checkpoint_test::ExpectSameState({&original.rank}, {&first, &second});
    }
  }
  if (paths != 0) {
    ExportOptions options;
    options.checkpoint = target;
    options.output = case_dir + "/export";
    options.dtype = m.Pick(std::vector<std::string>{"f32", "bf16", "f16"});
    EXPECT_EQ(ExportCommand(options), 0);
  }
}

TEST(CheckpointFuzzTest, MutatedCheckpointsLoadExactlyOrFailNamingTheFile) {
  Fixture f;
  checkpoint_test::TempDir dir;
  std::vector<Saved> bases;
  bases.push_back(SaveCheckpoint(f, DType::kF32, dir / "base-f32"));
  bases.push_back(SaveCheckpoint(f, DType::kBF16, dir / "base-bf16"));
  fuzz::AddressSpaceCap cap(fuzz::kAddressSpaceCap);
  const fuzz::QuietLog quiet;  // the reader's warnings about skipped steps, export's progress
  int loaded = 0, refused = 0;
  for (const int index : fuzz::Cases()) {
    const CaseId id{"checkpoint", kSeed, index};
    Mutator m(fuzz::CaseSeed(kSeed, index));
    Saved& base = bases[m.Below(bases.size())];
    const std::string case_dir = dir / ("case-" + std::to_string(index));
    const std::string root = case_dir + "/" + kCheckpointsDirName;
    for (const auto& [name, bytes] : base.files) {
      fs::create_directories(fs::path(root + "/" + name).parent_path());
      fuzz::WriteBytes(root + "/" + name, bytes);
    }
    Damage damage;
    for (size_t i = 0, n = 1 + m.Below(3); i < n; ++i) Mutate(m, root, damage);

    const fuzz::Outcome outcome =
        fuzz::RunCase(id, [&] { ReadBack(m, f, case_dir, base, damage); });
    if (outcome.ok) {
      ++loaded;
    } else {
      ++refused;
      fuzz::ExpectErrorNames(id, outcome.error, case_dir, "the checkpoint's file or directory");
      // state.json and manifest.json errors give a key path (or line and column), never the
      // JSON library's "[json.exception.type_error.302] ...". (Safetensors headers are read
      // by checkpoint/safetensors.cc, not by these readers.)
      const bool metadata = outcome.error.find(kStateFileName) != std::string::npos ||
                            outcome.error.find(kManifestFileName) != std::string::npos;
      EXPECT_FALSE(metadata && outcome.error.find("json.exception") != std::string::npos)
          << id.ToString() << ": " << outcome.error;
    }
    fs::remove_all(case_dir);
  }
  std::printf("checkpoint fuzz: %d loaded, %d refused\n", loaded, refused);
  if (fuzz::Cases().size() >= 100) {
    EXPECT_GE(loaded, 10);
  }
}

}  // namespace
}  // namespace baton
