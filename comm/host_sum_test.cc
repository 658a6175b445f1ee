// SumInOrder (comm/host_sum.h): the rank-order sums behind every CPU communicator's reductions.
// The f32 path sums blocks in a local buffer; it must give, bit for bit, the left-to-right sum
// of each element, whatever the length against the block and the number of inputs.
#include "comm/host_sum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/random.h"

namespace baton {
namespace {

TEST(HostSumTest, F32SumsEachElementLeftToRightBitForBitIntoEveryInput) {
  Rng rng(3);
  for (const int64_t n : {int64_t{1}, int64_t{1023}, int64_t{1024}, int64_t{2500}}) {
    for (const int inputs : {2, 3, 5}) {
      // Values over many magnitudes, so that another order would round differently.
      std::vector<std::vector<float>> data(static_cast<size_t>(inputs));
      for (auto& v : data) {
        v.resize(static_cast<size_t>(n));
        for (float& x : v) {
          x = static_cast<float>((rng.NextDouble() - 0.5) *
                                 static_cast<double>(1 << rng.NextBelow(20)));
        }
      }
      std::vector<float> expected(static_cast<size_t>(n));
      for (size_t i = 0; i < expected.size(); ++i) {
        float acc = data[0][i];
        for (int k = 1; k < inputs; ++k) acc += data[static_cast<size_t>(k)][i];
        expected[i] = acc;
      }
      std::vector<Tensor> tensors;
      for (auto& v : data) tensors.push_back(Tensor::Wrap(v.data(), {n}, DType::kF32));
      SumInOrder(tensors);
      for (const auto& v : data) {
        EXPECT_EQ(std::memcmp(v.data(), expected.data(), expected.size() * sizeof(float)), 0)
            << "n " << n << ", " << inputs << " inputs";
      }
    }
  }
}

}  // namespace
}  // namespace baton
