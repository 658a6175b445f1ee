// safetensors format tests: the header as a standard reader sees it, bitwise round trips, and the
// reader's refusals, each naming the file and the tensor.
#include "checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "checkpoint/checkpoint_test_util.h"
#include "core/error.h"

namespace baton {
namespace {

using checkpoint_test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

struct HostTensors {
  MemoryLedger ledger;
  CpuAllocator allocator{ledger};
  Tensor Filled(Shape shape, DType dtype, uint64_t seed) {
    Tensor t = Tensor::Empty(allocator, shape, dtype, MemCategory::kParams);
    Rng rng(seed);
    auto* bytes = static_cast<unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng.NextU64());
    return t;
  }
};

void WriteRaw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}

// A "GPU" whose memory is host memory labelled cuda:0: checks that device tensors are staged
// through Backend::Copy and never read directly. Only Copy and Synchronize are used.
class HostAsDeviceBackend final : public Backend {
 public:
  int copies = 0;
  Device device() const override { return Device::Cuda(0); }
  Allocator& allocator() override { BATON_FAIL("unused"); }
  void Synchronize() override {}
  void Zero(Tensor&) override { BATON_FAIL("unused"); }
  void Copy(const Tensor& src, Tensor& dst) override {
    BATON_CHECK(src.dtype() == dst.dtype() && src.shape() == dst.shape(), "fake copy");
    BATON_CHECK(src.device().is_cpu() != dst.device().is_cpu(), "fake copy crosses devices");
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    ++copies;
  }
  void Matmul(const Tensor&, bool, const Tensor&, bool, Tensor&, bool, const Tensor*) override {
    BATON_FAIL("unused");
  }
  void BiasBackward(const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void EmbeddingForward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        Tensor&) override {
    BATON_FAIL("unused");
  }
  void EmbeddingBackward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void EmbeddingShardForward(const Tensor&, const Tensor&, int64_t, const Tensor&, const Tensor&,
                             Tensor&) override {
    BATON_FAIL("unused");
  }
  void EmbeddingShardBackward(const Tensor&, const Tensor&, int64_t, const Tensor&, Tensor&,
                              Tensor&) override {
    BATON_FAIL("unused");
  }
  void LayerNormForward(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                        Tensor&) override {
    BATON_FAIL("unused");
  }
  void LayerNormBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         Tensor&, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void DequantizeInt8(const Tensor&, const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void ApplyMask(Tensor&, const Tensor&) override { BATON_FAIL("unused"); }
  void GeluForward(const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void RmsNormForward(const Tensor&, const Tensor&, float, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void RmsNormBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                       Tensor&) override {
    BATON_FAIL("unused");
  }
  void SwiGluForward(const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void SwiGluBackward(const Tensor&, const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void MoeDispatch(const Tensor&, const Tensor&, const Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void MoeCombine(const Tensor&, const Tensor&, const Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void MoeCombineWeightsBackward(const Tensor&, const Tensor&, const Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void RotaryEmbedding(Tensor&, const Tensor&, int64_t, const AttentionHeads&, const RopeConfig&,
                       bool) override {
    BATON_FAIL("unused");
  }
  void RepeatKv(const Tensor&, const AttentionHeads&, Tensor&) override { BATON_FAIL("unused"); }
  void RepeatKvBackward(const Tensor&, const AttentionHeads&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void CopyColumns(const Tensor&, int64_t, Tensor&, int64_t, int64_t) override {
    BATON_FAIL("unused");
  }
  void GeluBackward(const Tensor&, const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void AttentionForward(const Tensor&, const Tensor&, int, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void AdamW8bit(Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&, const AdamWConfig&,
                 float) override {
    BATON_FAIL("unused");
  }
  void FlashAttentionForward(const Tensor&, const Tensor&, int, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void FlashAttentionBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, int, Tensor&) override {
    BATON_FAIL("unused");
  }
  void AttentionBackward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int,
                         Tensor&) override {
    BATON_FAIL("unused");
  }
  void CachedAttentionForward(const Tensor&, int, int64_t, Tensor&, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void CrossEntropyForward(const Tensor&, const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void CrossEntropyBackward(const Tensor&, const Tensor&, float, Tensor&) override {
    BATON_FAIL("unused");
  }
  void CrossEntropyShardStats(const Tensor&, const Tensor&, int64_t, Tensor&) override {
    BATON_FAIL("unused");
  }
  void CrossEntropyShardCombine(const Tensor&, const Tensor&, Tensor&, Tensor&) override {
    BATON_FAIL("unused");
  }
  void CrossEntropyShardBackward(const Tensor&, const Tensor&, int64_t, const Tensor&, float,
                                 Tensor&) override {
    BATON_FAIL("unused");
  }
  void Add(const Tensor&, const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void Accumulate(const Tensor&, Tensor&) override { BATON_FAIL("unused"); }
  void Scale(Tensor&, float) override { BATON_FAIL("unused"); }
  double SumOfSquares(const Tensor&) override { BATON_FAIL("unused"); }
  bool AllFinite(const Tensor&) override { BATON_FAIL("unused"); }
  void AdamW(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWConfig&, float) override {
    BATON_FAIL("unused");
  }
};

std::string ErrorOpening(const std::string& path) {
  try {
    SafetensorsFile::Open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SafetensorsTest, HeaderParsesAsStandardSafetensors) {
  HostTensors h;
  TempDir dir;
  const std::string path = dir / "a.safetensors";
  WriteSafetensors(path,
                   {{"w", h.Filled({3, 2}, DType::kF32, 1)}, {"b", h.Filled({3}, DType::kBF16, 2)}},
                   {{"format", "pt"}});
  const std::string file = ReadFileToString(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(file[i])) << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "data starts 8-aligned";
  const std::string header = file.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}')) << "padded with spaces only";
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"], nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(json["w"]["dtype"], "F32");
  EXPECT_EQ(json["w"]["shape"], nlohmann::json({3, 2}));
  EXPECT_EQ(json["w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(json["b"]["dtype"], "BF16");
  EXPECT_EQ(json["b"]["data_offsets"], nlohmann::json({24, 30}));
  EXPECT_EQ(file.size(), 8 + n + 30);
}

TEST(SafetensorsTest, RoundTripIsBitwiseForEveryDType) {
  HostTensors h;
  TempDir dir;
  const NamedTensors tensors = {{"f32", h.Filled({4, 3}, DType::kF32, 1)},
                                {"f16", h.Filled({5}, DType::kF16, 2)},
                                {"bf16", h.Filled({2, 3, 1}, DType::kBF16, 3)},
                                {"i32", h.Filled({7}, DType::kI32, 4)},
                                {"empty", h.Filled({0, 3}, DType::kF32, 5)}};
  const WrittenFile written = WriteSafetensors(dir / "t.safetensors", tensors, {{"k", "v"}});
  EXPECT_EQ(written.bytes, FileSize(written.path));
  EXPECT_EQ(written.checksum, FileChecksum(written.path));

  const SafetensorsFile file = ReadSafetensors(written.path);
  EXPECT_EQ(file.metadata(), (SafetensorsMetadata{{"k", "v"}}));
  ASSERT_EQ(file.entries().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const SafetensorsEntry& entry = file.Get(name);
    EXPECT_EQ(entry.shape, tensor.shape()) << name;
    EXPECT_EQ(entry.dtype, SafetensorsDType(tensor.dtype())) << name;
    const auto bytes = file.Bytes(entry);
    ASSERT_EQ(bytes.size(), tensor.nbytes()) << name;
    EXPECT_EQ(std::memcmp(bytes.data(), tensor.raw(), bytes.size()), 0) << name;
  }
}

TEST(SafetensorsTest, LaysOutLargestElementsFirstSoEveryTensorIsAligned) {
  HostTensors h;
  TempDir dir;
  WriteSafetensors(dir / "t.safetensors",
                   {{"a_half", h.Filled({3}, DType::kF16, 1)},
                    {"z_float", h.Filled({3}, DType::kF32, 2)},
                    {"b_float", h.Filled({1}, DType::kF32, 3)}},
                   {});
  const SafetensorsFile file = ReadSafetensors(dir / "t.safetensors");
  EXPECT_EQ(file.Get("b_float").begin, 0u);
  EXPECT_EQ(file.Get("z_float").begin, 4u);
  EXPECT_EQ(file.Get("a_half").begin, 16u);
}

TEST(SafetensorsTest, ReadsAFileWrittenByHandFromTheSpec) {
  TempDir dir;
  const std::string path = dir / "hand.safetensors";
  const float values[2] = {1.5f, -2.0f};
  // Keys in any order, metadata last, no padding: all legal.
  WriteRaw(path,
           R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"a":"b"}})",
           std::string(reinterpret_cast<const char*>(values), 8));
  MemoryLedger ledger;
  auto backend = MakeCpuBackend(ledger, 1);
  const SafetensorsFile file = ReadSafetensors(path);
  EXPECT_EQ(file.metadata().at("a"), "b");
  Tensor out = Tensor::Zeros(backend->allocator(), {2}, DType::kF32, MemCategory::kParams);
  file.CopyTo("x", out, *backend);
  EXPECT_EQ(out.data<float>()[0], 1.5f);
  EXPECT_EQ(out.data<float>()[1], -2.0f);
}

TEST(SafetensorsTest, CopyToConvertsDTypeAndCopesWithMisalignedData) {
  TempDir dir;
  const std::string path = dir / "odd.safetensors";
  const uint16_t half[1] = {FloatToHalf(0.5f)};
  const float value = 3.25f;
  std::string data(reinterpret_cast<const char*>(half), 2);
  data += std::string(reinterpret_cast<const char*>(&value), 4);  // an F32 at offset 2
  WriteRaw(path,
           R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
           R"("f":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
           data);
  MemoryLedger ledger;
  auto backend = MakeCpuBackend(ledger, 1);
  const SafetensorsFile file = ReadSafetensors(path);
  Tensor f = Tensor::Zeros(backend->allocator(), {1}, DType::kF32, MemCategory::kParams);
  Tensor b = Tensor::Zeros(backend->allocator(), {1}, DType::kBF16, MemCategory::kParams);
  file.CopyTo("f", f, *backend);
  file.CopyTo("h", b, *backend);
  EXPECT_EQ(f.data<float>()[0], 3.25f);
  EXPECT_EQ(BFloat16ToFloat(b.data<uint16_t>()[0]), 0.5f);
  Tensor wrong = Tensor::Zeros(backend->allocator(), {2}, DType::kF32, MemCategory::kParams);
  try {
    file.CopyTo("f", wrong, *backend);
    ADD_FAILURE() << "shape mismatch accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path + ": tensor f has shape (1) but (2) was expected"));
  }
}

TEST(SafetensorsTest, NonFiniteValuesAreRefusedNamingTheFileTheTensorAndTheIndex) {
  TempDir dir;
  const std::string path = dir / "nan.safetensors";
  const float values[3] = {1.0f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity()};
  const uint16_t half[2] = {FloatToHalf(0.5f), 0x7c00};  // 0.5, +Inf in f16
  std::string data(reinterpret_cast<const char*>(values), 12);
  data += std::string(reinterpret_cast<const char*>(half), 4);
  WriteRaw(path,
           R"({"f":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
           R"("h":{"dtype":"F16","shape":[2],"data_offsets":[12,16]}})",
           data);
  MemoryLedger ledger;
  auto backend = MakeCpuBackend(ledger, 1);
  const SafetensorsFile file = ReadSafetensors(path);
  Tensor f = Tensor::Zeros(backend->allocator(), {3}, DType::kF32, MemCategory::kParams);
  Tensor h = Tensor::Zeros(backend->allocator(), {2}, DType::kF32, MemCategory::kParams);
  for (const auto& [name, tensor, message] :
       {std::tuple{"f", &f,
                   "tensor f holds 2 non-finite value(s) (NaN or Inf; the first at flat "
                   "index 1)"},
        std::tuple{"h", &h,
                   "tensor h holds 1 non-finite value(s) (NaN or Inf; the first at flat "
                   "index 1)"}}) {
    try {
      file.CopyTo(name, *tensor, *backend);
      ADD_FAILURE() << name << ": non-finite values accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(path + ": " + message));
    }
  }
}

// Quantising a stored dense weight to INT8 (model.weights: int8, compress --int8) refuses a NaN
// or Inf too: it would have set its column's scale to Inf (or been skipped) silently.
TEST(SafetensorsTest, ADenseWeightQuantisedToInt8IsCheckedForNonFiniteValues) {
  TempDir dir;
  const std::string path = dir / "w.safetensors";
  const float values[4] = {1.0f, 2.0f, std::numeric_limits<float>::infinity(), 4.0f};
  WriteRaw(path, R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})",
           std::string(reinterpret_cast<const char*>(values), 16));
  MemoryLedger ledger;
  auto backend = MakeCpuBackend(ledger, 1);
  const SafetensorsFile file = ReadSafetensors(path);
  Tensor codes = Tensor::Zeros(backend->allocator(), {2, 2}, DType::kI8, MemCategory::kParams);
  Tensor scale = Tensor::Zeros(backend->allocator(), {2}, DType::kF32, MemCategory::kParams);
  try {
    CopyWeightTo(file, "w", codes, scale, *backend);
    ADD_FAILURE() << "an Inf was quantised";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path + ": tensor w holds 1 non-finite value(s)"));
  }
}

TEST(SafetensorsTest, DeviceTensorsAreStagedThroughTheBackendBothWays) {
  TempDir dir;
  HostAsDeviceBackend gpu;
  float on_device[3] = {1.0f, 2.0f, 3.0f};
  const Tensor t = Tensor::Wrap(on_device, {3}, DType::kF32, Device::Cuda(0));
  const std::string path = dir / "d.safetensors";
  try {
    WriteSafetensors(path, {{"w", t}}, {});
    ADD_FAILURE() << "read device memory without a backend";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor w is on"));
  }
  WriteSafetensors(path, {{"w", t}}, {}, &gpu);
  EXPECT_EQ(gpu.copies, 1);
  const SafetensorsFile file = ReadSafetensors(path);
  float back[3] = {};
  Tensor dst = Tensor::Wrap(back, {3}, DType::kF32, Device::Cuda(0));
  file.CopyTo("w", dst, gpu);
  EXPECT_EQ(gpu.copies, 2);
  EXPECT_EQ(std::memcmp(back, on_device, sizeof(back)), 0);
}

TEST(SafetensorsTest, EmptyFileListIsAValidFile) {
  TempDir dir;
  WriteSafetensors(dir / "e.safetensors", {}, {});
  EXPECT_TRUE(ReadSafetensors(dir / "e.safetensors").entries().empty());
}

TEST(SafetensorsTest, WriterRefusesDuplicateAndReservedNames) {
  HostTensors h;
  TempDir dir;
  const Tensor t = h.Filled({1}, DType::kF32, 1);
  EXPECT_THROW(WriteSafetensors(dir / "d.safetensors", {{"a", t}, {"a", t}}, {}), Error);
  EXPECT_THROW(WriteSafetensors(dir / "d.safetensors", {{"__metadata__", t}}, {}), Error);
  EXPECT_FALSE(FileExists(dir / "d.safetensors"));
}

struct BadFile {
  const char* case_name;
  std::string header;
  std::string data;
  const char* expected;
};

class SafetensorsRejectsTest : public ::testing::TestWithParam<BadFile> {};

TEST_P(SafetensorsRejectsTest, NamingTheFileAndTheProblem) {
  TempDir dir;
  const std::string path = dir / "bad.safetensors";
  WriteRaw(path, GetParam().header, GetParam().data);
  const std::string error = ErrorOpening(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr(GetParam().expected));
}

const std::string k8(8, 'x');
INSTANTIATE_TEST_SUITE_P(
    BadFiles, SafetensorsRejectsTest,
    ::testing::Values(
        BadFile{"Truncated", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", k8,
                "tensor w ends at byte 16 of the data but the file holds only 8"},
        BadFile{"NotJson", R"({"w":)", "", "not valid JSON"},
        BadFile{"NotAnObject", "[1]", "", "does not start with '{'"},
        BadFile{"UnknownDType", R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", k8,
                "tensor w: unknown dtype \"F33\""},
        BadFile{"SizeMismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", k8,
                "F32 (3) needs 12 bytes"},
        BadFile{"Overlap",
                R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                k8, "overlaps tensor a"},
        BadFile{"Gap", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", k8,
                "leaving a gap"},
        BadFile{"TrailingBytes", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", k8,
                "trailing bytes"},
        BadFile{"Duplicate",
                R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                k8, "tensor a appears twice"},
        BadFile{"MetadataNotString", R"({"__metadata__":{"n":1}})", "", "not a string"},
        BadFile{"NegativeShape", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", "",
                "non-negative"},
        BadFile{"BackwardsOffsets", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", "",
                "run backwards"}),
    [](const auto& info) { return std::string(info.param.case_name); });

TEST(SafetensorsTest, HeaderLengthPastTheEndIsRejected) {
  TempDir dir;
  const std::string path = dir / "short.safetensors";
  WriteRaw(path, R"({"a":{}})", "");
  std::filesystem::resize_file(path, 12);
  EXPECT_THAT(ErrorOpening(path),
              HasSubstr("the header length field exceeds the file size (12 bytes)"));
  std::filesystem::resize_file(path, 3);
  EXPECT_THAT(ErrorOpening(path), HasSubstr("too short"));
}

// Links are followed (the Hugging Face cache links snapshots/REV/*.safetensors to ../../blobs),
// to regular files only. A link to some other file fails the header checks, and no error quotes
// the file's bytes: /etc/passwd's first 8 bytes ("root:x:0") once came back as "header length
// 3475222254926655346".
TEST(SafetensorsTest, ALinkIsFollowedToARegularFileAndNoErrorQuotesItsBytes) {
  TempDir dir;
  const std::string text = dir / "passwd";
  WriteFileAtomically(text, "root:x:0:0:root:/root:/bin/bash\n");
  std::filesystem::create_symlink(text, dir / "text.safetensors");
  const std::string error = ErrorOpening(dir / "text.safetensors");
  EXPECT_THAT(error, HasSubstr(dir / "text.safetensors"));
  EXPECT_THAT(error, HasSubstr("the header length field exceeds the file size (32 bytes)"));
  EXPECT_THAT(error, Not(HasSubstr("3475222254926655346")));
  EXPECT_THAT(error, Not(HasSubstr("root")));

  // A header length that fits but a header that is not JSON: the place, not the bytes.
  WriteRaw(dir / "garbage.safetensors", "{root:x:0:0}", "");
  const std::string garbage = ErrorOpening(dir / "garbage.safetensors");
  EXPECT_THAT(garbage, HasSubstr("not valid JSON (syntax error at line 1, column 2)"));
  EXPECT_THAT(garbage, Not(HasSubstr("root")));

  HostTensors host;
  ExportSafetensors({{"w", host.Filled({2, 3}, DType::kF32, 1)}}, dir / "real.safetensors");
  std::filesystem::create_symlink("real.safetensors", dir / "link.safetensors");
  EXPECT_EQ(ReadSafetensors(dir / "link.safetensors").Get("w").shape, Shape({2, 3}));

  std::filesystem::create_symlink("/dev/zero", dir / "device.safetensors");
  EXPECT_THAT(ErrorOpening(dir / "device.safetensors"),
              HasSubstr("is a character device, not a regular file"));
  std::filesystem::create_symlink(dir.path(), dir / "folder.safetensors");
  EXPECT_THAT(ErrorOpening(dir / "folder.safetensors"), HasSubstr("is a folder, not a regular"));
}

}  // namespace
}  // namespace baton
