// Llama import/export tests: Baton -> Hugging Face -> Baton bit for bit (tied and untied, GQA and
// MHA), a folder transformers wrote (tests/fixtures/llama-hf) giving transformers' logits, a rank
// reading only its own shards, and the refusals (a config.json that disagrees or is not a Llama,
// biases, a truncated shard, NaN).
#include "checkpoint/safetensors_llama.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_export.h"
#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/hf_test_util.h"
#include "core/error.h"
#include "kernels/testing/numeric_check.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using checkpoint_test::AddExperts;
using checkpoint_test::ErrorAgainstTransformers;
using checkpoint_test::ErrorOf;
using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using checkpoint_test::TempDir;
using checkpoint_test::TinyLlamaDims;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kFixtureDir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/llama-hf";

// A checkpoint of `ranks` (one step of fake training) at dir/checkpoints.
void WriteCheckpoint(Fixture& f, const std::vector<Rank*>& ranks, const TempDir& dir) {
  CheckpointWriter writer(dir / "checkpoints");
  std::vector<CheckpointFileEntry> entries;
  for (Rank* r : ranks) {
    for (auto& e : writer.WriteLayers(1, r->model->stage(), r->checkpoint_tensors(), *f.backend))
      entries.push_back(e);
  }
  TrainingState state;
  state.step = 1;
  writer.WriteManifest(1, entries, state, f.dims, f.graph);
}

struct RoundTripCase {
  const char* name;
  int kv_heads;  // 0 = num_heads (MHA)
  bool tied;
  bool qwen2 = false;  // q, k and v biases
  int window = 0;      // a Mistral with this sliding window
  bool moe = false;    // experts: a Mixtral, or with qwen2 a Qwen2-MoE (a gated shared expert)
};

class LlamaRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

// `baton export` of a checkpoint that two stages wrote, then model.init_from onto another cut:
// every parameter (and the head's tied copy) comes back bit for bit.
TEST_P(LlamaRoundTripTest, CheckpointExportThenImportIsBitwise) {
  Fixture f;
  f.dims = TinyLlamaDims(GetParam().kv_heads, GetParam().tied);
  if (GetParam().qwen2) f.dims.family = ModelFamily::kQwen2;
  if (GetParam().window > 0) {
    f.dims.family = ModelFamily::kMistral;
    f.dims.sliding_window = GetParam().window;
  }
  if (GetParam().moe) AddExperts(f.dims, GetParam().qwen2);
  f.graph = GptGraph(f.dims);
  TempDir dir;
  Rank first = f.MakeRank({{0, 1}}, 0, 2);
  Rank second = f.MakeRank({{2, 3}}, 1, 2);
  checkpoint_test::FakeStep({&first, &second}, 1);
  WriteCheckpoint(f, {&first, &second}, dir);
  ExportCheckpointToHf(CheckpointReader::Open(dir / "checkpoints"), dir / "hf");

  HfLlamaFolder folder = HfLlamaFolder::Open(dir / "hf");
  ModelDims spelled_out = f.dims;  // config.json names MHA's key/value heads
  spelled_out.num_kv_heads = f.dims.kv_heads();
  // A Mixtral's intermediate_size is its experts' width: no layer of it is dense.
  if (GetParam().moe && !GetParam().qwen2) spelled_out.mlp_hidden = f.dims.moe.expert_hidden;
  EXPECT_EQ(DimsOfHfLlama(folder.config(), f.dims.context), spelled_out);
  ValidateHfLlamaFolder(folder, f.dims);
  Rank head_first = f.MakeRank({{0, 2}}, 0, 2, DType::kF32, /*seed=*/99);
  Rank head_last = f.MakeRank({{3, 3}}, 1, 2, DType::kF32, /*seed=*/99);
  for (Rank* r : {&head_first, &head_last}) {
    LoadLlamaParamsFromHf(folder, f.dims, r->param_tensors(), *f.backend);
  }
  int compared = 0;
  for (Rank* r : {&first, &second}) {
    for (auto& [index, layer] : r->model->layers()) {
      for (Param* p : layer->params()) {
        const Param* loaded =
            checkpoint_test::FindParam({&head_first, &head_last}, index, p->name).second;
        ASSERT_NE(loaded, nullptr);
        EXPECT_EQ(checkpoint_test::Bytes(p->value), checkpoint_test::Bytes(loaded->value))
            << "layer " << index << " " << p->name;
        ++compared;
      }
    }
  }
  // wte, the blocks (a Qwen2's c_attn bias, experts' router, stacks and shared expert), ln_f,
  // lm_head or the tied copy
  EXPECT_EQ(compared, static_cast<int>(LlamaParamNames(f.dims).size()) + (GetParam().tied ? 1 : 0));
  EXPECT_EQ(compared, 1 + (GetParam().qwen2 ? 7 : 6) * 2 + 2 +
                          (GetParam().moe ? (GetParam().qwen2 ? 4 : 1) * 2 : 0));
  if (GetParam().tied) {
    EXPECT_EQ(checkpoint_test::Bytes(head_last.model->head_wte()->value),
              checkpoint_test::Bytes(first.model->embedding_wte()->value));
  }
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntiedGqaAndMha, LlamaRoundTripTest,
                         ::testing::Values(RoundTripCase{"UntiedGqa", 2, false},
                                           RoundTripCase{"TiedGqa", 1, true},
                                           RoundTripCase{"UntiedMha", 0, false},
                                           RoundTripCase{"TiedMha", 0, true},
                                           RoundTripCase{"Qwen2UntiedGqa", 2, false, true},
                                           RoundTripCase{"Qwen2TiedGqa", 1, true, true},
                                           RoundTripCase{"MistralWindow3", 2, false, false, 3},
                                           RoundTripCase{"Mixtral", 2, false, false, 0, true},
                                           RoundTripCase{"Qwen2Moe", 2, true, true, 0, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SafetensorsLlamaTest, ExportWritesTransformersNamesLayoutsAndConfig) {
  Fixture f;
  f.dims = TinyLlamaDims(2, false);
  f.graph = GptGraph(f.dims);
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  ExportHfLlama(dir.path(), whole.param_tensors(), f.dims, *f.backend);
  const SafetensorsFile file = ReadSafetensors(dir / "model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.entries().size(), 1u + 9u * 2u + 2u);  // embed, 9 per layer, norm, lm_head
  EXPECT_EQ(file.Get("model.layers.1.self_attn.q_proj.weight").shape, (Shape{16, 16}));
  EXPECT_EQ(file.Get("model.layers.1.self_attn.k_proj.weight").shape, (Shape{8, 16}));  // (out, in)
  EXPECT_EQ(file.Get("model.layers.0.mlp.gate_proj.weight").shape, (Shape{24, 16}));
  EXPECT_EQ(file.Get("model.layers.0.mlp.down_proj.weight").shape, (Shape{16, 24}));
  EXPECT_EQ(file.Get("lm_head.weight").shape, (Shape{11, 16}));
  // k_proj row j is column C + j of Baton's c_attn; up_proj row j is column H + j of c_fc.
  const Param* c_attn = checkpoint_test::FindParam({&whole}, 1, "h.0.attn.c_attn.weight").second;
  const float* k = reinterpret_cast<const float*>(
      file.Bytes(file.Get("model.layers.0.self_attn.k_proj.weight")).data());
  EXPECT_EQ(k[3 * 16 + 5], c_attn->value.data<float>()[5 * 32 + 16 + 3]);

  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(dir / "config.json"));
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["head_dim"], 4);
  EXPECT_EQ(config["intermediate_size"], 24);
  EXPECT_EQ(config["rms_norm_eps"], 1e-5);  // the float's shortest decimal, not 9.99999974e-06
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(config["rope_scaling"]["original_max_position_embeddings"], 64);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["attention_bias"], false);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(ReadHfLlamaConfig(dir / "config.json").rope, f.dims.rope);
}

// A Qwen2 exports its q, k and v biases under their Hugging Face names, c_attn.bias's three parts
// in order, and a config.json Qwen2ForCausalLM reads: model_type qwen2, no sliding window, no
// attention_bias key (Qwen2's biases are its architecture).
TEST(SafetensorsLlamaTest, Qwen2ExportWritesItsQkvBiasesAndAQwen2Config) {
  Fixture f;
  f.dims = TinyLlamaDims(2, true);
  f.dims.family = ModelFamily::kQwen2;
  f.graph = GptGraph(f.dims);
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  checkpoint_test::FakeStep({&whole}, 1);  // biases start at 0: one step makes them differ
  ExportHfLlama(dir.path(), whole.param_tensors(), f.dims, *f.backend);
  const SafetensorsFile file = ReadSafetensors(dir / "model.safetensors");
  EXPECT_EQ(file.entries().size(), 1u + 12u * 2u + 1u);  // embed, 12 per layer, norm; tied
  EXPECT_EQ(file.Get("model.layers.1.self_attn.q_proj.bias").shape, (Shape{16}));
  EXPECT_EQ(file.Get("model.layers.1.self_attn.k_proj.bias").shape, (Shape{8}));
  EXPECT_EQ(file.Get("model.layers.1.self_attn.v_proj.bias").shape, (Shape{8}));
  EXPECT_FALSE(file.Has("model.layers.1.self_attn.o_proj.bias"));
  // v_proj's bias j is element C + KV + j of c_attn.bias.
  const Param* bias = checkpoint_test::FindParam({&whole}, 2, "h.1.attn.c_attn.bias").second;
  ASSERT_NE(bias, nullptr);
  const float* v = reinterpret_cast<const float*>(
      file.Bytes(file.Get("model.layers.1.self_attn.v_proj.bias")).data());
  EXPECT_EQ(v[3], bias->value.data<float>()[16 + 8 + 3]);
  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(dir / "config.json"));
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"Qwen2ForCausalLM"}));
  EXPECT_EQ(config["model_type"], "qwen2");
  EXPECT_EQ(config["use_sliding_window"], false);
  EXPECT_FALSE(config.contains("attention_bias"));
  const HfLlamaConfig read = ReadHfLlamaConfig(dir / "config.json");
  EXPECT_TRUE(read.qwen2);
  EXPECT_EQ(DimsOfHfLlama(read, f.dims.context), f.dims);
  // A Qwen2 with its sliding window on is refused, naming the key.
  nlohmann::json sliding = config;
  sliding["use_sliding_window"] = true;
  std::ofstream(dir / "config.json", std::ios::trunc) << sliding.dump();
  EXPECT_THAT(ErrorOf([&] { ReadHfLlamaConfig(dir / "config.json"); }),
              HasSubstr("use_sliding_window is true"));
}

// tests/fixtures/llama-hf: a LlamaForCausalLM transformers made and saved in 3 shards
// (make_llama_hf_fixture.py), with the logits transformers computed. Loaded as model.init_from
// loads it, Baton's forward gives the same logits: the independent check of the RoPE layout and
// Llama 3 scaling, the grouping of query heads onto key/value heads, SwiGLU's gate/up order and
// RMSNorm. f32 throughout; the two differ by summation order only.
TEST(SafetensorsLlamaTest, TransformersFolderGivesTransformersLogits) {
  const nlohmann::json reference =
      nlohmann::json::parse(ReadFileToString(kFixtureDir + "/reference.json"));
  const double error = ErrorAgainstTransformers(kFixtureDir, reference, [](const ModelDims& dims) {
    ASSERT_LT(dims.kv_heads(), dims.num_heads);  // grouped-query attention
    ASSERT_GT(dims.rope.factor, 0.0);            // Llama 3 rope scaling
    ASSERT_FALSE(dims.tie_embeddings);
    ASSERT_FALSE(dims.qwen2());
  });
  EXPECT_LT(error, 1e-5) << "transformers " << reference["transformers_version"];
  RecordProperty("normalised_error", fmt::format("{:.3g}", error));
}

// tests/fixtures/head-dim-hf: a LlamaForCausalLM whose head_dim (12) is not hidden_size /
// num_attention_heads (make_head_dim_hf_fixture.py: 4 heads, 48 query columns for a hidden size of
// 32, as Qwen3's models have it): Baton's head_size gives transformers' logits; the export writes
// the same names, shapes and head_dim back, and reads back as the same model.
TEST(SafetensorsLlamaTest, AHeadDimApartFromTheWidthGivesTransformersLogitsAndExportsBack) {
  const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/head-dim-hf";
  const nlohmann::json reference = nlohmann::json::parse(ReadFileToString(dir + "/reference.json"));
  const double error = ErrorAgainstTransformers(dir, reference, [](const ModelDims& dims) {
    ASSERT_EQ(dims.head_size, 12);
    ASSERT_EQ(dims.attention_width(), 48);
    ASSERT_EQ(dims.width, 32);
  });
  EXPECT_LT(error, 1e-5) << "transformers " << reference["transformers_version"];
  RecordProperty("normalised_error", fmt::format("{:.3g}", error));

  TempDir out;
  const ModelDims dims = checkpoint_test::LoadAndExport(dir, 12, out / "hf");
  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(out / "hf/config.json"));
  EXPECT_EQ(config["head_dim"], 12);
  EXPECT_EQ(DimsOfHfLlama(ReadHfLlamaConfig(out / "hf/config.json"), 12), dims);
  const SafetensorsFile file = ReadSafetensors(out / "hf/model.safetensors");
  EXPECT_EQ(file.Get("model.layers.1.self_attn.o_proj.weight").shape, (Shape{32, 48}));
  EXPECT_EQ(file.Get("model.layers.1.self_attn.q_proj.weight").shape, (Shape{48, 32}));
  EXPECT_EQ(file.Get("model.layers.1.self_attn.k_proj.weight").shape, (Shape{24, 32}));
  HfLlamaFolder original = HfLlamaFolder::Open(dir);
  for (const char* name :
       {"model.layers.1.self_attn.o_proj.weight", "model.layers.0.self_attn.q_proj.weight"}) {
    const SafetensorsFile* stored = original.FileOf(name);
    ASSERT_NE(stored, nullptr) << name;
    const auto a = stored->Bytes(stored->Get(name));
    const auto b = file.Bytes(file.Get(name));
    EXPECT_TRUE(a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin())) << name;
  }
}

// tests/fixtures/qwen2-hf: a Qwen2ForCausalLM (make_qwen2_hf_fixture.py: q, k and v biases drawn
// N(0, 0.3^2), which move its logits by up to 4; tied head; grouped-query attention) saved in 2
// shards with transformers' logits: Baton's Qwen2 gives them within 1e-6.
TEST(SafetensorsLlamaTest, TransformersQwen2FolderGivesTransformersLogits) {
  const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/qwen2-hf";
  const nlohmann::json reference = nlohmann::json::parse(ReadFileToString(dir + "/reference.json"));
  const double error = ErrorAgainstTransformers(dir, reference, [](const ModelDims& dims) {
    ASSERT_TRUE(dims.qwen2());
    ASSERT_LT(dims.kv_heads(), dims.num_heads);
    ASSERT_TRUE(dims.tie_embeddings);
  });
  EXPECT_LT(error, 1e-6) << "transformers " << reference["transformers_version"];
  RecordProperty("normalised_error", fmt::format("{:.3g}", error));
}

// tests/fixtures/mistral-hf: a MistralForCausalLM (make_mistral_hf_fixture.py: sliding_window 4,
// 11 tokens, eager attention, in which query t sees keys t - 3 .. t) with transformers' logits, and
// the same weights' logits without the window: Baton's window gives the first within 1e-6 and is
// far from the second (the window matters from position 4 on).
TEST(SafetensorsLlamaTest, TransformersMistralFolderGivesTransformersSlidingWindowLogits) {
  const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/mistral-hf";
  const nlohmann::json reference = nlohmann::json::parse(ReadFileToString(dir + "/reference.json"));
  const double error = ErrorAgainstTransformers(dir, reference, [](const ModelDims& dims) {
    ASSERT_TRUE(dims.mistral());
    ASSERT_EQ(dims.sliding_window, 4);
    ASSERT_FALSE(dims.tie_embeddings);
  });
  EXPECT_LT(error, 1e-6) << "transformers " << reference["transformers_version"];
  RecordProperty("normalised_error", fmt::format("{:.3g}", error));
  nlohmann::json no_window = reference;
  no_window["logits"] = reference["logits_no_window"];
  const double apart = ErrorAgainstTransformers(dir, no_window, [](const ModelDims&) {});
  EXPECT_GT(apart, 1e-2);
  RecordProperty("against_no_window", fmt::format("{:.3g}", apart));
}

// The fixture's weight map puts the embedding in shard 1, layer 1 and the norm in shard 2 and the
// LM head in shard 3: a rank opens the files its params are in, no others.
TEST(SafetensorsLlamaTest, ARankReadsOnlyTheShardsHoldingItsLayers) {
  Fixture f;
  {
    const HfLlamaFolder probe = HfLlamaFolder::Open(kFixtureDir);
    f.dims = DimsOfHfLlama(probe.config(), 12);
  }
  f.graph = GptGraph(f.dims);
  HfLlamaFolder embedding_only = HfLlamaFolder::Open(kFixtureDir);
  Rank first = f.MakeRank({{0, 0}}, 0, 3);
  LoadLlamaParamsFromHf(embedding_only, f.dims, first.param_tensors(), *f.backend);
  EXPECT_THAT(embedding_only.opened_files(), ElementsAre("model-00001-of-00003.safetensors"));
  HfLlamaFolder tail = HfLlamaFolder::Open(kFixtureDir);
  Rank last = f.MakeRank({{2, 3}}, 2, 3);
  LoadLlamaParamsFromHf(tail, f.dims, last.param_tensors(), *f.backend);
  EXPECT_THAT(tail.opened_files(),
              ElementsAre("model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"));
}

// A copy of the fixture in `dir`, with config.json edited by `edit`.
void CopyFixture(const TempDir& dir, const std::function<void(nlohmann::json&)>& edit = {}) {
  for (const auto& entry : fs::directory_iterator(kFixtureDir)) {
    fs::copy_file(entry.path(), fs::path(dir.path()) / entry.path().filename());
  }
  if (!edit) return;
  nlohmann::json config = nlohmann::json::parse(ReadFileToString(dir / "config.json"));
  edit(config);
  fs::permissions(dir / "config.json", fs::perms::owner_write, fs::perm_options::add);
  WriteFileAtomically(dir / "config.json", config.dump(2));
}

TEST(SafetensorsLlamaTest, RefusesConfigsBatonsLlamaCannotBe) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c["model_type"] = "gpt2"; }, "not a Hugging Face Llama"},
      {[](auto& c) { c["attention_bias"] = true; }, "attention_bias is true: Baton's Llama has no"},
      {[](auto& c) { c["mlp_bias"] = true; }, "mlp_bias is true"},
      {[](auto& c) { c["head_dim"] = 15; }, "head_dim 15 is odd: rotary positions"},
      {[](auto& c) { c["hidden_act"] = "gelu"; }, "hidden_act \"gelu\""},
      {[](auto& c) {
         c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       "rope_scaling of rope_type \"yarn\""},
      {[](auto& c) { c.erase("num_hidden_layers"); },
       "num_hidden_layers: missing; expected an integer"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    CopyFixture(dir, c.edit);
    EXPECT_THAT(ErrorOf([&] { HfLlamaFolder::Open(dir.path()); }),
                AllOf(HasSubstr("config.json"), HasSubstr(c.error)));
  }
}

struct ConfigCase {
  std::function<void(nlohmann::json&)> edit;
  std::string error;  // after "DIR/config.json: "
};

// Opens a copy of the fixture edited by each case: the error is the case's, after the file's name,
// and never a raw nlohmann message.
void ExpectConfigErrors(const std::vector<ConfigCase>& cases) {
  for (const ConfigCase& c : cases) {
    TempDir dir;
    CopyFixture(dir, c.edit);
    const std::string error = ErrorOf([&] { HfLlamaFolder::Open(dir.path()); });
    EXPECT_THAT(error, HasSubstr(dir / "config.json: " + c.error));
    EXPECT_THAT(error, Not(HasSubstr("json.exception")));
  }
}

// Each field Baton reads is type-checked: a wrong type names the file and the key path (it was
// "[json.exception.type_error.302] type must be boolean, but is string", naming neither).
TEST(SafetensorsLlamaTest, AConfigFieldOfTheWrongTypeNamesTheFileAndTheKey) {
  ExpectConfigErrors({
      {[](auto& c) { c["tie_word_embeddings"] = "yes"; },
       "tie_word_embeddings: expected a boolean, got string \"yes\""},
      {[](auto& c) { c["hidden_act"] = 5; }, "hidden_act: expected a string, got number 5"},
      {[](auto& c) { c["attention_bias"] = "false"; },
       "attention_bias: expected a boolean, got string \"false\""},
      {[](auto& c) { c["mlp_bias"] = 0; }, "mlp_bias: expected a boolean, got number 0"},
      {[](auto& c) { c["model_type"] = 5; }, "model_type: expected a string, got number 5"},
      {[](auto& c) { c["architectures"] = {7}; },
       "architectures[0]: expected a string, got number 7"},
      {[](auto& c) { c["architectures"] = "LlamaForCausalLM"; },
       "architectures: expected an array, got string \"LlamaForCausalLM\""},
      {[](auto& c) { c["rope_scaling"]["rope_type"] = 5; },
       "rope_scaling.rope_type: expected a string, got number 5"},
      {[](auto& c) { c["rope_scaling"] = "llama3"; },
       "rope_scaling: expected an object, got string \"llama3\""},
      {[](auto& c) { c["rope_scaling"]["factor"] = "8"; },
       "rope_scaling.factor: expected a number, got string \"8\""},
      {[](auto& c) { c["vocab_size"] = "96"; },
       "vocab_size: expected an integer, got string \"96\""},
      {[](auto& c) { c["hidden_size"] = 32.5; },
       "hidden_size: expected an integer, got number 32.5"},
      {[](auto& c) { c["num_key_value_heads"] = true; },
       "num_key_value_heads: expected an integer, got boolean true"},
      {[](auto& c) { c["head_dim"] = "8"; }, "head_dim: expected an integer, got string \"8\""},
      {[](auto& c) { c["rms_norm_eps"] = "1e-5"; },
       "rms_norm_eps: expected a number, got string \"1e-5\""},
      {[](auto& c) { c["rope_theta"] = false; },
       "rope_theta: expected a number, got boolean false"},
      {[](auto& c) { c["bos_token_id"] = "1"; },
       "bos_token_id: expected an integer or a list of integers, got string \"1\""},
      {[](auto& c) {
         c["eos_token_id"] = {2, "x"};
       },
       "eos_token_id[1]: expected an integer, got string \"x\""},
  });
}

// config.json's sizes become the model's ints: each is range-checked first (4294967298 layers
// loaded as 2, 2^31 heads became -2147483648).
TEST(SafetensorsLlamaTest, IntegerFieldsAreRangeCheckedBeforeNarrowing) {
  ExpectConfigErrors({
      {[](auto& c) { c["num_hidden_layers"] = 4294967298; },
       "num_hidden_layers: 4294967298 is out of range [1, 2147483647]"},
      {[](auto& c) { c["num_attention_heads"] = 2147483648; },
       "num_attention_heads: 2147483648 is out of range [1, 2147483647]"},
      {[](auto& c) { c["vocab_size"] = 18446744073709551615ull; },
       "vocab_size: 18446744073709551615 is out of range [1, 2147483647]"},
      {[](auto& c) { c["intermediate_size"] = -48; },
       "intermediate_size: -48 is out of range [1, 2147483647]"},
      {[](auto& c) { c["max_position_embeddings"] = 0; },
       "max_position_embeddings: 0 is out of range [1, 2147483647]"},
      {[](auto& c) { c["rope_scaling"]["original_max_position_embeddings"] = 4294967808; },
       "rope_scaling.original_max_position_embeddings: 4294967808 is out of range [1, "
       "2147483647]"},
      {[](auto& c) { c["head_dim"] = 4294967304; },
       "head_dim: 4294967304 is out of range [1, 2147483647]"},
  });
}

// Baton's RMSNorm keeps epsilon as an f32: a value that rounds to 0 there ("plan: norm eps 0")
// is refused as config.json gives it, saying why.
TEST(SafetensorsLlamaTest, ANormEpsilonAnF32CannotHoldIsRefusedAsGiven) {
  ExpectConfigErrors({
      {[](auto& c) { c["rms_norm_eps"] = 1e-300; },
       "rms_norm_eps: 1e-300 is below the smallest normal f32 (1.1754944e-38)"},
      {[](auto& c) { c["rms_norm_eps"] = 0; }, "rms_norm_eps: 0 is not in (0, 1)"},
      {[](auto& c) { c["rms_norm_eps"] = 1.5; }, "rms_norm_eps: 1.5 is not in (0, 1)"},
  });
  TempDir dir;
  CopyFixture(dir, [](auto& c) { c["rms_norm_eps"] = 1e-6; });
  EXPECT_EQ(DimsOfHfLlama(HfLlamaFolder::Open(dir.path()).config(), 12).norm_eps, 1e-6f);
}

// docs/safetensors.md: model_type llama, or (model_type absent or null) architectures holding
// LlamaForCausalLM. A folder of the second kind was not recognised as a Llama at all.
TEST(SafetensorsLlamaTest, ArchitecturesAloneNameALlamaAsDocumented) {
  for (const auto& edit : std::vector<std::function<void(nlohmann::json&)>>{
           [](auto& c) { c.erase("model_type"); }, [](auto& c) { c["model_type"] = nullptr; }}) {
    TempDir dir;
    CopyFixture(dir, edit);
    EXPECT_TRUE(IsHfLlamaFolder(dir.path()));
    EXPECT_EQ(HfLlamaFolder::Open(dir.path()).config().num_hidden_layers, 2);
  }
  TempDir neither;
  CopyFixture(neither, [](auto& c) {
    c.erase("model_type");
    c["architectures"] = {"GPT2LMHeadModel"};
  });
  EXPECT_FALSE(IsHfLlamaFolder(neither.path()));
  EXPECT_THAT(ErrorOf([&] { HfLlamaFolder::Open(neither.path()); }),
              HasSubstr("not a Hugging Face Llama"));
  TempDir other;  // an explicit other model_type wins over architectures
  CopyFixture(other, [](auto& c) { c["model_type"] = "gemma"; });
  EXPECT_TRUE(IsHfLlamaFolder(other.path()));
  EXPECT_THAT(ErrorOf([&] { HfLlamaFolder::Open(other.path()); }),
              HasSubstr("config.json: model_type: \"gemma\", not \"llama\", \"qwen2\" or "
                        "\"mistral\""));
}

// The Hugging Face cache's layout: snapshots/REV/ holds links to ../../blobs/HASH. Links are
// followed to regular files (docs/safetensors.md).
TEST(SafetensorsLlamaTest, ASnapshotOfLinksIntoTheHubCacheLoads) {
  TempDir dir;
  const fs::path blobs = fs::path(dir.path()) / "blobs";
  const fs::path snapshot = fs::path(dir.path()) / "snapshots" / "0123abcd";
  fs::create_directories(blobs);
  fs::create_directories(snapshot);
  int blob = 0;
  for (const auto& entry : fs::directory_iterator(kFixtureDir)) {
    const std::string name = fmt::format("blob{}", blob++);
    fs::copy_file(entry.path(), blobs / name);
    fs::create_symlink(fs::path("../../blobs") / name, snapshot / entry.path().filename());
  }
  ASSERT_TRUE(IsHfLlamaFolder(snapshot.string()));
  HfLlamaFolder folder = HfLlamaFolder::Open(snapshot.string());
  Fixture f;
  f.dims = DimsOfHfLlama(folder.config(), 12);
  f.graph = GptGraph(f.dims);
  ValidateHfLlamaFolder(folder, f.dims);
  Rank whole = f.MakeRank({{0, f.last_layer()}}, 0, 1);
  LoadLlamaParamsFromHf(folder, f.dims, whole.param_tensors(), *f.backend);
  EXPECT_EQ(folder.opened_files().size(), 3u);
}

TEST(SafetensorsLlamaTest, AConfigThatDisagreesWithTheWeightsNamesTheFileAndTheTensor) {
  TempDir dir;
  CopyFixture(dir, [](auto& c) { c["intermediate_size"] = 64; });
  HfLlamaFolder folder = HfLlamaFolder::Open(dir.path());
  Fixture f;
  f.dims = DimsOfHfLlama(folder.config(), 12);
  f.graph = GptGraph(f.dims);
  ValidateHfLlamaFolder(folder, f.dims);  // names only: the index cannot tell
  Rank whole = f.MakeRank({{0, f.last_layer()}}, 0, 1);
  EXPECT_THAT(
      ErrorOf([&] { LoadLlamaParamsFromHf(folder, f.dims, whole.param_tensors(), *f.backend); }),
      AllOf(HasSubstr("model-00001-of-00003.safetensors: tensor "
                      "model.layers.0.mlp.gate_proj.weight has shape (48, 32)"),
            HasSubstr("needs (64, 32)")));
  // And a model whose dims are not config.json's (e.g. a YAML that set its own).
  ModelDims other = f.dims;
  other.num_kv_heads = 4;
  EXPECT_THAT(ErrorOf([&] { ValidateHfLlamaFolder(folder, other); }),
              AllOf(HasSubstr("config.json: describes a Llama"), HasSubstr("kv heads 2"),
                    HasSubstr("kv heads 4")));
}

TEST(SafetensorsLlamaTest, RefusesBiasesMissingTensorsATruncatedShardAndNaN) {
  const auto edit_index = [](const TempDir& dir, const std::function<void(nlohmann::json&)>& edit) {
    const std::string path = dir / "model.safetensors.index.json";
    nlohmann::json index = nlohmann::json::parse(ReadFileToString(path));
    edit(index["weight_map"]);
    WriteFileAtomically(path, index.dump(2));
  };
  ModelDims dims;
  {
    const HfLlamaFolder probe = HfLlamaFolder::Open(kFixtureDir);
    dims = DimsOfHfLlama(probe.config(), 12);
  }
  {
    TempDir dir;
    CopyFixture(dir);
    edit_index(dir, [](auto& map) {
      map["model.layers.1.self_attn.q_proj.bias"] = "model-00002-of-00003.safetensors";
    });
    EXPECT_THAT(ErrorOf([&] { ValidateHfLlamaFolder(HfLlamaFolder::Open(dir.path()), dims); }),
                HasSubstr("tensor model.layers.1.self_attn.q_proj.bias is a bias; Baton's Llama "
                          "has no biases"));
  }
  {
    TempDir dir;
    CopyFixture(dir);
    edit_index(dir, [](auto& map) { map.erase("model.layers.1.mlp.up_proj.weight"); });
    EXPECT_THAT(ErrorOf([&] { ValidateHfLlamaFolder(HfLlamaFolder::Open(dir.path()), dims); }),
                HasSubstr("no tensor model.layers.1.mlp.up_proj.weight in the folder's "
                          "model.safetensors.index.json"));
  }
  Fixture f;
  f.dims = dims;
  f.graph = GptGraph(f.dims);
  {
    TempDir dir;
    CopyFixture(dir);
    const std::string shard = dir / "model-00003-of-00003.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    HfLlamaFolder folder = HfLlamaFolder::Open(dir.path());
    Rank last = f.MakeRank({{3, 3}}, 1, 2);
    EXPECT_THAT(
        ErrorOf([&] { LoadLlamaParamsFromHf(folder, f.dims, last.param_tensors(), *f.backend); }),
        AllOf(HasSubstr("model-00003-of-00003.safetensors"), HasSubstr("truncated")));
  }
  {
    TempDir dir;
    CopyFixture(dir);
    const std::string shard = dir / "model-00003-of-00003.safetensors";
    uint64_t header = 0;
    std::ifstream(shard, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    fs::permissions(shard, fs::perms::owner_write, fs::perm_options::add);
    std::fstream out(shard, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(8 + header + 4 * 7));  // lm_head, the shard's only tensor
    out.write(reinterpret_cast<const char*>(&nan), 4);
    out.close();
    HfLlamaFolder folder = HfLlamaFolder::Open(dir.path());
    Rank last = f.MakeRank({{3, 3}}, 1, 2);
    EXPECT_THAT(
        ErrorOf([&] { LoadLlamaParamsFromHf(folder, f.dims, last.param_tensors(), *f.backend); }),
        AllOf(HasSubstr("model-00003-of-00003.safetensors: tensor lm_head.weight holds 1 "
                        "non-finite value(s)")));
  }
}

}  // namespace
}  // namespace baton
