// GPT-2 import/export tests: HF names both ways, tied head, buffers ignored, dtype conversion,
// whole-file validation, and the export of a checkpoint.
#include "checkpoint/safetensors_gpt2.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_export.h"
#include "checkpoint/checkpoint_test_util.h"
#include "core/error.h"

namespace baton {
namespace {

using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using checkpoint_test::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

template <typename F>
std::string ErrorOf(F action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Param values only (no optimizer state), for comparing imports.
void ExpectSameValues(const std::vector<Rank*>& a, const std::vector<Rank*>& b) {
  for (Rank* r : a) {
    for (auto& [index, layer] : r->model->layers()) {
      for (Param* p : layer->params()) {
        const Param* other = checkpoint_test::FindParam(b, index, p->name).second;
        ASSERT_NE(other, nullptr);
        EXPECT_EQ(checkpoint_test::Bytes(p->value), checkpoint_test::Bytes(other->value))
            << "layer " << index << " " << p->name;
      }
    }
  }
}

TEST(SafetensorsGpt2Test, ExportThenImportIsBitwise) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  checkpoint_test::FakeStep({&whole}, 1);
  ExportHfGpt2(dir.path(), whole.param_tensors(), f.dims, *f.backend);

  const SafetensorsFile file = ReadSafetensors(dir / "model.safetensors");
  ValidateGpt2File(file, f.dims);
  Rank first = f.MakeRank({{0, 2}}, 0, 2, DType::kF32, /*seed=*/99);
  Rank second = f.MakeRank({{3, 3}}, 1, 2, DType::kF32, /*seed=*/99);
  for (Rank* r : {&first, &second}) LoadParamsFromSafetensors(file, r->param_tensors(), *f.backend);
  ExpectSameValues({&whole}, {&first, &second});
  EXPECT_EQ(checkpoint_test::Bytes(second.model->head_wte()->value),
            checkpoint_test::Bytes(whole.model->embedding_wte()->value));
}

TEST(SafetensorsGpt2Test, ExportUsesTransformersNamesAndDoesNotStoreTheLmHead) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  ExportHfGpt2(dir.path(), whole.param_tensors(), f.dims, *f.backend);
  const SafetensorsFile file = ReadSafetensors(dir / "model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_TRUE(file.Has("transformer.wte.weight"));
  EXPECT_TRUE(file.Has("transformer.h.1.attn.c_attn.weight"));
  EXPECT_EQ(file.Get("transformer.h.1.attn.c_attn.weight").shape, (Shape{8, 24}));  // [in, out]
  EXPECT_EQ(file.Get("transformer.h.0.mlp.c_proj.weight").shape, (Shape{32, 8}));
  EXPECT_FALSE(file.Has("lm_head.weight"));
  EXPECT_EQ(file.entries().size(), 2u + 2u * 12u + 2u);  // wte, wpe, 2 blocks, ln_f

  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(dir / "config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(config["n_embd"], 8);
  EXPECT_EQ(config["n_head"], 2);
  EXPECT_EQ(config["n_layer"], 2);
  EXPECT_EQ(config["n_positions"], 5);
  EXPECT_EQ(config["vocab_size"], 11);
  EXPECT_EQ(config["activation_function"], "gelu_new");
  EXPECT_EQ(config["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(config["tie_word_embeddings"], true);
}

// The hub's own gpt2 file: names without "transformer.", the causal-mask buffers, lm_head stored
// as a copy of wte.
TEST(SafetensorsGpt2Test, ImportAcceptsHubNamesAndIgnoresAttentionBuffers) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  CpuAllocator host(f.ledger);  // outlives the buffers below
  NamedTensors tensors;
  for (const Param* p : whole.model->params()) {
    if (!p->tied) tensors.emplace_back(p->name, p->value);
  }
  for (int i = 0; i < 2; ++i) {
    tensors.emplace_back(fmt::format("h.{}.attn.bias", i),
                         Tensor::Zeros(host, {1, 1, 5, 5}, DType::kF32, MemCategory::kWorkspace));
    tensors.emplace_back(fmt::format("h.{}.attn.masked_bias", i),
                         Tensor::Zeros(host, {}, DType::kF32, MemCategory::kWorkspace));
  }
  tensors.emplace_back("lm_head.weight", whole.model->embedding_wte()->value);
  ExportSafetensors(tensors, dir / "hub.safetensors", {{"format", "pt"}});

  const SafetensorsFile file = ReadSafetensors(dir / "hub.safetensors");
  ValidateGpt2File(file, f.dims);
  Rank loaded = f.MakeRank({{0, 3}}, 0, 1, DType::kF32, /*seed=*/99);
  LoadParamsFromSafetensors(file, loaded.param_tensors(), *f.backend);
  ExpectSameValues({&whole}, {&loaded});
}

TEST(SafetensorsGpt2Test, ImportConvertsToBf16AndInitSetsMastersFromTheFile) {
  Fixture f;
  TempDir dir;
  Rank source = f.MakeRank({{0, 3}}, 0, 1);
  ExportHfGpt2(dir.path(), source.param_tensors(), f.dims, *f.backend);
  const SafetensorsFile file = ReadSafetensors(dir / "model.safetensors");
  Rank bf16 = f.MakeRank({{0, 3}}, 0, 1, DType::kBF16, /*seed=*/99);
  InitFromSafetensors(file, bf16.model->params(), bf16.optimizer.get(), *f.backend);
  for (const Optimizer::Slot& slot : bf16.optimizer->slots()) {
    const Param* original = checkpoint_test::FindParam({&source}, 0, "wpe.weight").second;
    if (slot.param->name != "wpe.weight") continue;
    EXPECT_EQ(checkpoint_test::Bytes(slot.master), checkpoint_test::Bytes(original->value));
    EXPECT_EQ(BFloat16ToFloat(slot.param->value.data<uint16_t>()[3]),
              BFloat16ToFloat(FloatToBFloat16(original->value.data<float>()[3])));
  }
}

TEST(SafetensorsGpt2Test, MissingOrMisshapedTensorIsAnErrorNamingIt) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  NamedTensors tensors = Gpt2ExportTensors(whole.param_tensors());
  const std::string path = dir / "m.safetensors";
  std::erase_if(tensors, [](const auto& t) { return t.first == "transformer.h.1.ln_2.bias"; });
  ExportSafetensors(tensors, path, {{"format", "pt"}});
  Rank loaded = f.MakeRank({{0, 3}}, 0, 1);
  EXPECT_THAT(ErrorOf([&] {
                LoadParamsFromSafetensors(ReadSafetensors(path), loaded.param_tensors(),
                                          *f.backend);
              }),
              HasSubstr(path + ": no tensor transformer.h.1.ln_2.bias (nor h.1.ln_2.bias)"));

  ModelDims wide = f.dims;
  wide.width = 16;
  Fixture g;
  g.dims = wide;
  g.graph = GptGraph(wide);
  Rank big = g.MakeRank({{0, 3}}, 0, 1);
  ExportSafetensors(Gpt2ExportTensors(big.param_tensors()), path, {{"format", "pt"}});
  EXPECT_THAT(
      ErrorOf([&] {
        LoadParamsFromSafetensors(ReadSafetensors(path), loaded.param_tensors(), *f.backend);
      }),
      HasSubstr("tensor transformer.wte.weight has shape (11, 16) but (11, 8) was expected"));
}

TEST(SafetensorsGpt2Test, ValidateRejectsExtraBlocksUnknownTensorsAndUntiedHead) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  const std::string path = dir / "v.safetensors";
  const NamedTensors base = Gpt2ExportTensors(whole.param_tensors());
  const Tensor ln = whole.model->params()[2]->value;  // h.0.ln_1.weight (C)

  NamedTensors extra = base;
  extra.emplace_back("transformer.h.2.ln_1.weight", ln);
  ExportSafetensors(extra, path);
  EXPECT_THAT(ErrorOf([&] { ValidateGpt2File(ReadSafetensors(path), f.dims); }),
              HasSubstr("belongs to block 2 but the model has 2 blocks"));

  NamedTensors unknown = base;
  unknown.emplace_back("transformer.h.0.attn.q_proj.weight", ln);
  ExportSafetensors(unknown, path);
  EXPECT_THAT(ErrorOf([&] { ValidateGpt2File(ReadSafetensors(path), f.dims); }),
              HasSubstr("transformer.h.0.attn.q_proj.weight is not a GPT-2 parameter"));

  NamedTensors untied = base;
  untied.emplace_back("lm_head.weight", whole.optimizer->slots()[0].m);  // zeros, not wte
  ExportSafetensors(untied, path);
  EXPECT_THAT(ErrorOf([&] { ValidateGpt2File(ReadSafetensors(path), f.dims); }),
              HasSubstr("lm_head.weight differs from wte.weight"));

  NamedTensors both = base;
  both.emplace_back("wpe.weight", whole.model->params()[1]->value);
  ExportSafetensors(both, path);
  EXPECT_THAT(ErrorOf([&] { FindGpt2Tensor(ReadSafetensors(path), "wpe.weight"); }),
              HasSubstr("holds both transformer.wpe.weight and wpe.weight"));
}

TEST(SafetensorsGpt2Test, CheckpointExportsAsHfGpt2WhateverPartitionWroteIt) {
  Fixture f;
  TempDir dir;
  Rank first = f.MakeRank({{0, 1}}, 0, 2, DType::kBF16);
  Rank second = f.MakeRank({{2, 3}}, 1, 2, DType::kBF16);
  checkpoint_test::FakeStep({&first, &second}, 1);
  CheckpointWriter writer(dir / "checkpoints");
  std::vector<CheckpointFileEntry> entries;
  for (Rank* r : {&first, &second}) {
    for (auto& e : writer.WriteLayers(1, r->model->stage(), r->checkpoint_tensors(), *f.backend))
      entries.push_back(e);
  }
  TrainingState state;
  state.step = 1;
  writer.WriteManifest(1, entries, state, f.dims, f.graph);

  ExportCheckpointToHf(CheckpointReader::Open(dir.path()), dir / "hf");
  const SafetensorsFile file = ReadSafetensors(dir / "hf/model.safetensors");
  ValidateGpt2File(file, f.dims);
  EXPECT_EQ(file.Get("transformer.h.0.attn.c_attn.weight").dtype, "F32");  // the f32 masters
  Rank loaded = f.MakeRank({{0, 3}}, 0, 1, DType::kBF16, /*seed=*/99);
  LoadParamsFromSafetensors(file, loaded.param_tensors(), *f.backend);
  ExpectSameValues({&first, &second}, {&loaded});  // the masters round to the bf16 params
  EXPECT_TRUE(FileExists(dir / "hf/config.json"));
}

// A layer file holding a tensor it should not, with a manifest whose checksum matches (so the
// reader accepts it): export refuses to carry it into the GPT-2 file.
TEST(SafetensorsGpt2Test, ExportRefusesATensorTheCheckpointShouldNotHold) {
  Fixture f;
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  std::vector<LayerTensors> layers = whole.checkpoint_tensors();
  ParamTensors stray = layers.front().params.front();
  stray.name = "h.0.attn.extra";
  stray.tied = false;
  layers.front().params.push_back(stray);
  CheckpointWriter writer(dir.path());
  TrainingState state;
  state.step = 1;
  writer.WriteManifest(1, writer.WriteLayers(1, whole.model->stage(), layers, *f.backend), state,
                       f.dims, f.graph);
  EXPECT_THAT(
      ErrorOf([&] { ExportCheckpointToHf(CheckpointReader::Open(dir.path()), dir / "hf"); }),
      AllOf(HasSubstr("layer-0"), HasSubstr("tensor h.0.attn.extra is not a parameter"),
            HasSubstr("refusing to export it")));
  EXPECT_FALSE(FileExists(dir / "hf/model.safetensors"));
}

TEST(SafetensorsGpt2Test, ConfigNamesTheEndOfTextIdAsBosAndEos) {
  Fixture f;
  TempDir dir;
  WriteHfGpt2Config(dir / "gpt2", f.dims);
  const nlohmann::json gpt2 = nlohmann::json::parse(ReadFileToString(dir / "gpt2/config.json"));
  EXPECT_EQ(gpt2["eos_token_id"], f.dims.vocab_size - 1);  // GPT-2's 50256 in a 50257 vocabulary
  EXPECT_EQ(gpt2["bos_token_id"], f.dims.vocab_size - 1);
  WriteHfGpt2Config(dir / "bpe", f.dims, DType::kF32, 3);  // a tokenizer's <|endoftext|>
  const nlohmann::json bpe = nlohmann::json::parse(ReadFileToString(dir / "bpe/config.json"));
  EXPECT_EQ(bpe["eos_token_id"], 3);
  EXPECT_EQ(bpe["bos_token_id"], 3);
  EXPECT_THAT(
      ErrorOf([&] { WriteHfGpt2Config(dir / "bad", f.dims, DType::kF32, f.dims.vocab_size); }),
      HasSubstr("outside the model's"));
}

TEST(SafetensorsGpt2Test, OnlyTheGptGraphExportsAsGpt2) {
  Fixture f;
  f.graph = MlpGraph(f.dims);
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  CheckpointWriter writer(dir.path());
  TrainingState state;
  state.step = 1;
  writer.WriteManifest(
      1, writer.WriteLayers(1, whole.model->stage(), whole.checkpoint_tensors(), *f.backend), state,
      f.dims, f.graph);
  EXPECT_THAT(
      ErrorOf([&] { ExportCheckpointToHf(CheckpointReader::Open(dir.path()), dir / "hf"); }),
      HasSubstr("only a gpt- or llama-preset model"));
}

}  // namespace
}  // namespace baton
