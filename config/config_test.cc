// Tests for the typed config: schema, errors with file:line and dotted keys, overrides, dumps.
#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"

namespace baton {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The message of the baton::Error that parsing `yaml` (with `overrides`) throws.
std::string ParseError(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    ParseConfigString(yaml, "x.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

constexpr const char* kMinimal = "data:\n  path: corpus.txt\n";

std::string WithTrain(const std::string& train_body) {
  return std::string(kMinimal) + "train:\n" + train_body;
}

TEST(ConfigTest, MissingKeysTakeTheSchemaDefaults) {
  const Config config = ParseConfigString(kMinimal, "x.yaml");
  Config expected;
  expected.data.path = "corpus.txt";
  EXPECT_EQ(config, expected);
  EXPECT_EQ(config.train.steps, 100);
  EXPECT_EQ(config.parallel.schedule, ScheduleKind::k1F1B);
  EXPECT_EQ(config.parallel.partition, PartitionPolicy::kFlops);
  EXPECT_EQ(config.train.lr_schedule, LrSchedule::kCosine);
  EXPECT_EQ(config.precision.dtype, DType::kF32);
  EXPECT_EQ(config.output.dir, "out");
  EXPECT_EQ(config.data.tokenizer, "");  // byte-level
  EXPECT_EQ(config.model.attention, AttentionKind::kFlash);
  EXPECT_EQ(SequenceLength(config), 128);
  EXPECT_EQ(MicroBatchSize(config), 4);
}

TEST(ConfigTest, UnknownKeyNamesFileLineDottedKeyAndSuggestion) {
  const std::string error = ParseError(WithTrain("  steps: 5\n  stepz: 10\n"));
  EXPECT_EQ(error, "x.yaml:5: train.stepz: unknown key (did you mean steps?)");
}

TEST(ConfigTest, UnknownKeyFromAFileNamesThatFile) {
  const TempDir temp("baton-config-test");
  const std::filesystem::path path = temp / "unknown.yaml";
  std::ofstream(path) << "model:\n  widht: 64\ndata:\n  path: corpus.txt\n";
  try {
    LoadConfig(path.string(), {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              path.string() + ":2: model.widht: unknown key (did you mean width?)");
  }
}

TEST(ConfigTest, UnknownSectionIsAnError) {
  EXPECT_EQ(ParseError(std::string(kMinimal) + "trian:\n  steps: 5\n"),
            "x.yaml:3: trian: unknown section (did you mean train?); sections are model, data, "
            "train, parallel, optimizer, prune, precision, device, output");
}

TEST(ConfigTest, StringForIntegerIsAnError) {
  EXPECT_EQ(ParseError(WithTrain("  steps: abc\n")),
            "x.yaml:4: train.steps: expected an integer in [1, 1000000000], got 'abc'");
}

TEST(ConfigTest, NegativeStepsIsAnError) {
  EXPECT_EQ(ParseError(WithTrain("  steps: -5\n")),
            "x.yaml:4: train.steps: expected an integer in [1, 1000000000], got '-5'");
}

TEST(ConfigTest, FractionForIntegerIsAnError) {
  EXPECT_EQ(ParseError(WithTrain("  batch_size: 1.5\n")),
            "x.yaml:4: train.batch_size: expected an integer in [1, 1048576], got '1.5'");
}

TEST(ConfigTest, ListOrEmptyValueForNumberIsAnError) {
  EXPECT_THAT(ParseError(WithTrain("  lr: [1, 2]\n")),
              HasSubstr("train.lr: expected a positive number, got a list"));
  EXPECT_THAT(ParseError(WithTrain("  lr:\n")),
              HasSubstr("train.lr: expected a positive number, got nothing"));
}

TEST(ConfigTest, FloatsAcceptExponentsAndRejectOutOfRange) {
  const Config config = ParseConfigString(WithTrain("  lr: 3e-4\n  eps: 1.0e-6\n"), "x.yaml");
  EXPECT_DOUBLE_EQ(config.train.lr, 3e-4);
  EXPECT_DOUBLE_EQ(config.train.eps, 1e-6);
  EXPECT_EQ(ParseError(WithTrain("  beta2: 1.0\n")),
            "x.yaml:4: train.beta2: expected a number in [0, 1), got '1.0'");
  EXPECT_THAT(ParseError(WithTrain("  lr: .inf\n")), HasSubstr("train.lr: expected"));
}

TEST(ConfigTest, SizesBeyondTheirStatedRangeAreRefusedNotNarrowed) {
  // 4294967424 = 2^32 + 128: narrowed to 32 bits it would train a width-128 model.
  EXPECT_EQ(ParseError(kMinimal, {"model.width=4294967424"}),
            "--set model.width=4294967424: model.width: expected an integer in [1, 65536], got "
            "'4294967424'");
  EXPECT_THAT(ParseError(kMinimal, {"model.context=4294967296"}),
              HasSubstr("model.context: expected an integer in [1, 1048576]"));
  EXPECT_THAT(ParseError(kMinimal, {"model.num_layers=2147483647"}),
              HasSubstr("model.num_layers: expected an integer in [1, 4096]"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.stages=100000"}),
              HasSubstr("parallel.stages: expected an integer in [1, 4096]"));
  EXPECT_THAT(ParseError(kMinimal, {"train.micro_batches=99999999999"}),
              HasSubstr("train.micro_batches: expected an integer in [1, 65536]"));
  // 1e10 s is more milliseconds than the waits hold.
  EXPECT_THAT(ParseError(kMinimal, {"parallel.timeout_s=1e10"}),
              HasSubstr("parallel.timeout_s: expected a number in (0, 604800]"));
  // Epsilons the kernels keep as 32-bit floats: 1e-300 would be 0 there ("norm eps 0" at plan).
  EXPECT_THAT(ParseError(kMinimal, {"model.rms_norm_eps=1e-300"}),
              HasSubstr("model.rms_norm_eps: expected a number in [1.1754943508222875e-38, 1)"));
  EXPECT_THAT(ParseError(kMinimal, {"train.eps=1e-50"}),
              HasSubstr("train.eps: expected a number >= 1.1754943508222875e-38"));
  const Config at_limit = ParseConfigString(kMinimal, "x.yaml", {"parallel.timeout_s=604800"});
  EXPECT_EQ(at_limit.parallel.timeout_s, 604800.0);
}

TEST(ConfigTest, ASecondYamlDocumentIsAnErrorNotIgnored) {
  EXPECT_EQ(ParseError(std::string(kMinimal) + "---\ntrain:\n  steps: 5\n"),
            "x.yaml:4: a second YAML document; a config is one document");  // its first line
}

// yaml-cpp reads a document that starts with ',' as empty without consuming the ',': reading
// "all documents" of such a text never ended and took all memory. (Found by
// tests/config_fuzz_test.)
TEST(ConfigTest, ADocumentStartingWithACommaIsASyntaxErrorNotRunawayMemory) {
  EXPECT_EQ(ParseError(","), "x.yaml:1: YAML syntax error: unexpected ','");
  EXPECT_EQ(ParseError("# a config\n, model: 1\n"), "x.yaml:2: YAML syntax error: unexpected ','");
}

// Messages quote the config's bytes; they stay valid UTF-8 (they cross protobuf and JSON).
TEST(ConfigTest, ErrorsQuotingBytesThatAreNotUtf8AreValidUtf8) {
  EXPECT_EQ(ParseError(std::string(kMinimal) + "train:\n  st\xffps: 5\n"),
            "x.yaml:4: train.st\\xffps: unknown key (did you mean steps?)");
}

TEST(ConfigTest, UnknownEnumNameListsTheChoices) {
  EXPECT_EQ(ParseError(std::string(kMinimal) + "parallel:\n  schedule: 1f2b\n"),
            "x.yaml:4: parallel.schedule: expected one of gpipe, 1f1b, interleaved, zb-h1, zb-h2, "
            "zb-v, v-half, v-min, dualpipev, looped-bfs, interleaved-zb, got '1f2b'");
  EXPECT_THAT(ParseError(std::string(kMinimal) + "precision:\n  dtype: fp8\n"),
              HasSubstr("precision.dtype: expected one of fp32, bf16, fp16, got 'fp8'"));
  EXPECT_EQ(ParseError(std::string(kMinimal) + "model:\n  attention: sparse\n"),
            "x.yaml:4: model.attention: expected one of flash, materialized, got 'sparse'");
  EXPECT_EQ(ParseError(std::string(kMinimal) + "optimizer:\n  state: int4\n"),
            "x.yaml:4: optimizer.state: expected one of f32, int8, got 'int4'");
  EXPECT_EQ(ParseConfigString(std::string(kMinimal) + "optimizer:\n  state: int8\n", "x.yaml")
                .optimizer.state,
            OptimizerState::kInt8);
  EXPECT_EQ(
      ParseConfigString(std::string(kMinimal) + "model:\n  attention: materialized\n", "x.yaml")
          .model.attention,
      AttentionKind::kMaterialized);
}

TEST(ConfigTest, DuplicateKeyIsAnError) {
  EXPECT_EQ(ParseError(WithTrain("  steps: 5\n  steps: 6\n")),
            "x.yaml:5: train.steps: duplicate key (first set at x.yaml:4)");
}

TEST(ConfigTest, YamlSyntaxErrorReportsTheLine) {
  EXPECT_THAT(ParseError(std::string(kMinimal) + "train:\n  steps: [1, 2\n  lr: 3\n"),
              StartsWith("x.yaml:5: YAML syntax error"));
}

TEST(ConfigTest, MissingFileIsAClearError) {
  try {
    LoadConfig("/nonexistent/baton.yaml", {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/baton.yaml: cannot open: No such file or directory");
  }
}

TEST(ConfigTest, DataPathIsRequired) {
  EXPECT_THAT(ParseError("train:\n  steps: 5\n"), HasSubstr("x.yaml: data.path: required"));
}

TEST(ConfigTest, OverrideSetsNestedFieldsAndBeatsTheFile) {
  const Config config =
      ParseConfigString(WithTrain("  steps: 5\n"), "x.yaml",
                        {"train.steps=300", "parallel.checkpoint=every:2", "data.path=other.bin"});
  EXPECT_EQ(config.train.steps, 300);
  EXPECT_EQ(config.parallel.checkpoint, CheckpointPolicy::Every(2));
  EXPECT_EQ(config.data.path, "other.bin");
  EXPECT_EQ(ResolvedDataFormat(config.data), DataFormat::kBin);
}

TEST(ConfigTest, LaterOverrideBeatsEarlierOne) {
  const Config config = ParseConfigString(kMinimal, "x.yaml", {"train.steps=7", "train.steps=9"});
  EXPECT_EQ(config.train.steps, 9);
}

TEST(ConfigTest, OverrideOfUnknownKeyNamesTheSet) {
  EXPECT_EQ(ParseError(kMinimal, {"train.stepz=5"}),
            "--set train.stepz=5: train.stepz: unknown key (did you mean steps?)");
  EXPECT_THAT(ParseError(kMinimal, {"trainn.steps=5"}),
              StartsWith("--set trainn.steps=5: trainn: unknown section (did you mean train?)"));
}

TEST(ConfigTest, OverrideWithBadValueNamesTheSet) {
  EXPECT_EQ(
      ParseError(kMinimal, {"train.steps=abc"}),
      "--set train.steps=abc: train.steps: expected an integer in [1, 1000000000], got 'abc'");
}

TEST(ConfigTest, OverrideWithoutSectionOrValueIsAnError) {
  EXPECT_EQ(ParseError(kMinimal, {"steps=5"}), "--set steps=5: expected section.key=value");
  EXPECT_EQ(ParseError(kMinimal, {"train.steps"}), "--set train.steps: expected section.key=value");
  EXPECT_EQ(ParseError(kMinimal, {"train.=5"}), "--set train.=5: expected section.key=value");
  EXPECT_EQ(ParseError(kMinimal, {".steps=5"}), "--set .steps=5: expected section.key=value");
}

TEST(ConfigTest, OverrideCanSetAList) {
  const Config config = ParseConfigString(
      kMinimal, "x.yaml", {"model.preset=custom", "model.layers=[embedding, mlp_block, head]"});
  EXPECT_EQ(config.model.layers, (std::vector<LayerKind>{LayerKind::kEmbedding,
                                                         LayerKind::kMlpBlock, LayerKind::kHead}));
}

TEST(ConfigTest, CheckpointPoliciesParse) {
  EXPECT_EQ(ParseCheckpointPolicy("none"), CheckpointPolicy::None());
  EXPECT_EQ(ParseCheckpointPolicy("every:3"), CheckpointPolicy::Every(3));
  EXPECT_EQ(ParseCheckpointPolicy("selective"), CheckpointPolicy::Selective());
  EXPECT_EQ(CheckpointPolicy::Every(3).ToString(), "every:3");
}

TEST(ConfigTest, BadCheckpointPoliciesAreErrors) {
  for (const char* bad : {"every:0", "every:x", "every:-1", "every:2x", "sometimes"}) {
    EXPECT_EQ(ParseError(std::string(kMinimal) + "parallel:\n  checkpoint: " + bad + "\n"),
              std::string("x.yaml:4: parallel.checkpoint: expected none, every:K with K >= 1, or "
                          "selective, got '") +
                  bad + "'");
  }
}

TEST(ConfigTest, CustomPresetRequiresLayers) {
  EXPECT_THAT(ParseError(std::string(kMinimal) + "model:\n  preset: custom\n"),
              HasSubstr("x.yaml:4: model.preset: preset custom needs a layers list"));
}

TEST(ConfigTest, CustomGraphStartsWithEmbeddingAndEndsWithHead) {
  EXPECT_THAT(
      ParseError(std::string(kMinimal) + "model:\n  preset: custom\n  layers: [block, head]\n"),
      HasSubstr("x.yaml:5: model.layers: a custom graph starts with embedding"));
  EXPECT_EQ(ParseError(std::string(kMinimal) +
                       "model:\n  preset: custom\n  layers:\n    - embedding\n    - blok\n"),
            "x.yaml:7: model.layers[1]: expected one of embedding, block, mlp_block, head, got "
            "'blok'");
}

TEST(ConfigTest, LayersListOnlyWithCustomPreset) {
  EXPECT_THAT(ParseError(std::string(kMinimal) + "model:\n  layers: [embedding, head]\n"),
              HasSubstr("x.yaml:4: model.layers: a layers list is only for preset custom"));
}

TEST(ConfigTest, NumLayersIsAnErrorWithCustomPreset) {
  EXPECT_THAT(ParseError(std::string(kMinimal) +
                         "model:\n  preset: custom\n  num_layers: 3\n  layers: [embedding, "
                         "head]\n"),
              HasSubstr("x.yaml:5: model.num_layers: not used with preset custom"));
}

TEST(ConfigTest, BatchSizeMustDivideIntoMicroBatches) {
  EXPECT_EQ(ParseError(WithTrain("  batch_size: 10\n")),
            "x.yaml:4: train.batch_size: train.batch_size 10 is not divisible by "
            "train.micro_batches 4");
  // Reported where it was set: here only micro_batches was.
  EXPECT_THAT(ParseError(kMinimal, {"train.micro_batches=5"}),
              StartsWith("--set train.micro_batches=5: train.micro_batches: train.batch_size 16"));
}

TEST(ConfigTest, CrossFieldRulesAreChecked) {
  EXPECT_THAT(ParseError(kMinimal, {"model.width=100", "model.num_heads=3"}),
              HasSubstr("model.width 100 is not divisible by model.num_heads 3"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.chunks=2"}),
              HasSubstr("parallel.chunks 2 > 1 needs parallel.schedule interleaved"));
  // A schedule of several chunks runs 2 when parallel.chunks is left out, as a V schedule does.
  for (const char* name : {"interleaved", "interleaved-zb", "looped-bfs", "zb-v"}) {
    const Config config =
        ParseConfigString(kMinimal, "x.yaml", {std::string("parallel.schedule=") + name});
    EXPECT_EQ(ScheduleChunks(config.parallel), 2) << name;
    EXPECT_EQ(ScheduleChunks(
                  ParseConfigString(kMinimal, "x.yaml",
                                    {std::string("parallel.schedule=") + name, "parallel.chunks=2"})
                      .parallel),
              2)
        << name;
  }
  EXPECT_EQ(
      ScheduleChunks(ParseConfigString(kMinimal, "x.yaml",
                                       {"parallel.schedule=interleaved-zb", "parallel.chunks=3"})
                         .parallel),
      3);
  EXPECT_EQ(ScheduleChunks(ParseConfigString(kMinimal, "x.yaml", {}).parallel), 1);
  EXPECT_THAT(ParseError(kMinimal, {"parallel.schedule=zb-v", "parallel.chunks=3"}),
              HasSubstr("parallel.schedule zb-v places 2 model chunks per stage in a V"));
  for (const char* chunks : {"parallel.chunks=1", "parallel.chunks=2"}) {
    EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml", {"parallel.schedule=dualpipev", chunks}))
        << chunks;
  }
  EXPECT_THAT(ParseError(kMinimal, {"parallel.replicas=3", "train.micro_batches=4"}),
              HasSubstr("train.micro_batches 4 is not divisible by parallel.replicas 3"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.replicas=2", "model.weights=int8"}),
              HasSubstr("data-parallel replicas train"));
  EXPECT_NO_THROW(
      ParseConfigString(kMinimal, "x.yaml", {"parallel.replicas=2", "train.micro_batches=4"}));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.zero=1"}), HasSubstr("needs parallel.replicas >= 2"));
  EXPECT_NO_THROW(ParseConfigString(
      kMinimal, "x.yaml",
      {"parallel.zero=1", "parallel.replicas=2", "train.micro_batches=4", "optimizer.state=int8"}));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.zero=2"}),
              HasSubstr("parallel.zero 2 shards the optimizer state"));
  EXPECT_NO_THROW(ParseConfigString(
      kMinimal, "x.yaml", {"parallel.zero=2", "parallel.replicas=2", "train.micro_batches=4"}));
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml",
                                    {"parallel.zero=3", "parallel.replicas=2",
                                     "parallel.zero3_keep=step", "train.micro_batches=4"}));
  EXPECT_NO_THROW(ParseConfigString(
      kMinimal, "x.yaml",
      {"parallel.zero=2", "parallel.replicas=2", "train.micro_batches=4", "prune.at_step=1"}));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.zero=4", "parallel.replicas=2"}),
              HasSubstr("parallel.zero"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.zero=2", "parallel.replicas=2",
                                    "train.micro_batches=4", "parallel.zero3_keep=step"}),
              HasSubstr("parallel.zero3_keep step keeps ZeRO-3's gathered layers"));
  // Tensor ranks split heads and hidden units; the error names the key and the numbers.
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml", {"parallel.tensor=2"}));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.tensor=3"}),
              HasSubstr("parallel.tensor 3 splits each stage's attention heads: it must divide "
                        "model.num_heads"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.tensor=2", "model.low_rank.mlp=8"}),
              HasSubstr("does not combine with model.low_rank"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.tensor=2", "optimizer.state=int8"}),
              HasSubstr("optimizer.state int8's blocks are not cut"));
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml",
                                    {"parallel.tensor=2", "model.init_from=gpt2.safetensors"}));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.tensor=0"}), HasSubstr("parallel.tensor"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.sequence_parallel=true"}),
              HasSubstr("it needs parallel.tensor >= 2"));
  EXPECT_THAT(ParseError(kMinimal, {"parallel.sequence_parallel=true", "parallel.tensor=2",
                                    "data.seq_len=63"}),
              HasSubstr("each sequence of 63 positions into parallel.tensor 2 equal parts"));
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml",
                                    {"parallel.sequence_parallel=true", "parallel.tensor=2"}));
  EXPECT_THAT(ParseError(kMinimal, {"data.seq_len=129"}),
              HasSubstr("data.seq_len 129 exceeds model.context 128"));
  EXPECT_THAT(ParseError(kMinimal, {"model.vocab_size=100"}),
              HasSubstr("byte-level text data needs model.vocab_size >= 256"));
  EXPECT_THAT(ParseError(kMinimal, {"data.format=text", "data.path=ids.bin"}),
              HasSubstr("data.path ids.bin is a token file (.bin) but data.format is text"));
  EXPECT_THAT(ParseError(kMinimal, {"data.format=text", "data.eval_path=held/out.bin"}),
              HasSubstr("data.eval_path held/out.bin is a token file (.bin)"));
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml", {"data.format=bin", "data.path=ids.bin"}));
  EXPECT_THAT(ParseError(kMinimal, {"train.min_lr=0.1"}),
              HasSubstr("train.min_lr 0.1 exceeds train.lr 0.001"));
  EXPECT_THAT(ParseError(kMinimal, {"prune.at_step=101"}),
              HasSubstr("prune.at_step 101 is after the last step (train.steps 100)"));
  EXPECT_THAT(
      ParseError(kMinimal, {"prune.at_step=5", "prune.sparsity=0.3", "prune.pattern=2:4"}),
      HasSubstr("prune.pattern 2:4 keeps 2 of every 4 weights: prune.sparsity must be 0.5"));
  EXPECT_THAT(ParseError(kMinimal, {"prune.at_step=5", "prune.pattern=2:4", "model.width=130",
                                    "model.num_heads=2"}),
              HasSubstr("model.width 130 is not divisible by 4"));
  EXPECT_THAT(ParseError(kMinimal, {"prune.at_step=5", "model.weights=int8"}),
              HasSubstr("pruning trains: it needs model.weights: dense"));
  const Config pruned = ParseConfigString(
      std::string(kMinimal) + "prune:\n  at_step: 5\n  pattern: \"2:4\"\n", "x.yaml");
  EXPECT_EQ(pruned.prune.pattern, PrunePattern::k2of4);
  EXPECT_EQ(pruned.prune.sparsity, 0.5);
  EXPECT_EQ(ParseConfigString(ToYaml(pruned), "dump.yaml"), pruned);
}

TEST(ConfigTest, ShareAndLowRankAreNestedGroupsOfModel) {
  const Config c = ParseConfigString(std::string(kMinimal) +
                                         "model:\n"
                                         "  num_layers: 8\n"
                                         "  share:\n"
                                         "    group: 4\n"
                                         "    what: mlp\n"
                                         "  low_rank: {attn: 16, mlp: 32}\n",
                                     "x.yaml");
  EXPECT_EQ(c.model.share_group, 4);
  EXPECT_EQ(c.model.share_what, ShareWhat::kMlp);
  EXPECT_EQ(c.model.low_rank_attn, 16);
  EXPECT_EQ(c.model.low_rank_mlp, 32);
  // --set reaches them with the dotted key; the dump reads back to an equal config.
  const Config set = ParseConfigString(kMinimal, "x.yaml", {"model.share.group=2"});
  EXPECT_EQ(set.model.share_group, 2);
  EXPECT_EQ(ParseConfigString(ToYaml(c), "dump.yaml"), c);
  EXPECT_EQ(ToJson(c)["model"]["share.what"], "mlp");
  // A misspelt nested key is named with its file, line and full key.
  EXPECT_THAT(ParseError(std::string(kMinimal) + "model:\n  share:\n    gruop: 2\n"),
              AllOf(HasSubstr("x.yaml:5: model.share.gruop: unknown key"),
                    HasSubstr("did you mean share.group?")));
  EXPECT_THAT(ParseError(std::string(kMinimal) + "model:\n  share: 2\n"),
              HasSubstr("model.share: unknown key"));
}

TEST(ConfigTest, ShareAndLowRankRulesAreChecked) {
  EXPECT_THAT(ParseError(kMinimal, {"model.share.group=5"}),
              HasSubstr("model.share.group 5 exceeds model.num_layers 4"));
  EXPECT_THAT(ParseError(kMinimal,
                         {"model.share.group=2", "model.preset=mlp", "model.share.what=attention"}),
              HasSubstr("model.share.what attention needs attention: preset mlp has none"));
  EXPECT_THAT(ParseError(kMinimal, {"model.low_rank.mlp=129"}),
              HasSubstr("model.low_rank.mlp 129 exceeds model.width 128"));
  EXPECT_THAT(ParseError(kMinimal, {"model.low_rank.attn=8", "model.preset=mlp"}),
              HasSubstr("model.low_rank.attn needs attention blocks"));
  EXPECT_THAT(ParseError(kMinimal, {"model.share.group=2", "model.weights=int8"}),
              HasSubstr("does not combine with model.share or model.low_rank"));
  EXPECT_THAT(ParseError(kMinimal, {"model.low_rank.mlp=8", "prune.at_step=5"}),
              HasSubstr("does not combine with model.share or model.low_rank"));
  EXPECT_THAT(ParseError(kMinimal, {"model.share.group=2", "model.preset=custom",
                                    "model.layers=[embedding, block, block, head]"}),
              HasSubstr("model.share needs preset gpt, mlp or llama"));
}

TEST(ConfigTest, LlamaKeysAreReadAndTheirRulesChecked) {
  const Config config =
      ParseConfigString(std::string(kMinimal) +
                            "model:\n  preset: llama\n  num_kv_heads: 2\n  vocab_size: 128256\n"
                            "  rope_theta: 500000\n  rope_scaling: {factor: 32}\n",
                        "x.yaml");
  EXPECT_EQ(config.model.preset, ModelPreset::kLlama);
  EXPECT_EQ(config.model.num_kv_heads, 2);
  EXPECT_EQ(config.model.vocab_size, 128256);
  EXPECT_EQ(config.model.rope_theta, 500000.0);
  EXPECT_EQ(config.model.rope_scaling_factor, 32.0);
  EXPECT_EQ(config.model.tie_embeddings, TieEmbeddings::kAuto);
  EXPECT_THAT(
      ParseError(kMinimal, {"model.num_kv_heads=2"}),
      HasSubstr(
          "model.num_kv_heads is for preset llama, qwen2, mistral or qwen3; preset gpt has none"));
  EXPECT_THAT(ParseError(kMinimal, {"model.intermediate_size=64", "model.preset=mlp"}),
              HasSubstr("model.intermediate_size is for preset llama"));
  EXPECT_THAT(ParseError(kMinimal, {"model.preset=llama", "model.sliding_window=4"}),
              HasSubstr("model.sliding_window is for preset mistral"));
  EXPECT_THAT(ParseError(kMinimal, {"model.preset=llama", "model.num_kv_heads=3"}),
              HasSubstr("model.num_kv_heads 3 does not divide model.num_heads 4"));
  EXPECT_THAT(ParseError(kMinimal, {"model.preset=llama", "model.width=12"}),
              HasSubstr("the head size 3 (model.width / model.num_heads) must be even"));
  // A head size apart from the width (Qwen3's head_dim): then the width need not divide, the
  // head size must be even, and GPT-2 has none.
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml",
                              {"model.preset=llama", "model.width=36", "model.head_dim=16"})
                .model.head_dim,
            16);
  EXPECT_THAT(ParseError(kMinimal, {"model.preset=llama", "model.head_dim=15"}),
              HasSubstr("model.head_dim 15 must be even"));
  EXPECT_THAT(ParseError(kMinimal, {"model.head_dim=16"}),
              HasSubstr("model.head_dim is for preset llama, qwen2, mistral or qwen3"));
  EXPECT_THAT(ParseError(kMinimal, {"model.preset=llama", "model.rope_scaling.factor=8",
                                    "model.rope_scaling.high_freq_factor=1"}),
              HasSubstr("high_freq_factor > low_freq_factor"));
  EXPECT_THAT(ParseError(kMinimal, {"model.tie_embeddings=maybe"}), HasSubstr("tie_embeddings"));
}

// model.moe: nested keys as written in YAML, and every combination the experts cannot take refused
// naming the keys.
TEST(ConfigTest, ExpertsAreReadAndImpossibleCombinationsRefused) {
  const std::string yaml = std::string(kMinimal) +
                           "model:\n  preset: llama\n  moe:\n    num_experts: 8\n    top_k: 2\n"
                           "    router: topk_softmax\n    capacity_factor: 1.25\n";
  const Config config = ParseConfigString(yaml, "x.yaml");
  EXPECT_EQ(config.model.moe.num_experts, 8);
  EXPECT_EQ(config.model.moe.top_k, 2);
  EXPECT_EQ(config.model.moe.router, MoeRouter::kTopkSoftmax);
  EXPECT_EQ(config.model.moe.capacity_factor, 1.25);
  const std::vector<std::string> llama = {"model.preset=llama", "model.moe.num_experts=4"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), llama.begin(), llama.end());
    return ParseError(kMinimal, more);
  };
  EXPECT_THAT(
      ParseError(kMinimal, {"model.moe.num_experts=4"}),
      HasSubstr("model.moe is for preset llama, qwen2, mistral or qwen3; preset gpt has none"));
  EXPECT_THAT(with({"model.moe.top_k=5"}),
              HasSubstr("model.moe.top_k 5 exceeds model.moe.num_experts 4"));
  EXPECT_THAT(with({"model.moe.first_dense_layers=4"}),
              HasSubstr("leaves no block of model.num_layers 4 for experts"));
  EXPECT_THAT(with({"model.moe.router=topk_softmax", "model.moe.norm_topk_prob=false"}),
              HasSubstr("model.moe.norm_topk_prob is softmax_topk's and sigmoid_bias's choice"));
  EXPECT_THAT(with({"model.moe.router=sigmoid_bias", "model.moe.aux_loss_coef=0.01"}),
              HasSubstr("model.moe.aux_loss_coef must be 0 with it"));
  EXPECT_THAT(with({"model.moe.bias_update_rate=-1"}), HasSubstr("model.moe.bias_update_rate"));
  const Config sigmoid = ParseConfigString(
      kMinimal, "x.yaml",
      {"model.preset=llama", "model.moe.num_experts=4", "model.moe.router=sigmoid_bias",
       "model.moe.norm_topk_prob=false", "model.moe.bias_update_rate=0.002"});
  EXPECT_EQ(sigmoid.model.moe.router, MoeRouter::kSigmoidBias);
  EXPECT_EQ(sigmoid.model.moe.bias_update_rate, 0.002);
  EXPECT_THAT(with({"model.share.group=2"}), HasSubstr("set model.share.what to attention"));
  EXPECT_THAT(with({"prune.at_step=1", "prune.sparsity=0.5"}),
              HasSubstr("a model with model.moe cannot be pruned"));
  EXPECT_THAT(with({"model.moe.shared_expert_gate=true"}),
              HasSubstr("it needs model.moe.shared_experts > 0"));
  EXPECT_THAT(with({"model.low_rank.mlp=4"}), HasSubstr("model.low_rank.mlp must be 0"));
  // Tensor ranks fold whole experts: they divide the experts and the shared experts' width, and
  // with an expert group too, T E divides the experts.
  std::vector<std::string> folded = llama;
  folded.push_back("parallel.tensor=2");
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", folded).parallel.tensor, 2);
  EXPECT_THAT(with({"model.moe.num_experts=6", "parallel.tensor=4"}),
              HasSubstr("it must divide model.moe.num_experts 6"));
  EXPECT_THAT(with({"model.moe.shared_experts=1", "model.moe.shared_expert_intermediate_size=6",
                    "parallel.tensor=4"}),
              HasSubstr("splits the shared experts' hidden units: it must divide their 6"));
  std::vector<std::string> both = folded;
  for (const char* set : {"parallel.replicas=2", "train.micro_batches=2", "parallel.experts=2"}) {
    both.push_back(set);
  }
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", both).parallel.experts, 2);
  EXPECT_THAT(with({"model.moe.num_experts=6", "parallel.tensor=2", "parallel.replicas=2",
                    "train.micro_batches=2", "parallel.experts=2"}),
              HasSubstr("parallel.tensor 2 x parallel.experts 2 split each MoE layer's experts: "
                        "their product must divide model.moe.num_experts 6"));
  EXPECT_THAT(with({"model.moe.router=sinkhorn"}), HasSubstr("model.moe.router"));
  // Expert parallelism: its groups inside the replicas, the experts split evenly, and what does
  // not combine with it yet.
  const std::vector<std::string> two = {"parallel.replicas=2", "train.micro_batches=2",
                                        "parallel.experts=2"};
  const auto with_two = [&](std::vector<std::string> more) {
    more.insert(more.begin(), two.begin(), two.end());
    return with(more);
  };
  std::vector<std::string> ok = llama;
  ok.insert(ok.end(), two.begin(), two.end());
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", ok).parallel.experts, 2);
  EXPECT_THAT(
      ParseError(kMinimal, {"parallel.replicas=2", "train.micro_batches=2", "parallel.experts=2"}),
      HasSubstr("parallel.experts 2 splits each MoE layer's experts: it needs "
                "model.moe.num_experts divisible by it, not 0"));
  EXPECT_THAT(with_two({"parallel.experts=3"}),
              HasSubstr("model.moe.num_experts divisible by it, not 4"));
  EXPECT_THAT(with({"parallel.experts=2"}),
              HasSubstr("parallel.replicas 1 must be a multiple of it"));
  std::vector<std::string> zero_one = ok;
  zero_one.push_back("parallel.zero=1");
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", zero_one).parallel.zero, 1);
  zero_one.back() = "parallel.zero=3";
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", zero_one).parallel.zero, 3);
  // 8-bit state: a member's 2 experts of 128 x the width are whole blocks of 256; of 40 x 10
  // (model.width 40), 800 elements: not.
  std::vector<std::string> eight_bit = ok;
  eight_bit.push_back("optimizer.state=int8");
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", eight_bit).optimizer.state,
            OptimizerState::kInt8);
  EXPECT_THAT(
      with_two({"optimizer.state=int8", "model.width=40", "model.moe.expert_intermediate_size=10"}),
      HasSubstr("optimizer.state int8 with parallel.experts 2 needs each member's part of "
                "an expert matrix in whole blocks of 256: 2 experts of 40 x 10 are 800 "
                "elements"));
  eight_bit.push_back("parallel.zero=1");
  EXPECT_EQ(ParseConfigString(kMinimal, "x.yaml", eight_bit).parallel.zero, 1);
  std::vector<std::string> from = ok;
  from.push_back("model.init_from=/tmp");
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml", from));
  EXPECT_THAT(with({"parallel.experts=0"}), HasSubstr("parallel.experts"));
}

TEST(ConfigTest, TokenizerMustLoadAndFitTheModelVocabulary) {
  const std::string fixture = BATON_SOURCE_DIR "/tests/fixtures/bpe/tokenizer.json";  // 640 ids
  const std::string yaml = std::string(kMinimal) + "  tokenizer: " + fixture + "\n";
  EXPECT_EQ(ParseConfigString(yaml, "x.yaml", {"model.vocab_size=640"}).data.tokenizer, fixture);
  EXPECT_EQ(ParseError(yaml, {"model.vocab_size=639"}),
            "x.yaml:3: data.tokenizer: the tokenizer " + fixture +
                " has 640 tokens, more than model.vocab_size 639");
  EXPECT_THAT(ParseError(kMinimal, {"data.tokenizer=/no/such/tokenizer.json"}),
              AllOf(StartsWith("--set data.tokenizer=/no/such/tokenizer.json: data.tokenizer: "),
                    HasSubstr("/no/such/tokenizer.json: no such file")));
  // Validate() reads no files: a config built in code is checked when it is parsed.
  Config config;
  config.data.path = "corpus.txt";
  config.data.tokenizer = "/no/such/tokenizer.json";
  EXPECT_NO_THROW(Validate(config));
}

TEST(ConfigTest, InterleavedWithChunksAndScheduleFilesWithChunksAreFine) {
  const Config interleaved =
      ParseConfigString(kMinimal, "x.yaml", {"parallel.schedule=interleaved", "parallel.chunks=2"});
  EXPECT_EQ(interleaved.parallel.chunks, 2);
  const Config from_file =
      ParseConfigString(kMinimal, "x.yaml", {"parallel.schedule_file=my.csv", "parallel.chunks=3"});
  EXPECT_EQ(from_file.parallel.schedule_file, "my.csv");
}

TEST(ConfigTest, ValidateCatchesConfigsChangedInCode) {
  Config config = ParseConfigString(kMinimal, "x.yaml");
  EXPECT_NO_THROW(Validate(config));
  config.train.micro_batches = 3;
  EXPECT_THROW(Validate(config), Error);
  config.train.micro_batches = 4;
  config.precision.dtype = DType::kI32;
  EXPECT_THROW(Validate(config), Error);
  config.precision.dtype = DType::kBF16;
  config.parallel.checkpoint = CheckpointPolicy::Every(0);
  EXPECT_THROW(Validate(config), Error);
}

Config UnusualConfig() {
  Config config;
  config.model.preset = ModelPreset::kCustom;
  config.model.layers = {LayerKind::kEmbedding, LayerKind::kBlock, LayerKind::kMlpBlock,
                         LayerKind::kHead};
  config.model.init_from = "weights/gpt2 \"small\".safetensors";
  config.data.path = "a folder/with: colon";
  config.data.format = DataFormat::kText;
  config.data.tokenizer = BATON_SOURCE_DIR "/tests/fixtures/bpe/tokenizer.json";
  config.model.vocab_size = 640;
  config.train.lr = 3e-4;
  config.train.eps = 1e-8;
  config.train.min_lr = 1.0 / 3.0 * 1e-4;
  config.train.seed = 42;
  config.train.lr_schedule = LrSchedule::kWsd;
  config.train.decay_steps = 30;
  config.parallel.schedule = ScheduleKind::kInterleaved;
  config.parallel.chunks = 2;
  config.parallel.checkpoint = CheckpointPolicy::Selective();
  config.precision.dtype = DType::kF16;
  config.device.type = DeviceType::kCuda;
  config.output.report = "";
  return config;
}

// WSD decays over train.decay_steps, which must fit after the warmup; the other schedules decay
// over every step after it and take no decay_steps.
TEST(ConfigTest, DecayStepsAreWsdsAndFitAfterTheWarmup) {
  const Config wsd = ParseConfigString(
      kMinimal, "x.yaml", {"train.lr_schedule=wsd", "train.decay_steps=20", "train.steps=50"});
  EXPECT_EQ(wsd.train.lr_schedule, LrSchedule::kWsd);
  EXPECT_EQ(wsd.train.decay_steps, 20);
  EXPECT_NO_THROW(ParseConfigString(kMinimal, "x.yaml", {"train.lr_schedule=linear"}));
  EXPECT_THAT(ParseError(kMinimal, {"train.lr_schedule=wsd"}),
              HasSubstr("train.lr_schedule wsd decays over train.decay_steps, which must be 1 to "
                        "train.steps - train.warmup_steps = 100, got 0"));
  EXPECT_THAT(ParseError(kMinimal, {"train.lr_schedule=wsd", "train.decay_steps=41",
                                    "train.steps=50", "train.warmup_steps=10"}),
              HasSubstr("= 40, got 41"));
  EXPECT_THAT(ParseError(kMinimal, {"train.decay_steps=10"}),
              HasSubstr("train.decay_steps is the wsd schedule's; train.lr_schedule is cosine"));
}

TEST(ConfigTest, ToYamlRoundTripsToAnEqualConfig) {
  const Config config = UnusualConfig();
  Validate(config);
  const std::string yaml = ToYaml(config);
  EXPECT_EQ(ParseConfigString(yaml, "dump.yaml"), config) << yaml;
  EXPECT_EQ(ToYaml(ParseConfigString(yaml, "dump.yaml")), yaml);
}

TEST(ConfigTest, ToJsonUsesTheYamlNames) {
  const nlohmann::json json = ToJson(UnusualConfig());
  EXPECT_EQ(json["model"]["preset"], "custom");
  EXPECT_EQ(json["model"]["layers"], nlohmann::json({"embedding", "block", "mlp_block", "head"}));
  EXPECT_EQ(json["parallel"]["schedule"], "interleaved");
  EXPECT_EQ(json["parallel"]["checkpoint"], "selective");
  EXPECT_EQ(json["precision"]["dtype"], "fp16");
  EXPECT_EQ(json["device"]["type"], "cuda");
  EXPECT_EQ(json["train"]["seed"], 42);
  EXPECT_DOUBLE_EQ(json["train"]["lr"].get<double>(), 3e-4);
}

std::vector<std::filesystem::path> ShippedConfigs() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(BATON_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path());
  }
  return paths;
}

TEST(ConfigTest, EveryShippedConfigParsesAndRoundTrips) {
  const auto paths = ShippedConfigs();
  EXPECT_GE(paths.size(), 4u);
  for (const auto& path : paths) {
    SCOPED_TRACE(path.string());
    const Config config = LoadConfig(path.string(), {});
    EXPECT_EQ(ParseConfigString(ToYaml(config), "dump.yaml"), config);
  }
}

TEST(ConfigTest, GptTinyIsTheDemoShape) {
  const Config config = LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt-tiny.yaml", {});
  EXPECT_EQ(config.model.preset, ModelPreset::kGpt);
  EXPECT_EQ(config.model.vocab_size, 256);
  EXPECT_EQ(config.model.context, 128);
  EXPECT_EQ(config.model.num_layers, 4);
  EXPECT_EQ(config.model.num_heads, 4);
  EXPECT_EQ(config.model.width, 128);
  EXPECT_EQ(config.train.batch_size, 16);
  EXPECT_EQ(config.train.micro_batches, 4);
  EXPECT_EQ(config.train.warmup_steps, 20);
  EXPECT_EQ(config.train.steps, 300);
  EXPECT_DOUBLE_EQ(config.train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(config.train.min_lr, 1e-4);
  EXPECT_EQ(config.data.path, "/usr/share/common-licenses");
  EXPECT_EQ(config.output.dir, "out/gpt-tiny");
}

TEST(ConfigTest, Gpt2ConfigIsTheGpt2SmallShape) {
  const Config config = LoadConfig(std::string(BATON_SOURCE_DIR) + "/configs/gpt2-124m.yaml", {});
  EXPECT_EQ(config.model.vocab_size, 50257);
  EXPECT_EQ(config.model.context, 1024);
  EXPECT_EQ(config.model.num_layers, 12);
  EXPECT_EQ(config.model.num_heads, 12);
  EXPECT_EQ(config.model.width, 768);
  EXPECT_EQ(config.device.type, DeviceType::kCuda);
  EXPECT_EQ(config.precision.dtype, DType::kBF16);
  EXPECT_EQ(MicroBatchSize(config), 4);
}

TEST(ConfigTest, PackingWithoutASeparatorIsRefusedNamingTheKey) {
  EXPECT_EQ(ParseError("data:\n  path: corpus.txt\n  packing: true\n"),
            "x.yaml:3: data.packing: data.packing needs data.document_separator: the token id "
            "that ends each document (GPT-2's <|endoftext|> is 50256)");
  const Config config = ParseConfigString(
      "data:\n  path: corpus.txt\n  packing: true\n  document_separator: 10\n", "x.yaml");
  EXPECT_TRUE(config.data.packing);
  EXPECT_EQ(config.data.document_separator, 10);
  EXPECT_THAT(ParseError(std::string(kMinimal) + "  document_separator: 300\n"),
              HasSubstr("data.document_separator: data.document_separator 300 is not below "
                        "model.vocab_size"));
}

}  // namespace
}  // namespace baton
