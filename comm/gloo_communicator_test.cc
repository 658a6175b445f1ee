// GlooCommunicator specifics: rendezvous through a real coordinator, and what a failed collective
// leaves behind. The shared contract is checked in communicator_test.cc.
#include "comm/gloo_communicator.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/kv_store.h"
#include "coordinator/coordinator_kv_store.h"
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

// A rank's view of the store that holds back its read of one key until the test opens the gate.
class GatedStore final : public KvStore {
 public:
  GatedStore(KvStore& inner, std::string gated_key)
      : inner_(inner), gated_key_(std::move(gated_key)) {}
  void Open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void Set(const std::string& key, const std::string& value) override { inner_.Set(key, value); }
  std::string Get(const std::string& key, milliseconds timeout) override {
    WaitForGate(key);
    return inner_.Get(key, timeout);
  }
  void Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    for (const auto& key : keys) WaitForGate(key);
    inner_.Wait(keys, timeout);
  }

 private:
  void WaitForGate(const std::string& key) {
    if (key != gated_key_) return;
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }
  KvStore& inner_;
  const std::string gated_key_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Connects to the first address a rank published for its pairs (Gloo's key "<prefix>/<rank>",
// one sockaddr_storage-led address per other rank) and sends junk; returns the socket.
int StrayConnection(const std::string& published) {
  sockaddr_storage address{};
  EXPECT_GE(published.size(), sizeof(address));
  std::memcpy(&address, published.data(), sizeof(address));
  EXPECT_EQ(address.ss_family, AF_INET);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(sockaddr_in)), 0)
      << std::strerror(errno);
  const std::string junk = "GET / HTTP/1.1\r\nHost: stray\r\n\r\n" + std::string(100, 'x');
  EXPECT_EQ(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), static_cast<ssize_t>(junk.size()));
  return fd;  // left open: a stray that holds the connection is the worst case
}

// A local process that connects to a rank's Gloo port during the rendezvous takes the pair's
// listening socket (Gloo accepts the first connection); the displaced peer is refused. The
// round fails for both ranks together and the next one, on fresh ports, builds a mesh that
// works. The gates put the strays in the listening sockets' queues before either rank connects.
TEST(GlooCommunicatorTest, AStrayConnectionDuringTheRendezvousCostsARoundNotTheMesh) {
  MemoryKvStore store;
  GatedStore views[2] = {GatedStore(store, "gloo/1"), GatedStore(store, "gloo/0")};
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  std::unique_ptr<GlooCommunicator> comms[2];
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        GlooOptions options;
        options.rank = rank;
        options.size = 2;
        options.timeout = kGenerous;
        options.secret = "job-secret";
        comms[rank] = std::make_unique<GlooCommunicator>(views[rank], allocator, options);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  // Both ranks listen now (their addresses are published) and wait at the gates.
  const int strays[2] = {StrayConnection(store.Get("gloo/0", kGenerous)),
                         StrayConnection(store.Get("gloo/1", kGenerous))};
  views[0].Open();
  views[1].Open();
  for (auto& t : threads) t.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  // The first round failed (the strays hold the pair's listening sockets); the next worked.
  EXPECT_NE(store.Get("gloo/verdict/0", kGenerous), "ok");
  EXPECT_EQ(store.Get("gloo/round1/verdict/0", kGenerous), "ok");
  EXPECT_EQ(store.Get("gloo/round1/verdict/1", kGenerous), "ok");
  float values[2] = {1.0f, 2.0f};
  threads.clear();
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      Tensor t = Tensor::Wrap(&values[rank], {1}, DType::kF32);
      comms[rank]->AllReduceSum(t, kGenerous);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(values[0], 3.0f);
  EXPECT_EQ(values[1], 3.0f);
  for (int fd : strays) ::close(fd);
}

// The hello carries the job's secret: ranks of different jobs never form a mesh, and say why.
TEST(GlooCommunicatorTest, RanksWithDifferentSecretsRefuseTheMesh) {
  MemoryKvStore store;
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        GlooOptions options;
        options.rank = rank;
        options.size = 2;
        options.timeout = kGenerous;
        options.secret = rank == 0 ? "one job" : "another job";
        GlooCommunicator comm(store, allocator, options);
      } catch (const Error& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(errors[rank].find("failed 4 times"), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find("did not carry this job's hello"), std::string::npos)
        << errors[rank];
  }
}

// Two ranks over TCP (Gloo's own pairs; shared_memory_test.cc has the same-host links').
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
        options.shared_memory = false;
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
  try {
    comms_[0]->AllReduceSum(t, milliseconds(100));  // rank 1 never joins
    ADD_FAILURE() << "the all-reduce completed with one rank";
  } catch (const Error& e) {  // in the words of every other wait's timeout
    EXPECT_NE(std::string(e.what()).find("timed out after 0.1 s"), std::string::npos) << e.what();
  }
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

// A receive nobody sends to holds its tensor until its wait ends; Close ends it and returns only
// once the tensor is released, so its allocator may go (a worker's backend dies before the
// communicator its abort callback keeps).
TEST_F(GlooPairTest, CloseReleasesTheTensorsOfPendingOperations) {
  {
    Tensor t = Tensor::Empty(allocator_, {1024}, DType::kF32, MemCategory::kComm);
    std::unique_ptr<Work> work = comms_[0]->Irecv(t, 1);  // rank 1 never sends
    EXPECT_THROW(work->Wait(milliseconds(50)), Error);
  }
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 4096);  // the pending receive holds it
  comms_[0]->Close("the worker is leaving");
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 0);
  try {
    comms_[0]->Isend(Tensor::Wrap(nullptr, {0}, DType::kF32), 1);
  } catch (const Error& e) {
    ADD_FAILURE() << "an empty send needs no connection: " << e.what();
  }
  float value = 1;
  EXPECT_THROW(comms_[0]->Isend(Tensor::Wrap(&value, {1}, DType::kF32), 1), Error);
}

// An aborted receive is still posted in Gloo's pair: a message that comes after the abort is
// written into its buffer. So the receive keeps its tensor until Close closes the pairs, not
// only until its wait ends (before, the memory went back to the allocator and the late message
// landed in whatever was allocated there next).
TEST_F(GlooPairTest, AnAbortedReceiveKeepsItsTensorUntilCloseForTheMessageMayStillLand) {
  {
    Tensor t = Tensor::Empty(allocator_, {1024}, DType::kF32, MemCategory::kComm);
    std::unique_ptr<Work> work = comms_[0]->Irecv(t, 1);
    comms_[0]->Abort("the launcher stopped the job");
    try {
      work->Wait(kGenerous);
      ADD_FAILURE() << "an aborted receive completed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("aborted: the launcher stopped the job"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 4096);
  std::vector<float> late(1024, 7.0f);
  Tensor sent = Tensor::Wrap(late.data(), {1024}, DType::kF32);
  comms_[1]->Isend(sent, 0)->Wait(kGenerous);  // lands in the aborted receive's buffer
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 4096);
  comms_[0]->Close("the worker is leaving");
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 0);
}

}  // namespace
}  // namespace baton
