// Mixtures of experts in Hugging Face folders (checkpoint/safetensors_moe.h): Mixtral and
// Qwen2-MoE folders transformers wrote giving transformers' logits, and the export's names,
// layouts, config.json and refusals. (Their bit-for-bit round trip: LlamaRoundTripTest.)
#include "checkpoint/safetensors_moe.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/hf_test_util.h"
#include "core/error.h"
#include "core/files.h"

namespace baton {
namespace {

using checkpoint_test::AddExperts;
using checkpoint_test::ErrorAgainstTransformers;
using checkpoint_test::ErrorOf;
using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using checkpoint_test::TempDir;
using checkpoint_test::TinyLlamaDims;
using ::testing::HasSubstr;

// tests/fixtures/mixtral-hf and qwen2-moe-hf (make_moe_hf_fixtures.py: 4 experts, two per token,
// weights N(0, 0.3^2) so the router's choices are clear of ties; the Qwen2-MoE with q/k/v biases,
// raw top-k probabilities and a shared expert behind its sigmoid gate) with transformers' logits:
// Baton's experts give them within 1e-5, the independent check of the routing, the experts'
// w1/w3/w2 (gate/up/down) layout and the shared expert's gate.
TEST(SafetensorsMoeTest, TransformersMixtureOfExpertsFoldersGiveTransformersLogits) {
  for (const char* name : {"mixtral-hf", "qwen2-moe-hf"}) {
    const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/" + name;
    const nlohmann::json reference =
        nlohmann::json::parse(ReadFileToString(dir + "/reference.json"));
    const bool qwen = std::string(name) == "qwen2-moe-hf";
    const double error = ErrorAgainstTransformers(dir, reference, [&](const ModelDims& dims) {
      ASSERT_EQ(dims.moe.num_experts, 4);
      ASSERT_EQ(dims.moe.top_k, 2);
      ASSERT_TRUE(dims.moe_block(0) && dims.moe_block(1));
      ASSERT_EQ(dims.qwen2(), qwen);
      ASSERT_EQ(dims.moe.shared_experts, qwen ? 1 : 0);
      ASSERT_EQ(dims.moe.norm_topk_prob, !qwen);
    });
    EXPECT_LT(error, 1e-5) << name << ", transformers " << reference["transformers_version"];
    RecordProperty(std::string("normalised_error_") + name, fmt::format("{:.3g}", error));
  }
}

// tests/fixtures/qwen3-hf and qwen3-moe-hf (make_qwen3_hf_fixtures.py: head_dim 12 on hidden 32,
// q_norm / k_norm weights off 1; the MoE's 4 experts, two per token, renormalised, no shared
// expert): Baton's preset qwen3 gives transformers' logits within 1e-5, the independent check of
// the q/k norms' place (each head, before the rotation); the export writes every tensor back
// byte for byte with a config.json that reads back as the same model.
TEST(SafetensorsMoeTest, Qwen3AndQwen3MoeFoldersGiveTransformersLogitsAndExportBack) {
  for (const char* name : {"qwen3-hf", "qwen3-moe-hf"}) {
    const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/" + name;
    const nlohmann::json reference =
        nlohmann::json::parse(ReadFileToString(dir + "/reference.json"));
    const bool moe = std::string(name) == "qwen3-moe-hf";
    const double error = ErrorAgainstTransformers(dir, reference, [&](const ModelDims& dims) {
      ASSERT_TRUE(dims.qwen3());
      ASSERT_TRUE(dims.spec().qk_norm);
      ASSERT_EQ(dims.head_size, 12);
      ASSERT_EQ(dims.moe.num_experts, moe ? 4 : 0);
      if (moe) {
        ASSERT_EQ(dims.moe.shared_experts, 0);
        ASSERT_TRUE(dims.moe.norm_topk_prob);
      }
    });
    EXPECT_LT(error, 1e-5) << name << ", transformers " << reference["transformers_version"];
    RecordProperty(std::string("normalised_error_") + name, fmt::format("{:.3g}", error));

    TempDir out;
    const ModelDims dims = checkpoint_test::LoadAndExport(dir, 11, out / "hf");
    const nlohmann::json config = nlohmann::json::parse(ReadFileToString(out / "hf/config.json"));
    EXPECT_EQ(config["architectures"],
              nlohmann::json::array({moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}));
    EXPECT_EQ(DimsOfHfLlama(ReadHfLlamaConfig(out / "hf/config.json"), 11), dims) << name;
    HfLlamaFolder folder = HfLlamaFolder::Open(dir);
    const SafetensorsFile file = ReadSafetensors(out / "hf/model.safetensors");
    size_t compared = 0;
    for (const auto& [tensor, shard] : folder.weight_map()) {
      const SafetensorsFile* stored = folder.FileOf(tensor);
      ASSERT_NE(stored, nullptr) << tensor;
      ASSERT_TRUE(file.Has(tensor)) << name << ": the export has no " << tensor;
      const auto a = stored->Bytes(stored->Get(tensor));
      const auto b = file.Bytes(file.Get(tensor));
      EXPECT_TRUE(a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin()))
          << name << ": " << tensor;
      ++compared;
    }
    EXPECT_EQ(compared, file.entries().size()) << name;
  }
}

// model.init_from under expert parallelism (StateLayout::InitValues): a member's whole temporary
// of a stacked expert parameter, its split saying which experts it keeps, gets those experts'
// bits from the folder and nothing else read (the others stay zero), whether its experts are split
// over an expert group or folded over tensor ranks (a tensor cut of dimension 0); a stacked
// parameter cut along another dimension reads every expert.
TEST(SafetensorsMoeTest, AMemberOfAnExpertGroupReadsOnlyItsOwnExperts) {
  const std::string dir = std::string(BATON_SOURCE_DIR) + "/tests/fixtures/mixtral-hf";
  HfLlamaFolder folder = HfLlamaFolder::Open(dir);
  Fixture f;
  f.dims = DimsOfHfLlama(folder.config(), 8);
  f.graph = GptGraph(f.dims);
  Rank whole = f.MakeRank({{0, f.last_layer()}}, 0, 1);
  std::vector<ParamTensors> all = whole.param_tensors();
  LoadLlamaParamsFromHf(folder, f.dims, all, *f.backend);
  for (const char* name : {"h.1.mlp.experts.c_fc.weight", "h.1.mlp.experts.c_proj.weight"}) {
    const auto found =
        std::find_if(all.begin(), all.end(), [&](const ParamTensors& p) { return p.name == name; });
    ASSERT_NE(found, all.end()) << name;
    const Tensor& full = found->value;  // (4 experts, in, out)
    const int64_t per_expert = full.numel() / 4;
    for (const int member : {0, 1}) {
      for (const int cut : {0, 1, 2}) {  // over experts, folded, along another dimension
        const SplitOver over = cut == 0 ? SplitOver::kExperts : SplitOver::kTensor;
        ParamTensors part = *found;
        part.value = Tensor::Empty(f.backend->allocator(), full.shape(), DType::kF32,
                                   MemCategory::kWorkspace);
        part.master = Tensor();
        part.split = {cut == 2 ? 1 : 0, {cut == 2 ? full.size(1) : 4}, member, 2, over};
        HfLlamaFolder fresh = HfLlamaFolder::Open(dir);
        LoadLlamaParamsFromHf(fresh, f.dims, {part}, *f.backend);
        const float* got = part.value.data<float>();
        const float* want = full.data<float>();
        for (int64_t e = 0; e < 4; ++e) {
          const bool kept = cut == 2 || e / 2 == member;
          int64_t equal = 0, zero = 0;
          for (int64_t i = e * per_expert; i < (e + 1) * per_expert; ++i) {
            equal += std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
            zero += got[i] == 0.0f;
          }
          EXPECT_EQ(kept ? equal : zero, per_expert)
              << name << ", member " << member << ", expert " << e << ", cut " << cut;
        }
      }
    }
  }
}

// A Mixtral exports its experts under their Hugging Face names and layouts (expert e's w3 row j is
// column I + j of block e of Baton's stacked c_fc) and a config.json MixtralForCausalLM reads; a
// Qwen2-MoE's shared expert and gate likewise; experts neither format describes are refused.
TEST(SafetensorsMoeTest, ExpertsExportUnderMixtralsAndQwen2MoesNames) {
  Fixture f;
  f.dims = TinyLlamaDims(2, false);
  AddExperts(f.dims, /*shared=*/false);
  f.graph = GptGraph(f.dims);
  TempDir dir;
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  ExportHfLlama(dir / "mixtral", whole.param_tensors(), f.dims, *f.backend);
  const SafetensorsFile file = ReadSafetensors(dir / "mixtral/model.safetensors");
  EXPECT_EQ(file.Get("model.layers.1.block_sparse_moe.gate.weight").shape, (Shape{3, 16}));
  EXPECT_EQ(file.Get("model.layers.1.block_sparse_moe.experts.2.w1.weight").shape, (Shape{8, 16}));
  EXPECT_EQ(file.Get("model.layers.1.block_sparse_moe.experts.2.w2.weight").shape, (Shape{16, 8}));
  EXPECT_FALSE(file.Has("model.layers.1.mlp.gate_proj.weight"));
  const Param* c_fc = checkpoint_test::FindParam({&whole}, 2, "h.1.mlp.experts.c_fc.weight").second;
  ASSERT_NE(c_fc, nullptr);
  const float* w3 = reinterpret_cast<const float*>(
      file.Bytes(file.Get("model.layers.1.block_sparse_moe.experts.2.w3.weight")).data());
  EXPECT_EQ(w3[5 * 16 + 7], c_fc->value.data<float>()[2 * 16 * 16 + 7 * 16 + 8 + 5]);
  const nlohmann::json config =
      nlohmann::json::parse(ReadFileToString(dir / "mixtral/config.json"));
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"MixtralForCausalLM"}));
  EXPECT_EQ(config["num_local_experts"], 3);
  EXPECT_EQ(config["num_experts_per_tok"], 2);
  EXPECT_EQ(config["intermediate_size"], 8);
  EXPECT_FALSE(config.contains("attention_bias"));
  EXPECT_EQ(DimsOfHfLlama(ReadHfLlamaConfig(dir / "mixtral/config.json"), 5).moe.num_experts, 3);

  Fixture q;
  q.dims = TinyLlamaDims(2, true);
  q.dims.family = ModelFamily::kQwen2;
  AddExperts(q.dims, /*shared=*/true);
  q.graph = GptGraph(q.dims);
  Rank qwen = q.MakeRank({{0, 3}}, 0, 1);
  ExportHfLlama(dir / "qwen", qwen.param_tensors(), q.dims, *q.backend);
  const SafetensorsFile qfile = ReadSafetensors(dir / "qwen/model.safetensors");
  EXPECT_EQ(qfile.Get("model.layers.0.mlp.experts.1.up_proj.weight").shape, (Shape{8, 16}));
  EXPECT_EQ(qfile.Get("model.layers.0.mlp.shared_expert.down_proj.weight").shape, (Shape{16, 12}));
  EXPECT_EQ(qfile.Get("model.layers.0.mlp.shared_expert_gate.weight").shape, (Shape{1, 16}));
  const nlohmann::json qconfig = nlohmann::json::parse(ReadFileToString(dir / "qwen/config.json"));
  EXPECT_EQ(qconfig["architectures"], nlohmann::json::array({"Qwen2MoeForCausalLM"}));
  EXPECT_EQ(qconfig["moe_intermediate_size"], 8);
  EXPECT_EQ(qconfig["shared_expert_intermediate_size"], 12);
  EXPECT_EQ(qconfig["norm_topk_prob"], false);
  EXPECT_EQ(DimsOfHfLlama(ReadHfLlamaConfig(dir / "qwen/config.json"), 5), q.dims);

  ModelDims shared_mixtral = f.dims;
  shared_mixtral.moe.shared_experts = 1;
  shared_mixtral.moe.shared_hidden = 4;
  EXPECT_THAT(ErrorOf([&] { WriteHfLlamaConfig(dir / "bad", shared_mixtral, DType::kF32); }),
              HasSubstr("a Mixtral (MixtralForCausalLM) has experts in every layer, no shared"));
}

}  // namespace
}  // namespace baton
