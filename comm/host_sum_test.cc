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

// The 16-bit path (bulk conversions, blocks of 1024) gives the element-wise reference: each
// element's inputs widened to f32 one by one, summed left to right, rounded once.
TEST(HostSumTest, SixteenBitSumsEqualTheScalarReferenceBitForBit) {
  Rng rng(9);
  const int64_t n = 2500;
  for (const DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<std::vector<uint16_t>> data(3, std::vector<uint16_t>(static_cast<size_t>(n)));
    for (auto& v : data) {
      for (uint16_t& x : v) {
        const float value = static_cast<float>((rng.NextDouble() - 0.5) * (1 << rng.NextBelow(10)));
        x = dtype == DType::kF16 ? FloatToHalf(value) : FloatToBFloat16(value);
      }
    }
    const auto widen = [dtype](uint16_t x) {
      return dtype == DType::kF16 ? HalfToFloat(x) : BFloat16ToFloat(x);
    };
    std::vector<uint16_t> expected(static_cast<size_t>(n));
    for (size_t i = 0; i < expected.size(); ++i) {
      float acc = widen(data[0][i]);
      for (size_t k = 1; k < data.size(); ++k) acc += widen(data[k][i]);
      expected[i] = dtype == DType::kF16 ? FloatToHalf(acc) : FloatToBFloat16(acc);
    }
    std::vector<Tensor> tensors;
    for (auto& v : data) tensors.push_back(Tensor::Wrap(v.data(), {n}, dtype));
    SumInOrder(tensors);
    for (const auto& v : data) EXPECT_EQ(v, expected) << Name(dtype);
  }
}

// AddInto, the shared-memory pair's streamed sum, gives SumInOrder's bits for two inputs in the
// order it is told, in every dtype.
TEST(HostSumTest, AddIntoGivesSumInOrdersBitsForTwoInputsInEitherOrder) {
  Rng rng(5);
  const int64_t n = 777;
  for (const DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    for (const bool mine_first : {true, false}) {
      std::vector<float> a(n), b(n);
      for (int64_t i = 0; i < n; ++i) {
        a[i] = static_cast<float>((rng.NextDouble() - 0.5) * (1 << rng.NextBelow(12)));
        b[i] = static_cast<float>((rng.NextDouble() - 0.5) * (1 << rng.NextBelow(12)));
      }
      const int64_t bytes = n * static_cast<int64_t>(SizeOf(dtype));
      std::vector<char> mine(bytes), theirs(bytes), lo(bytes), hi(bytes);
      if (dtype == DType::kI32) {
        for (int64_t i = 0; i < n; ++i) {
          const int32_t x = static_cast<int32_t>(a[i] * 1000),
                        y = static_cast<int32_t>(b[i] * 1000);
          std::memcpy(mine.data() + 4 * i, &x, 4);
          std::memcpy(theirs.data() + 4 * i, &y, 4);
        }
      } else {
        ConvertFloats(a.data(), DType::kF32, mine.data(), dtype, n);
        ConvertFloats(b.data(), DType::kF32, theirs.data(), dtype, n);
      }
      // SumInOrder over (first, second) as the order says.
      lo = mine_first ? mine : theirs;
      hi = mine_first ? theirs : mine;
      SumInOrder({Tensor::Wrap(lo.data(), {n}, dtype), Tensor::Wrap(hi.data(), {n}, dtype)});
      AddInto(mine.data(), theirs.data(), dtype, n, mine_first);
      EXPECT_EQ(std::memcmp(mine.data(), lo.data(), static_cast<size_t>(bytes)), 0)
          << Name(dtype) << (mine_first ? ", mine first" : ", theirs first");
    }
  }
}

}  // namespace
}  // namespace baton
