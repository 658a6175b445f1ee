// Checkpoint tests: per-layer save and load across partitions, exact resume, corruption,
// interrupted saves and the `latest` pointer.
#include "checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/init_source.h"
#include "core/error.h"
#include "core/files.h"
#include "core/hash.h"
#include "kernels/quantize.h"

namespace baton {
namespace {

using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using checkpoint_test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

TrainingState StateAt(int64_t step) {
  TrainingState state;
  state.step = step;
  state.seed = 1337;
  state.loss_scaler = {32768.0, step - 1, 1};  // one step skipped, the rest clean since
  return state;
}

// Every rank writes its layers; rank 0 gathers the entries (as JSON, the KV store's form) and
// writes the manifest.
void Save(Fixture& f, const std::string& root, int64_t step, const std::vector<Rank*>& ranks) {
  CheckpointWriter writer(root);
  std::vector<CheckpointFileEntry> all;
  for (Rank* r : ranks) {
    const std::string sent = EncodeFileEntries(
        writer.WriteLayers(step, r->model->stage(), r->checkpoint_tensors(), *f.backend));
    for (CheckpointFileEntry& e : DecodeFileEntries(sent)) all.push_back(e);
  }
  writer.WriteManifest(step, all, StateAt(step), f.dims, f.graph);
}

void Load(Fixture& f, const std::string& dir, const std::vector<Rank*>& ranks) {
  const CheckpointReader reader = CheckpointReader::Open(dir);
  reader.CheckCompatible(f.dims, f.graph);
  for (Rank* r : ranks) reader.LoadLayers(r->checkpoint_tensors(), *f.backend);
}

std::string ErrorOf(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// model.init_from's one resolution (checkpoint/init_source.h), which the launcher and the
// worker share: each kind of source, a Hugging Face GPT-2 folder read through its weights file,
// and a folder that is none of them refused naming the config and the key.
TEST(InitSourceTest, EachKindOfFolderAndFileResolvesToWhatToRead) {
  using Kind = InitSource::Kind;
  TempDir dir("init-source");
  const std::filesystem::path root(dir.path());
  EXPECT_EQ(ResolveInitSource("", "c.yaml", false).kind, Kind::kNone);

  Fixture f;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, (root / "run").string(), 2, {&whole});
  const InitSource checkpoint = ResolveInitSource((root / "run").string(), "c.yaml", false);
  EXPECT_EQ(checkpoint.kind, Kind::kCheckpoint);
  EXPECT_EQ(checkpoint.path, (root / "run").string());

  const std::string llama = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/llama-hf";
  EXPECT_EQ(ResolveInitSource(llama, "c.yaml", true).kind, Kind::kHfLlamaFolder);

  std::filesystem::create_directories(root / "gpt2");
  std::ofstream(root / "gpt2" / "model.safetensors") << "weights";
  const InitSource gpt2 = ResolveInitSource((root / "gpt2").string(), "c.yaml", false);
  EXPECT_EQ(gpt2.kind, Kind::kGpt2File);
  EXPECT_EQ(gpt2.path, (root / "gpt2" / "model.safetensors").string());
  EXPECT_EQ(ResolveInitSource(gpt2.path, "c.yaml", false).kind, Kind::kGpt2File);

  std::filesystem::create_directories(root / "empty");
  const std::string error =
      ErrorOf([&] { ResolveInitSource((root / "empty").string(), "c.yaml", false); });
  EXPECT_THAT(error, HasSubstr("c.yaml: model.init_from " + (root / "empty").string()));
}

TEST(CheckpointTest, OneRankCheckpointLoadsBitwiseIntoTwoRankPartition) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  for (int step = 1; step <= 3; ++step) checkpoint_test::FakeStep({&whole}, step);
  Save(f, dir.path(), 3, {&whole});

  Rank first = f.MakeRank({{0, 1}}, 0, 2, DType::kF32, /*seed=*/99);
  Rank second = f.MakeRank({{2, 3}}, 1, 2, DType::kF32, /*seed=*/99);
  Load(f, dir.path(), {&first, &second});
  checkpoint_test::ExpectSameState({&whole}, {&first, &second});
  // The head's copy of wte (not stored) took the embedding's value and optimizer state.
  EXPECT_EQ(checkpoint_test::ParamState(*second.optimizer, *second.model->head_wte()),
            checkpoint_test::ParamState(*whole.optimizer, *whole.model->embedding_wte()));
}

TEST(CheckpointTest, InterleavedTwoRankCheckpointLoadsBitwiseIntoOneRank) {
  Fixture f;
  TempDir dir;
  Rank even = f.MakeRank({{0, 0}, {2, 2}}, 0, 2);
  Rank odd = f.MakeRank({{1, 1}, {3, 3}}, 1, 2);
  for (int step = 1; step <= 2; ++step) checkpoint_test::FakeStep({&even, &odd}, step);
  Save(f, dir.path(), 2, {&even, &odd});

  Rank whole = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, /*seed=*/99);
  Load(f, dir.path(), {&whole});
  checkpoint_test::ExpectSameState({&even, &odd}, {&whole});
}

TEST(CheckpointTest, Bf16ParamsRestoreValuesMastersAndMomentsBitwise) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1, DType::kBF16);
  for (int step = 1; step <= 2; ++step) checkpoint_test::FakeStep({&whole}, step);
  Save(f, dir.path(), 2, {&whole});
  const SafetensorsFile layer = CheckpointReader::Open(dir.path()).OpenLayer(1);
  EXPECT_EQ(layer.Get("h.0.attn.c_attn.weight").dtype, "BF16");
  EXPECT_EQ(layer.Get("h.0.attn.c_attn.weight.master").dtype, "F32");
  EXPECT_EQ(layer.Get("h.0.attn.c_attn.weight.adam_v").dtype, "F32");

  Rank first = f.MakeRank({{0, 2}}, 0, 2, DType::kBF16, /*seed=*/99);
  Rank second = f.MakeRank({{3, 3}}, 1, 2, DType::kBF16, /*seed=*/99);
  Load(f, dir.path(), {&first, &second});
  checkpoint_test::ExpectSameState({&whole}, {&first, &second});
}

// Resume is exact: 6 steps straight equal 3 steps, save, load onto another partition, 3 steps.
TEST(CheckpointTest, ResumingOnAnotherPartitionContinuesBitwiseLikeNeverStopping) {
  Fixture f;
  TempDir dir;
  Rank straight = f.MakeRank({{0, 3}}, 0, 1, DType::kBF16);
  for (int step = 1; step <= 6; ++step) checkpoint_test::FakeStep({&straight}, step);

  Rank before = f.MakeRank({{0, 3}}, 0, 1, DType::kBF16);
  for (int step = 1; step <= 3; ++step) checkpoint_test::FakeStep({&before}, step);
  Save(f, dir.path(), 3, {&before});
  Rank first = f.MakeRank({{0, 0}}, 0, 2, DType::kBF16, /*seed=*/99);
  Rank second = f.MakeRank({{1, 3}}, 1, 2, DType::kBF16, /*seed=*/99);
  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  for (Rank* r : {&first, &second}) reader.LoadLayers(r->checkpoint_tensors(), *f.backend);
  for (int64_t step = reader.state().step + 1; step <= 6; ++step) {
    checkpoint_test::FakeStep({&first, &second}, step);
  }
  checkpoint_test::ExpectSameState({&straight}, {&first, &second});
}

// 8-bit optimizer state (optimizer.state: int8) is stored as it is held, u8 codes and f32 block
// maxima, and resumes bit for bit on another partition; a run with the other form of state
// converts: f32 moments are quantised, 8-bit ones decoded.
TEST(CheckpointTest, Int8OptimizerStateResumesBitwiseAndConvertsBothWays) {
  Fixture f;
  f.dims = {100, 5, 2, 2, 48};  // wte and the block matrices >= 4096 elements: quantised
  f.graph = GptGraph(f.dims);
  TempDir dir;
  Rank straight = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 7, /*quantized_state=*/true);
  for (int step = 1; step <= 6; ++step) checkpoint_test::FakeStep({&straight}, step);

  Rank before = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 7, true);
  for (int step = 1; step <= 3; ++step) checkpoint_test::FakeStep({&before}, step);
  Save(f, dir.path(), 3, {&before});
  const SafetensorsFile block = CheckpointReader::Open(dir.path()).OpenLayer(1);
  EXPECT_EQ(block.Get("h.0.attn.c_attn.weight.adam_m").dtype, "U8");
  EXPECT_EQ(block.Get("h.0.attn.c_attn.weight.adam_v_absmax").shape, Shape{27});  // 6912 / 256
  EXPECT_EQ(block.Get("h.0.attn.c_proj.weight.adam_m").dtype, "F32");             // 2304 < 4096
  EXPECT_FALSE(block.Has("h.0.attn.c_proj.weight.adam_m_absmax"));

  Rank first = f.MakeRank({{0, 0}}, 0, 2, DType::kF32, 99, true);
  Rank second = f.MakeRank({{1, 3}}, 1, 2, DType::kF32, 99, true);
  Load(f, dir.path(), {&first, &second});
  for (int step = 4; step <= 6; ++step) checkpoint_test::FakeStep({&first, &second}, step);
  checkpoint_test::ExpectSameState({&straight}, {&first, &second});

  // 8-bit file -> f32 run: every moment is its decoded codes.
  Rank plain = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 99, false);
  Load(f, dir.path(), {&plain});
  int quantized = 0;
  for (const Optimizer::Slot& slot : before.optimizer->slots()) {
    const Optimizer::Slot& other = plain.optimizer->slots()[&slot - &before.optimizer->slots()[0]];
    ASSERT_EQ(slot.param->name, other.param->name);
    EXPECT_EQ(other.m.dtype(), DType::kF32);
    if (!slot.quantized()) {
      EXPECT_EQ(checkpoint_test::Bytes(slot.m), checkpoint_test::Bytes(other.m));
      continue;
    }
    ++quantized;
    const int64_t n = slot.m.numel();
    std::vector<float> m(n), v(n);
    DequantizeBlocks(slot.m.data<uint8_t>(), slot.m_absmax.data<float>(), n, SignedQuantMap(),
                     m.data());
    DequantizeBlocks(slot.v.data<uint8_t>(), slot.v_absmax.data<float>(), n, UnsignedQuantMap(),
                     v.data());
    EXPECT_EQ(std::vector<float>(other.m.data<float>(), other.m.data<float>() + n), m);
    EXPECT_EQ(std::vector<float>(other.v.data<float>(), other.v.data<float>() + n), v);
  }
  EXPECT_EQ(quantized, 7);  // wte (4800) and 3 of the 4 matrices of each block

  // f32 file -> 8-bit run: the codes are those the host quantiser gives.
  TempDir plain_dir;
  Save(f, plain_dir.path(), 3, {&plain});
  Rank requantized = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 99, true);
  Load(f, plain_dir.path(), {&requantized});
  for (const Optimizer::Slot& slot : requantized.optimizer->slots()) {
    const Optimizer::Slot& source =
        plain.optimizer->slots()[&slot - &requantized.optimizer->slots()[0]];
    if (!slot.quantized()) continue;
    const int64_t n = slot.m.numel();
    std::vector<uint8_t> codes(n);
    std::vector<float> absmax(QuantBlocks(n));
    QuantizeBlocks(source.v.data<float>(), n, UnsignedQuantMap(), codes.data(), absmax.data());
    EXPECT_EQ(std::vector<uint8_t>(slot.v.data<uint8_t>(), slot.v.data<uint8_t>() + n), codes);
    EXPECT_EQ(std::vector<float>(slot.v_absmax.data<float>(),
                                 slot.v_absmax.data<float>() + absmax.size()),
              absmax);
  }
}

// INT8 weights (baton compress --int8): dense weights quantise as they load into an INT8 model;
// its weights-only checkpoint stores codes and scales and no optimizer state, loads back exactly,
// dequantises into a dense model, and refuses to resume training, saying why.
TEST(CheckpointTest, Int8WeightsQuantiseOnLoadAndSaveAWeightsOnlyCheckpoint) {
  Fixture f;
  TempDir dir;
  const std::string dense_dir = dir.path() + "/dense", int8_dir = dir.path() + "/int8";
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  for (int step = 1; step <= 3; ++step) checkpoint_test::FakeStep({&whole}, step);
  Save(f, dense_dir, 3, {&whole});

  auto make_model = [&](bool int8, uint64_t seed) {
    return std::make_unique<StageModel>(f.graph, f.dims, std::vector<LayerRange>{{0, 3}}, 0, 1,
                                        ChunkLayout::kLoop, *f.backend, DType::kF32, DType::kF32,
                                        seed, int8);
  };
  std::unique_ptr<StageModel> int8 = make_model(true, 99);
  CheckpointReader::Open(dense_dir).LoadLayers(CheckpointTensors(*int8, nullptr), *f.backend);
  std::vector<Param*> dense_params = whole.model->params(), int8_params = int8->params();
  ASSERT_EQ(dense_params.size(), int8_params.size());
  int matrices = 0;
  for (size_t i = 0; i < dense_params.size(); ++i) {
    const Param& d = *dense_params[i];
    const Param& q = *int8_params[i];
    if (q.value.dtype() != DType::kI8) {
      EXPECT_EQ(checkpoint_test::Bytes(q.value), checkpoint_test::Bytes(d.value)) << d.name;
      continue;
    }
    ++matrices;
    const int64_t rows = d.value.size(0), cols = d.value.size(1);
    std::vector<int8_t> codes(static_cast<size_t>(rows * cols));
    std::vector<float> scale(static_cast<size_t>(cols));
    QuantizeColumnsInt8(d.value.data<float>(), rows, cols, codes.data(), scale.data());
    EXPECT_EQ(std::memcmp(q.value.raw(), codes.data(), codes.size()), 0) << d.name;
    EXPECT_EQ(std::memcmp(q.scale.raw(), scale.data(), scale.size() * 4), 0) << d.name;
  }
  EXPECT_EQ(matrices, 8);  // 4 per block

  CheckpointWriter writer(int8_dir);
  writer.WriteManifest(3,
                       writer.WriteLayers(3, 0, CheckpointTensors(*int8, nullptr), *f.backend,
                                          CheckpointContents::kWeightsOnly),
                       StateAt(3), f.dims, f.graph);
  const CheckpointReader reader = CheckpointReader::Open(int8_dir);
  const SafetensorsFile block = reader.OpenLayer(1);
  EXPECT_EQ(block.Get("h.0.attn.c_attn.weight").dtype, "I8");
  EXPECT_EQ(block.Get("h.0.attn.c_attn.weight.scale").dtype, "F32");
  EXPECT_FALSE(block.Has("h.0.attn.c_attn.weight.adam_m"));
  EXPECT_FALSE(block.Has("h.0.ln_1.weight.adam_m"));
  EXPECT_EQ(block.metadata().at("contents"), "weights");

  std::unique_ptr<StageModel> again = make_model(true, 5);
  reader.LoadLayers(CheckpointTensors(*again, nullptr), *f.backend);
  std::unique_ptr<StageModel> dense = make_model(false, 5);
  reader.LoadLayers(CheckpointTensors(*dense, nullptr), *f.backend);
  std::vector<Param*> again_params = again->params(), dense_again = dense->params();
  for (size_t i = 0; i < int8_params.size(); ++i) {
    const Param& q = *int8_params[i];
    EXPECT_EQ(checkpoint_test::Bytes(again_params[i]->value), checkpoint_test::Bytes(q.value));
    if (q.value.dtype() != DType::kI8) continue;
    EXPECT_EQ(checkpoint_test::Bytes(again_params[i]->scale), checkpoint_test::Bytes(q.scale));
    std::vector<float> restored(static_cast<size_t>(q.value.numel()));
    DequantizeColumnsInt8(q.value.data<int8_t>(), q.scale.data<float>(), q.value.size(0),
                          q.value.size(1), restored.data());
    EXPECT_EQ(ToFloatVector(dense_again[i]->value), restored) << q.name;
  }

  Rank training = f.MakeRank({{0, 3}}, 0, 1);
  EXPECT_THAT(ErrorOf([&] { reader.LoadLayers(training.checkpoint_tensors(), *f.backend); }),
              HasSubstr("it holds weights only, as baton compress writes them"));
}

TEST(CheckpointTest, TrainingStateAndModelDescriptionRoundTrip) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 4, {&whole});
  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  EXPECT_EQ(reader.step(), 4);
  EXPECT_EQ(reader.state().seed, 1337u);
  EXPECT_EQ(reader.state().loss_scaler.scale, 32768.0);
  EXPECT_EQ(reader.state().loss_scaler.clean, 3);
  EXPECT_EQ(reader.state().loss_scaler.skipped, 1);
  EXPECT_EQ(reader.dims(), f.dims);
  EXPECT_THAT(reader.layer_names(),
              ::testing::ElementsAre("embedding", "block.0", "block.1", "head"));
  EXPECT_EQ(reader.files().size(), 5u);  // four layers and state.json
  reader.VerifyAll();
  EXPECT_EQ(ReadFileToString(dir / "latest"), "step-4\n");
}

TEST(CheckpointTest, HeadFileDoesNotStoreTheTiedEmbedding) {
  Fixture f;
  TempDir dir;
  Rank first = f.MakeRank({{0, 1}}, 0, 2);
  Rank second = f.MakeRank({{2, 3}}, 1, 2);
  Save(f, dir.path(), 1, {&first, &second});
  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  EXPECT_FALSE(reader.OpenLayer(3).Has("wte.weight"));
  EXPECT_TRUE(reader.OpenLayer(3).Has("ln_f.weight.adam_m"));
  EXPECT_TRUE(reader.OpenLayer(0).Has("wte.weight.adam_v"));
}

TEST(CheckpointTest, FlippedByteInLayerFileIsRejectedNamingTheFile) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 1, {&whole});
  const std::string path = dir / "step-1/layer-2.safetensors";
  checkpoint_test::FlipByte(path, FileSize(path) - 5);

  const CheckpointReader reader = CheckpointReader::Open(dir.path());  // sizes still match
  Rank fresh = f.MakeRank({{0, 3}}, 0, 1);
  const std::string error =
      ErrorOf([&] { reader.LoadLayers(fresh.checkpoint_tensors(), *f.backend); });
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("checksum"));
  EXPECT_THAT(ErrorOf([&] { reader.VerifyAll(); }), HasSubstr(path));
}

TEST(CheckpointTest, TruncatedLayerFileIsRejectedNamingTheFile) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 1, {&whole});
  const std::string path = dir / "step-1/layer-0.safetensors";
  std::filesystem::resize_file(path, FileSize(path) - 100);
  const std::string error = ErrorOf([&] { CheckpointReader::Open(dir.path()); });
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("truncated"));
}

// state.json is checksummed, but a file crafted to match (or a manifest rewritten with it) must
// still be refused as a baton::Error naming it, not escape as the JSON parser's exception.
TEST(CheckpointTest, StateFileThatIsNotJsonIsAnErrorNamingIt) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 1, {&whole});
  const std::string state = dir / "step-1/state.json";
  WriteFileAtomically(state, "{\"format\": \"baton-training-state\", \xd7");
  const std::string manifest_path = dir / "step-1/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(ReadFileToString(manifest_path));
  for (nlohmann::json& entry : manifest["files"]) {
    if (entry["name"] != "state.json") continue;
    entry["bytes"] = FileSize(state);
    entry["fnv1a64"] = HexDigest(FileChecksum(state));
  }
  WriteFileAtomically(manifest_path, manifest.dump());
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(dir.path()); }),
              HasSubstr(state + ": not valid JSON"));
}

// Rewrites the manifest entry of `name` in `step_dir` to the file's size and checksum now, as
// someone who edited the file would.
void Rechecksum(const std::string& step_dir, const std::string& name) {
  const std::string path = step_dir + "/" + name;
  const std::string manifest_path = step_dir + "/manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(ReadFileToString(manifest_path));
  for (nlohmann::json& entry : manifest["files"]) {
    if (entry["name"] != name) continue;
    entry["bytes"] = FileSize(path);
    entry["fnv1a64"] = HexDigest(FileChecksum(path));
  }
  WriteFileAtomically(manifest_path, manifest.dump());
}

// The float at flat index `index` of F32 tensor `tensor` of a layer file.
float F32At(const std::string& path, const std::string& tensor, int64_t index) {
  const SafetensorsFile file = SafetensorsFile::Open(path);
  float value = 0;
  std::memcpy(&value, file.Bytes(file.Get(tensor)).data() + index * 4, 4);
  return value;
}

// Negates that float in place (its sign bit: the file's bytes are little-endian).
void NegateF32(const std::string& path, const std::string& tensor, int64_t index) {
  uint64_t header_bytes = 0;
  {
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(&header_bytes), sizeof(header_bytes));
  }
  const SafetensorsEntry entry = SafetensorsFile::Open(path).Get(tensor);
  ASSERT_EQ(entry.dtype, "F32");
  const auto offset = static_cast<std::streamoff>(8 + header_bytes + entry.begin + index * 4 + 3);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char high = 0;
  file.read(&high, 1);
  high = static_cast<char>(high ^ 0x80);
  file.seekp(offset);
  file.write(&high, 1);
}

// A second moment below zero (Adam's v is a mean of squares) resumed, then stopped steps later
// with "the loss is not finite ... a learning rate too high": the cause is the file, and loading
// names it and the tensor.
TEST(CheckpointTest, NegativeSecondMomentIsRefusedNamingTheFileAndTheTensor) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  for (int step = 1; step <= 2; ++step) checkpoint_test::FakeStep({&whole}, step);
  Save(f, dir.path(), 2, {&whole});
  const std::string step_dir = dir / "step-2";
  const std::string path = step_dir + "/layer-1.safetensors";
  const std::string v_name = "h.0.mlp.c_fc.weight.adam_v";
  ASSERT_GT(F32At(path, v_name, 5), 0.0f);
  NegateF32(path, v_name, 5);
  Rechecksum(step_dir, "layer-1.safetensors");

  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  Rank fresh = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, /*seed=*/99);
  EXPECT_THAT(ErrorOf([&] { reader.LoadLayers(fresh.checkpoint_tensors(), *f.backend); }),
              AllOf(HasSubstr(path), HasSubstr("tensor " + v_name +
                                               " holds 1 negative value(s) "
                                               "(the first at flat index 5)")));
  // A negative first moment is a valid state (a mean of gradients), and loads.
  NegateF32(path, v_name, 5);  // back
  const std::string m_name = "h.0.mlp.c_fc.weight.adam_m";
  int64_t positive = 0;
  while (F32At(path, m_name, positive) <= 0.0f) ++positive;
  NegateF32(path, m_name, positive);
  Rechecksum(step_dir, "layer-1.safetensors");
  const CheckpointReader again = CheckpointReader::Open(dir.path());
  EXPECT_NO_THROW(again.LoadLayers(fresh.checkpoint_tensors(), *f.backend));
}

TEST(CheckpointTest, MissingLayerFileIsRejectedNamingTheFile) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 1, {&whole});
  std::filesystem::remove(dir / "step-1/layer-1.safetensors");
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(dir / "step-1"); }),
              HasSubstr("layer-1.safetensors: missing"));
}

// A crash after the layer files but before the manifest: step 2 is incomplete.
TEST(CheckpointTest, RootWithoutNewestManifestFallsBackToPreviousCompleteCheckpoint) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  checkpoint_test::FakeStep({&whole}, 1);
  Save(f, dir.path(), 1, {&whole});
  Rank at_step_1 = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 99);
  Load(f, dir.path(), {&at_step_1});
  checkpoint_test::FakeStep({&whole}, 2);
  CheckpointWriter(dir.path())
      .WriteLayers(2, whole.model->stage(), whole.checkpoint_tensors(), *f.backend);

  for (bool with_latest : {true, false}) {
    if (!with_latest) std::filesystem::remove(dir / "latest");
    const CheckpointReader reader = CheckpointReader::Open(dir.path());
    EXPECT_EQ(reader.step(), 1);
    ASSERT_EQ(reader.skipped().size(), 1u);
    EXPECT_THAT(reader.skipped()[0], HasSubstr("step-2 (incomplete"));
    Rank loaded = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 99);
    reader.LoadLayers(loaded.checkpoint_tensors(), *f.backend);
    checkpoint_test::ExpectSameState({&at_step_1}, {&loaded});
  }
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(dir / "step-2"); }),
              HasSubstr("incomplete checkpoint"));
}

// A process killed while writing leaves only temporary files; the previous checkpoint loads.
TEST(CheckpointTest, KilledSaveLeavesPreviousCheckpointLoadable) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  checkpoint_test::FakeStep({&whole}, 1);
  Save(f, dir.path(), 1, {&whole});
  const std::string good = ReadFileToString(dir / "step-1/layer-0.safetensors");
  {
    // Mid-save of step 2 (a new file half written) and of step 1 again (a rewrite of an existing
    // file): the writers die before Commit, as a SIGKILL would leave them.
    AtomicFileWriter partial(dir / "step-1/layer-0.safetensors");
    partial.Write(good.substr(0, good.size() / 2));
    std::filesystem::create_directories(dir / "step-2");
    std::ofstream(dir / "step-2/layer-0.safetensors.tmp.12345") << good.substr(0, 100);
    std::ofstream(dir / "latest.tmp.12345") << "step-";
    std::filesystem::copy_file(partial.temp_path(), dir / "step-1/layer-0.safetensors.tmp.999");
  }
  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  EXPECT_EQ(reader.step(), 1);
  reader.VerifyAll();
  Rank loaded = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, 99);
  reader.LoadLayers(loaded.checkpoint_tensors(), *f.backend);
  checkpoint_test::ExpectSameState({&whole}, {&loaded});

  // The next complete save of that step clears the leftovers.
  Save(f, dir.path(), 1, {&whole});
  EXPECT_FALSE(std::filesystem::exists(dir / "step-1/layer-0.safetensors.tmp.999"));
}

TEST(CheckpointTest, RewritingAStepRemovesItsManifestBeforeTouchingFiles) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 1, {&whole});
  CheckpointWriter(dir.path())
      .WriteLayers(1, whole.model->stage(), whole.checkpoint_tensors(), *f.backend);
  EXPECT_FALSE(std::filesystem::exists(dir / "step-1/manifest.json"));
}

TEST(CheckpointTest, LatestWinsOverANewerStepFromAnAbandonedRun) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 5, {&whole});
  Save(f, dir.path(), 3, {&whole});  // a run resumed from step 2 writes step 3 after step 5
  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  EXPECT_EQ(reader.step(), 3);
  ASSERT_EQ(reader.skipped().size(), 1u);
  EXPECT_THAT(reader.skipped()[0], HasSubstr("step-5 (complete"));
  std::filesystem::remove(dir / "latest");
  EXPECT_EQ(CheckpointReader::Open(dir.path()).step(), 5);  // newest complete without `latest`
}

TEST(CheckpointTest, OpensAnOutputDirHoldingCheckpoints) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, CheckpointsRoot(dir.path()), 2, {&whole});
  EXPECT_EQ(CheckpointReader::Open(dir.path()).step(), 2);
  EXPECT_EQ(CheckpointReader::Open(dir / "checkpoints/step-2").step(), 2);
}

TEST(CheckpointTest, EmptyDirectoryIsNotACheckpoint) {
  TempDir dir;
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(dir.path()); }),
              HasSubstr("neither a checkpoint"));
  std::filesystem::create_directories(dir / "step-4");
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(dir.path()); }),
              HasSubstr("no complete checkpoint"));
}

// std::filesystem threw its own exception for paths stat cannot resolve. (Found by
// tests/checkpoint_fuzz_test.)
TEST(CheckpointTest, LinkLoopsAndOverlongNamesAreErrorsNamingThePathOrSkipped) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 2, {&whole});
  std::filesystem::create_symlink(dir / "step-9", dir / "step-9");  // a loop named like a step
  EXPECT_EQ(CheckpointReader::Open(dir.path()).step(), 2);
  std::filesystem::create_symlink(dir / "loop", dir / "loop");
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(dir / "loop"); }),
              HasSubstr(dir / "loop" + ": no such checkpoint directory"));
  const std::string overlong = dir / std::string(300, 'n');
  EXPECT_THAT(ErrorOf([&] { CheckpointReader::Open(overlong); }), HasSubstr(overlong));
}

TEST(CheckpointTest, ManifestRequiresEveryLayerFromSomeRank) {
  Fixture f;
  TempDir dir;
  Rank first = f.MakeRank({{0, 1}}, 0, 2);
  CheckpointWriter writer(dir.path());
  const auto entries =
      writer.WriteLayers(1, first.model->stage(), first.checkpoint_tensors(), *f.backend);
  EXPECT_THAT(ErrorOf([&] { writer.WriteManifest(1, entries, StateAt(1), f.dims, f.graph); }),
              HasSubstr("no rank wrote layer 2 (block.1)"));
  EXPECT_FALSE(std::filesystem::exists(dir / "step-1/manifest.json"));
}

TEST(CheckpointTest, IncompatibleModelIsRejectedNamingBothShapes) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Save(f, dir.path(), 1, {&whole});
  const CheckpointReader reader = CheckpointReader::Open(dir.path());
  ModelDims wider = f.dims;
  wider.width = 16;
  EXPECT_THAT(ErrorOf([&] { reader.CheckCompatible(wider, GptGraph(wider)); }), HasSubstr("C=8"));
  EXPECT_THAT(ErrorOf([&] { reader.CheckCompatible(f.dims, MlpGraph(f.dims)); }),
              HasSubstr("layer 1 is block.0 in the checkpoint but mlp_block.0"));
}

}  // namespace
}  // namespace baton
