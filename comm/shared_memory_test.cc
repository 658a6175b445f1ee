// The same-host shared-memory links of GlooCommunicator (comm/shared_memory.h): messages larger
// than a ring, both channels at once, the segment's name gone once every peer mapped it, stale
// segments removed, a closed peer and a mismatched message named, hosts apart left to TCP.
// (communicator_test.cc runs the whole Communicator contract over these links as "shm".)
#include "comm/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/group.h"
#include "comm/kv_store.h"
#include "core/error.h"

namespace baton {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kGenerous{20000};  // safety limit only

// The names under /dev/shm that start with `prefix` (a SharedMemoryPrefixOf).
std::vector<std::string> SegmentsStartingWith(const std::string& prefix) {
  const std::string dir = "/dev/shm/";
  const std::string start = prefix.substr(dir.size());
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind(start, 0) == 0) names.push_back(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

class SharedMemoryTest : public ::testing::Test {
 protected:
  void Connect(int n, const std::vector<std::string>& hosts = {}) {
    comms_.resize(n);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(n);
    for (int rank = 0; rank < n; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          GlooOptions options;
          options.rank = rank;
          options.size = n;
          options.timeout = kGenerous;
          if (!hosts.empty()) options.hostname = hosts[rank];
          comms_[rank] = std::make_unique<GlooCommunicator>(store_, allocator_, options);
        } catch (const std::exception& e) {
          errors[rank] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int rank = 0; rank < n; ++rank) ASSERT_EQ(errors[rank], "") << "rank " << rank;
  }

  Tensor Bytes(int64_t n, int seed) {
    Tensor t = Tensor::Empty(allocator_, {n}, DType::kI32, MemCategory::kActivations);
    for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(i * 31 + seed);
    return t;
  }

  MemoryKvStore store_;
  MemoryLedger ledger_;
  CpuAllocator allocator_{ledger_};
  std::vector<std::unique_ptr<GlooCommunicator>> comms_;
};

// Messages of 1 element to several rings' worth (the ring holds 1 MiB), posted all at once in
// both directions, on the user channel and (through a subgroup all-reduce) the collectives' one
// at the same time: every byte arrives, in FIFO order per direction.
TEST_F(SharedMemoryTest, MessagesOfAnySizeArriveWholeAndInOrderBothWays) {
  Connect(2);
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 2 * SharedMemorySegmentBytes(1));
  const std::vector<int64_t> sizes = {1, 3, 4096, (int64_t{5} << 20) / 4 + 7, 262144, 17};
  std::vector<Tensor> sent[2], got[2];
  std::vector<std::unique_ptr<Work>> works;
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      sent[rank].push_back(Bytes(sizes[i], rank * 100 + static_cast<int>(i)));
      got[rank].push_back(Bytes(sizes[i], -1));
    }
  }
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      works.push_back(comms_[rank]->Irecv(got[rank][i], 1 - rank));
    }
  }
  std::thread reduce([&] {
    Tensor t = Bytes(int64_t{3} << 20, 1);
    Group group(*comms_[1], {0, 1});
    group.AllReduceSum(t, kGenerous);
    EXPECT_EQ(t.data<int32_t>()[12345], 2 * (12345 * 31 + 1) + 1);
  });
  {
    Tensor t = Bytes(int64_t{3} << 20, 2);
    for (int rank = 0; rank < 2; ++rank) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        works.push_back(comms_[rank]->Isend(sent[rank][i], 1 - rank));
      }
    }
    Group group(*comms_[0], {0, 1});
    group.AllReduceSum(t, kGenerous);
    EXPECT_EQ(t.data<int32_t>()[12345], 2 * (12345 * 31 + 1) + 1);
  }
  reduce.join();
  for (auto& work : works) work->Wait(kGenerous);
  for (int rank = 0; rank < 2; ++rank) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Tensor& expected = sent[1 - rank][i];
      EXPECT_EQ(std::memcmp(got[rank][i].raw(), expected.raw(), expected.nbytes()), 0)
          << "rank " << rank << ", message " << i;
    }
  }
}

// Once every rank of the host has mapped the segments, no name is left under /dev/shm: a killed
// job leaves nothing behind. Closing releases the booking.
TEST_F(SharedMemoryTest, SegmentsHaveNoNameOnceConnectedAndTheirBookingEndsWithTheLinks) {
  Connect(3);
  EXPECT_TRUE(SegmentsStartingWith(SharedMemoryPrefixOf(::getpid())).empty());
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 3 * SharedMemorySegmentBytes(2));
  comms_[2]->Close("leaving");
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 2 * SharedMemorySegmentBytes(2));
  comms_.clear();
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 0);
}

// A segment left by a process that died between creating and unlinking it is removed by the
// next rank to start on the host (its name holds the dead pid), and RemoveSharedMemoryOf removes
// a given process's. A live process's segment stays.
TEST_F(SharedMemoryTest, StaleSegmentsOfDeadProcessesAreRemovedNeverRead) {
  const pid_t child = ::fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // its pid is now nobody's
  const std::string dead = fmt::format("/baton.{}.0.00000000deadbeef", child);
  const std::string alive = fmt::format("/baton.{}.9.00000000cafef00d", ::getpid());
  for (const auto& name : {dead, alive}) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << name;
    ::close(fd);
  }
  Connect(2);
  EXPECT_TRUE(SegmentsStartingWith(SharedMemoryPrefixOf(child)).empty());
  EXPECT_EQ(SegmentsStartingWith(SharedMemoryPrefixOf(::getpid())).size(), 1u);
  EXPECT_EQ(RemoveSharedMemoryOf(::getpid()), 1);
  EXPECT_TRUE(SegmentsStartingWith(SharedMemoryPrefixOf(::getpid())).empty());
}

// A rank waiting on a peer that closed its communicator fails naming it, well before its timeout.
TEST_F(SharedMemoryTest, APeerThatClosedFailsTheWaitsOnItByName) {
  Connect(2);
  Tensor in = Bytes(16, 0);
  auto work = comms_[0]->Irecv(in, 1);
  comms_[1]->Close("rank 1 is leaving");
  try {
    work->Wait(kGenerous);
    ADD_FAILURE() << "a receive from a closed peer completed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 closed its communicator"), std::string::npos)
        << e.what();
  }
}

// Sends and receives that do not pair up (another size) are named, not read into the tensor.
TEST_F(SharedMemoryTest, AMessageOfAnotherSizeIsNamedNotRead) {
  Connect(2);
  Tensor in = Bytes(4, -5);
  auto recv = comms_[1]->Irecv(in, 0);
  comms_[0]->Isend(Bytes(8, 0), 1)->Wait(kGenerous);
  try {
    recv->Wait(kGenerous);
    ADD_FAILURE() << "a receive of 4 elements took a message of 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("message #0 of 32 bytes where this rank receives "
                                         "message #0 of 16 bytes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(in.data<int32_t>()[0], -5);
}

// Ranks listening on other addresses are hosts apart (as ranks in other network namespaces):
// they talk over TCP and book no segment.
TEST_F(SharedMemoryTest, RanksOnOtherAddressesTalkOverTcp) {
  Connect(2, {"127.0.0.1", "127.0.0.2"});
  EXPECT_EQ(ledger_.current(MemCategory::kComm), 0);
  Tensor out = Bytes(1000, 3), in = Bytes(1000, -1);
  auto recv = comms_[1]->Irecv(in, 0);
  comms_[0]->Isend(out, 1)->Wait(kGenerous);
  recv->Wait(kGenerous);
  EXPECT_EQ(std::memcmp(in.raw(), out.raw(), out.nbytes()), 0);
}

}  // namespace
}  // namespace baton
