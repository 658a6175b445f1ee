// GlooCommunicator specifics: rendezvous through a real coordinator, and what a failed collective
// leaves behind. The shared contract is checked in communicator_test.cc.
#include "comm/gloo_communicator.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/kv_store.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "core/error.h"

namespace baton {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kGenerous{20000};  // safety limit only

TEST(GlooCommunicatorTest, RendezvousThroughTheCoordinatorKeyValueStore) {
  constexpr int kRanks = 3;
  CoordinatorServer server;
  CoordinatorOptions options;
  options.token = MakeJobToken();
  options.job_id = "gloo-test";
  options.world_size = kRanks;
  server.Start(options);
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  std::vector<float> results(kRanks);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        CoordinatorClient client(server.address(), options.token);
        client.Join(JoinInfo{rank, kRanks, "localhost", rank, "cpu", "gloo-test"});
        CoordinatorKvStore store(client);
        GlooOptions gloo;
        gloo.rank = rank;
        gloo.size = kRanks;
        gloo.store_prefix = "attempt0/gloo";
        gloo.timeout = kGenerous;
        GlooCommunicator comm(store, allocator, gloo);
        float value = rank + 1.0f;
        Tensor t = Tensor::Wrap(&value, {1}, DType::kF32);
        comm.AllReduceSum(t, kGenerous);
        results[rank] = value;
        comm.Barrier(kGenerous);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(results[rank], 6.0f) << "rank " << rank;
  }
}

TEST(GlooCommunicatorTest, RendezvousTimeoutNamesTheMissingKey) {
  MemoryKvStore store;
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  GlooOptions options;
  options.rank = 0;
  options.size = 2;  // rank 1 never comes
  options.timeout = milliseconds(200);
  try {
    GlooCommunicator comm(store, allocator, options);
    FAIL() << "connected to a rank that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gloo/1"), std::string::npos) << e.what();
  }
}

class GlooPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        GlooOptions options;
        options.rank = rank;
        options.size = 2;
        options.timeout = kGenerous;
        comms_[rank] = std::make_unique<GlooCommunicator>(store_, allocator_, options);
      });
    }
    for (auto& t : threads) t.join();
  }

  MemoryKvStore store_;
  MemoryLedger ledger_;
  CpuAllocator allocator_{ledger_};
  std::unique_ptr<GlooCommunicator> comms_[2];
};

TEST_F(GlooPairTest, CollectiveTimeoutLeavesTheCommunicatorUnusable) {
  float value = 1;
  Tensor t = Tensor::Wrap(&value, {1}, DType::kF32);
  EXPECT_THROW(comms_[0]->AllReduceSum(t, milliseconds(100)), Error);  // rank 1 never joins
  try {
    comms_[0]->Isend(t, 1);
    FAIL() << "a broken communicator accepted a send";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unusable since an earlier failure"), std::string::npos)
        << e.what();
  }
}

// Gloo offers no way to interrupt its collectives: an abort during one surfaces when the
// collective's own timeout expires, with the abort as the reason. (An abort that lands before
// the collective starts fails it at once, with the same reason; the timeout only has to outlast
// the aborter thread's start, on a loaded machine too.)
TEST_F(GlooPairTest, AbortDuringACollectiveIsTheReasonItFails) {
  float value = 1;
  Tensor t = Tensor::Wrap(&value, {1}, DType::kF32);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    comms_[0]->Abort("the launcher stopped the job");
  });
  try {
    comms_[0]->AllReduceSum(t, milliseconds(3000));  // rank 1 never joins
    ADD_FAILURE() << "the all-reduce completed with one rank";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aborted: the launcher stopped the job"),
              std::string::npos)
        << e.what();
  }
  aborter.join();
}

}  // namespace
}  // namespace baton
