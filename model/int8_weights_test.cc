// INT8 weights: a layer made INT8 computes the dense layer's forward with the dequantised weights
// bit for bit, books a quarter of the matrices' bytes plus their scales, has no gradients, and
// refuses a backward.
#include "model/int8_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "kernels/quantize.h"
#include "model/graph.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 1234;

LayerSpec FirstOf(LayerKind kind, const ModelDims& dims) {
  for (const LayerSpec& spec : kind == LayerKind::kMlpBlock ? MlpGraph(dims) : GptGraph(dims)) {
    if (spec.kind == kind) return spec;
  }
  BATON_FAIL("no {} in the graph", Name(kind));
}

// What the dense weights become after an INT8 round trip, in the param's dtype.
void RoundTripInt8(Param& p) {
  const int64_t rows = p.value.size(0), cols = p.value.size(1);
  std::vector<float> w = ToFloatVector(p.value);
  std::vector<int8_t> q(w.size());
  std::vector<float> scale(static_cast<size_t>(cols));
  QuantizeColumnsInt8(w.data(), rows, cols, q.data(), scale.data());
  DequantizeColumnsInt8(q.data(), scale.data(), rows, cols, w.data());
  ConvertFloats(w.data(), DType::kF32, p.value.raw(), p.value.dtype(), w.size());
}

class Int8WeightsTest : public ::testing::TestWithParam<std::tuple<LayerKind, DType>> {};

TEST_P(Int8WeightsTest, ForwardIsTheDenseForwardOfTheDequantisedWeights) {
  const auto [kind, dtype] = GetParam();
  const ModelDims dims = {11, 5, 2, 2, 16};
  CpuFixture dense_fx, int8_fx;
  std::unique_ptr<Layer> dense =
      BuildLayer(FirstOf(kind, dims), dims, *dense_fx.backend, dtype, dtype, kSeed);
  std::unique_ptr<Layer> int8 =
      BuildLayer(FirstOf(kind, dims), dims, *int8_fx.backend, dtype, dtype, kSeed);
  const int64_t dense_bytes = int8_fx.ledger.current(MemCategory::kParams);
  // Non-trivial biases and norms, the same in both.
  Rng rng(5), same(5);
  model_test::RandomizeParams(*dense, rng, 0.3f);
  model_test::RandomizeParams(*int8, same, 0.3f);
  MakeInt8InferenceLayer(*int8_fx.backend, *int8);

  int64_t matrix_elements = 0, columns = 0, dense_matrix_bytes = 0;
  for (Param* p : dense->params()) {
    if (!TakesInt8Weights(*p)) continue;
    matrix_elements += p->value.numel();
    columns += p->value.size(1);
    dense_matrix_bytes += static_cast<int64_t>(p->value.nbytes());
    RoundTripInt8(*p);
  }
  ASSERT_GT(matrix_elements, 0);
  for (Param* p : int8->params()) {
    EXPECT_FALSE(p->grad.defined()) << p->name;
    EXPECT_EQ(p->value.dtype() == DType::kI8, TakesInt8Weights(*p)) << p->name;
    EXPECT_EQ(p->scale.defined(), TakesInt8Weights(*p)) << p->name;
  }
  EXPECT_EQ(int8_fx.ledger.current(MemCategory::kParams),
            dense_bytes - dense_matrix_bytes + matrix_elements + 4 * columns);
  EXPECT_EQ(int8_fx.ledger.current(MemCategory::kGrads), 0);

  Rng data(9);
  MicroBatch batch = model_test::RandomBatch(dense_fx.allocator(), 2, 5, dims.vocab_size, data);
  const Tensor x =
      model_test::RandomActivation(dense_fx.allocator(), {2, 5, dims.width}, dtype, data);
  Stash dense_stash, int8_stash;
  const Tensor y_dense = dense->Forward(x, batch, dense_stash);
  const Tensor y_int8 = int8->Forward(x, batch, int8_stash);
  EXPECT_EQ(Bits(y_int8), Bits(y_dense));
  try {
    int8->Backward(y_int8, batch, int8_stash, BackwardArgs{});
    FAIL() << "a backward through INT8 weights must throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("INT8 weights, which are for inference"));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Int8WeightsTest,
                         ::testing::Combine(::testing::Values(LayerKind::kBlock,
                                                              LayerKind::kMlpBlock),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

TEST(Int8WeightsTest, EmbeddingsAndNormsKeepTheirDtype) {
  const ModelDims dims = {11, 5, 2, 2, 16};
  CpuFixture fx;
  for (LayerKind kind : {LayerKind::kEmbedding, LayerKind::kHead}) {
    std::unique_ptr<Layer> layer =
        BuildLayer(FirstOf(kind, dims), dims, *fx.backend, DType::kF32, DType::kF32, kSeed);
    MakeInt8InferenceLayer(*fx.backend, *layer);
    for (Param* p : layer->params()) {
      EXPECT_EQ(p->value.dtype(), DType::kF32) << p->name;
      EXPECT_FALSE(p->grad.defined()) << p->name;
    }
  }
}

}  // namespace
}  // namespace baton
