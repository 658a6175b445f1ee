#include "comm/host_staged_communicator.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/fake_communicator.h"

namespace baton {
namespace {

// With a CPU backend standing in for the device, staging must be invisible: the same messages
// in the same order, and sums that equal the inner communicator's.
TEST(HostStagedCommunicatorTest, CarriesMessagesInOrderAndSumsLikeTheInnerTransport) {
  FakeHub hub(2);
  std::vector<std::vector<float>> received(2);
  std::vector<float> sums(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      MemoryLedger ledger;
      auto backend = MakeCpuBackend(ledger, 1);
      HostStagedCommunicator comm(std::shared_ptr<Communicator>(hub.Make(r)), *backend,
                                  backend->allocator());
      const int peer = 1 - r;
      std::vector<std::unique_ptr<Work>> works;
      std::vector<Tensor> inbox;
      for (int k = 0; k < 3; ++k) {
        Tensor out =
            Tensor::Empty(backend->allocator(), {4}, DType::kF32, MemCategory::kActivations);
        for (int i = 0; i < 4; ++i) out.data<float>()[i] = static_cast<float>(10 * r + k);
        works.push_back(comm.Isend(out, peer));
        inbox.push_back(
            Tensor::Empty(backend->allocator(), {4}, DType::kF32, MemCategory::kActivations));
        works.push_back(comm.Irecv(inbox.back(), peer));
      }
      for (auto& w : works) w->Wait(std::chrono::seconds(10));
      for (const Tensor& t : inbox) received[static_cast<size_t>(r)].push_back(t.data<float>()[3]);
      Tensor x = Tensor::Empty(backend->allocator(), {1}, DType::kF32, MemCategory::kWorkspace);
      x.data<float>()[0] = 0.5f + static_cast<float>(r);
      comm.AllReduceSum(x, std::chrono::seconds(10));
      sums[static_cast<size_t>(r)] = x.data<float>()[0];
      works.clear();
      EXPECT_EQ(ledger.current(MemCategory::kComm), 0);  // staging buffers go with their Work
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(received[0], (std::vector<float>{10, 11, 12}));
  EXPECT_EQ(received[1], (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(sums[0], 2.0f);
  EXPECT_EQ(sums[1], 2.0f);
}

}  // namespace
}  // namespace baton
