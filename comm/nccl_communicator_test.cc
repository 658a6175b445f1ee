// NcclCommunicator on real GPUs. Labelled "gpu"; each test skips, saying why, where CUDA finds no
// (or too few) devices, so the file builds and runs everywhere the toolkit exists.
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <thread>

#include "comm/kv_store.h"
#include "core/error.h"

namespace baton {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kGenerous{60000};  // safety limit only

// cudaMalloc'd memory booked in a ledger: enough of an allocator for these tests.
class CudaTestAllocator final : public Allocator {
 public:
  CudaTestAllocator(MemoryLedger& ledger, int device) : Allocator(ledger), device_(device) {}
  Device device() const override { return Device::Cuda(device_); }
  void* Allocate(size_t bytes, MemCategory category) override {
    void* ptr = nullptr;
    cudaSetDevice(device_);
    BATON_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 1)) == cudaSuccess, "cudaMalloc failed");
    ledger().Book(category, static_cast<int64_t>(bytes));
    return ptr;
  }
  void Deallocate(void* ptr, size_t bytes, MemCategory category) override {
    cudaFree(ptr);
    ledger().Release(category, static_cast<int64_t>(bytes));
  }

 private:
  int device_;
};

// Empty when at least `needed` GPUs are usable, else why not.
std::string WhyNoGpus(int needed) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no usable GPU: ") + cudaGetErrorString(status);
  if (count < needed) return fmt::format("needs {} GPUs, found {}", needed, count);
  return "";
}

Tensor ToDevice(Allocator& allocator, const std::vector<float>& values) {
  Tensor t = Tensor::Empty(allocator, {static_cast<int64_t>(values.size())}, DType::kF32,
                           MemCategory::kActivations);
  BATON_CHECK(cudaMemcpy(t.raw(), values.data(), t.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess,
              "copy to device");
  return t;
}

std::vector<float> ToHost(const Tensor& t) {
  std::vector<float> values(t.numel());
  BATON_CHECK(cudaMemcpy(values.data(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess,
              "copy to host");
  return values;
}

TEST(NcclCommunicatorTest, OneRankAllReducesToItselfAndPassesTheBarrier) {
  if (std::string why = WhyNoGpus(1); !why.empty()) GTEST_SKIP() << why;
  MemoryKvStore store;
  MemoryLedger ledger;
  CudaTestAllocator allocator(ledger, 0);
  NcclCommunicator comm(store, allocator, NcclOptions{});
  Tensor t = ToDevice(allocator, {1, 2, 3});
  comm.AllReduceSum(t, kGenerous);
  EXPECT_EQ(ToHost(t), (std::vector<float>{1, 2, 3}));
  comm.Barrier(kGenerous);
  EXPECT_EQ(ledger.current(MemCategory::kComm), 4) << "the barrier's scratch float";
  EXPECT_NO_THROW(store.Get("nccl/world", milliseconds(0)));
}

TEST(NcclCommunicatorTest, TwoRanksExchangeInFifoOrderAndReduceIdentically) {
  if (std::string why = WhyNoGpus(2); !why.empty()) GTEST_SKIP() << why;
  MemoryKvStore store;
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> received(2), reduced(2);
  auto run = [&](int rank) {
    MemoryLedger ledger;
    CudaTestAllocator allocator(ledger, rank);
    NcclOptions options;
    options.rank = rank;
    options.size = 2;
    options.device = rank;
    options.peers = {1 - rank};
    NcclCommunicator comm(store, allocator, options);
    std::vector<Tensor> in;
    std::vector<std::unique_ptr<Work>> works;
    for (int k = 0; k < 3; ++k) {  // both directions at once, large enough to need the receiver
      in.push_back(ToDevice(allocator, std::vector<float>(1 << 22, 0.0f)));
      works.push_back(comm.Irecv(in.back(), 1 - rank));
      works.push_back(
          comm.Isend(ToDevice(allocator, std::vector<float>(1 << 22, 10.0f * rank + k)), 1 - rank));
    }
    for (auto& work : works) work->Wait(kGenerous);
    for (const Tensor& t : in) received[rank].push_back(ToHost(t)[12345]);
    Tensor sum = ToDevice(allocator, {rank + 0.1f, rank * 1e6f + 0.3f});
    comm.AllReduceSum(sum, {0, 1}, kGenerous);
    reduced[rank] = ToHost(sum);
  };
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        run(rank);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(received[0], (std::vector<float>{10, 11, 12}));
  EXPECT_EQ(received[1], (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(reduced[0], reduced[1]);
}

}  // namespace
}  // namespace baton
