// The Communicator contract (communicator.h), checked on every CPU implementation: the in-process
// fake, Gloo over loopback TCP ("gloo") and Gloo with its same-host shared-memory links ("shm"),
// with ranks as threads of this process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "comm/fake_communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/group.h"
#include "comm/host_sum.h"
#include "comm/kv_store.h"
#include "comm/shared_memory.h"
#include "core/error.h"
#include "core/random.h"

namespace baton {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kGenerous{20000};  // safety limit only: tests pass far sooner

using Comms = std::vector<std::unique_ptr<Communicator>>;

// Runs fn(rank) on one thread per rank; a failure on any rank fails the test.
void RunRanks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
  }
}

class CommunicatorTest : public ::testing::TestWithParam<std::string> {
 protected:
  Comms Make(int n) {
    Comms comms(n);
    if (GetParam() == "fake") {
      hub_ = std::make_unique<FakeHub>(n);
      for (int rank = 0; rank < n; ++rank) comms[rank] = hub_->Make(rank);
      return comms;
    }
    MemoryKvStore store;
    RunRanks(n, [&](int rank) {
      GlooOptions options;
      options.rank = rank;
      options.size = n;
      options.timeout = kGenerous;
      options.shared_memory = GetParam() == "shm";
      comms[rank] = std::make_unique<GlooCommunicator>(store, allocator_, options);
    });
    // The shared-memory segments, booked as comm while the communicators live.
    comm_base_ = ledger_.current(MemCategory::kComm);
    EXPECT_EQ(comm_base_, GetParam() == "shm" ? n * SharedMemorySegmentBytes(n - 1) : 0);
    return comms;
  }

  Tensor Filled(float value, int64_t n = 16, DType dtype = DType::kF32) {
    Tensor t = Tensor::Empty(allocator_, {n}, dtype, MemCategory::kActivations);
    std::vector<float> values(n, value);
    ConvertFloats(values.data(), DType::kF32, t.raw(), dtype, n);
    return t;
  }
  Tensor Random(uint64_t stream, int64_t n) {
    Tensor t = Tensor::Empty(allocator_, {n}, DType::kF32, MemCategory::kGrads);
    Rng rng = Rng::ForStream(7, {stream});
    // Mixed magnitudes, so that the order of summation shows in the bits.
    for (int64_t i = 0; i < n; ++i) {
      t.data<float>()[i] = static_cast<float>(rng.NextNormal() * (i % 3 == 0 ? 1e4 : 1e-3));
    }
    return t;
  }

  int64_t comm_base_ = 0;
  MemoryLedger ledger_;
  CpuAllocator allocator_{ledger_};
  std::unique_ptr<FakeHub> hub_;
};

TEST_P(CommunicatorTest, MessagesOfAPairArriveInFifoOrderPerDirection) {
  Comms comms = Make(2);
  constexpr int kMessages = 5;
  RunRanks(2, [&](int rank) {
    Communicator& comm = *comms[rank];
    const int peer = 1 - rank;
    std::vector<Tensor> out, in;
    std::vector<std::unique_ptr<Work>> works;
    for (int k = 0; k < kMessages; ++k) {
      out.push_back(Filled(100.0f * rank + k));
      in.push_back(Filled(-1));
      works.push_back(comm.Isend(out.back(), peer));
      works.push_back(comm.Irecv(in.back(), peer));
    }
    for (auto& work : works) work->Wait(kGenerous);
    for (int k = 0; k < kMessages; ++k) {
      BATON_CHECK(in[k].data<float>()[0] == 100.0f * peer + k, "message {} carried {}", k,
                  in[k].data<float>()[0]);
    }
  });
}

TEST_P(CommunicatorTest, SendPostedLongBeforeTheReceiveCompletes) {
  Comms comms = Make(2);
  RunRanks(2, [&](int rank) {
    if (rank == 0) {
      auto work = comms[0]->Isend(Filled(3.5f), 1);
      work->Wait(kGenerous);
    } else {
      std::this_thread::sleep_for(milliseconds(100));
      Tensor in = Filled(0);
      comms[1]->Irecv(in, 0)->Wait(kGenerous);
      BATON_CHECK(in.data<float>()[15] == 3.5f, "got {}", in.data<float>()[15]);
    }
  });
}

TEST_P(CommunicatorTest, ReceivePostedLongBeforeTheSendCompletes) {
  Comms comms = Make(2);
  RunRanks(2, [&](int rank) {
    if (rank == 1) {
      Tensor in = Filled(0);
      auto work = comms[1]->Irecv(in, 0);
      const auto deadline = std::chrono::steady_clock::now() + kGenerous;
      while (!work->Test() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(5));
      }
      work->Wait(milliseconds(0));  // done by now, or this throws naming the message
      BATON_CHECK(in.data<float>()[0] == 2.0f, "got {}", in.data<float>()[0]);
    } else {
      std::this_thread::sleep_for(milliseconds(100));
      comms[0]->Isend(Filled(2.0f), 1)->Wait(kGenerous);
    }
  });
}

TEST_P(CommunicatorTest, AllReduceSumGivesIdenticalBitsOnEveryRank) {
  constexpr int kRanks = 3;
  constexpr int64_t kElements = 3001;  // not a multiple of the rank count
  Comms comms = Make(kRanks);
  std::vector<Tensor> results(kRanks);
  RunRanks(kRanks, [&](int rank) {
    results[rank] = Random(rank, kElements);
    comms[rank]->AllReduceSum(results[rank], kGenerous);
  });
  std::vector<Tensor> inputs;
  for (int rank = 0; rank < kRanks; ++rank) inputs.push_back(Random(rank, kElements));
  for (int rank = 1; rank < kRanks; ++rank) {
    EXPECT_EQ(std::memcmp(results[0].raw(), results[rank].raw(), results[0].nbytes()), 0)
        << "rank " << rank << " holds other bits than rank 0";
  }
  for (int64_t i = 0; i < kElements; ++i) {
    float expected = 0;
    for (const Tensor& t : inputs) expected += t.data<float>()[i];
    ASSERT_NEAR(results[0].data<float>()[i], expected, 1e-3f * (1 + std::abs(expected)));
  }
}

TEST_P(CommunicatorTest, AllReduceSumOfHalvesSumsInF32AndRoundsOnce) {
  Comms comms = Make(3);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    // Half an ulp of 1: 1 + h rounds back to 1 (ties to even), so rounding after each addition
    // would lose both h terms; summing in f32 and rounding once keeps 1 + 2h exactly.
    const float h = dtype == DType::kF16 ? 1.0f / 2048 : 1.0f / 256;
    std::vector<Tensor> results(3);
    RunRanks(3, [&](int rank) {
      results[rank] = Filled(rank == 0 ? 1.0f : h, 8, dtype);
      comms[rank]->AllReduceSum(results[rank], kGenerous);
    });
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(ToFloatVector(results[rank])[7], 1.0f + 2 * h) << Name(dtype) << " rank " << rank;
    }
  }
  EXPECT_EQ(ledger_.current(MemCategory::kComm), comm_base_);
  if (GetParam() != "fake") {
    // Each rank's f32 staging buffer is booked (the three ranks share this test's ledger).
    EXPECT_GE(ledger_.peak(MemCategory::kComm), comm_base_ + 8 * 4);
    EXPECT_LE(ledger_.peak(MemCategory::kComm), comm_base_ + 3 * 8 * 4);
  }
}

TEST_P(CommunicatorTest, SubgroupAllReduceSumsInRankOrderOnMembersOnly) {
  Comms comms = Make(3);
  constexpr int64_t kElements = 257;
  std::vector<Tensor> pair(3), trio(3);
  RunRanks(3, [&](int rank) {
    pair[rank] = Random(rank, kElements);
    if (rank != 1) comms[rank]->AllReduceSum(pair[rank], {2, 0}, kGenerous);
    trio[rank] = Random(10 + rank, kElements);
    comms[rank]->AllReduceSum(trio[rank], {0, 1, 2}, kGenerous);
  });
  Tensor x0 = Random(0, kElements), x1 = Random(1, kElements), x2 = Random(2, kElements);
  Tensor y0 = Random(10, kElements), y1 = Random(11, kElements), y2 = Random(12, kElements);
  for (int64_t i = 0; i < kElements; ++i) {
    const float pair_sum = x0.data<float>()[i] + x2.data<float>()[i];
    const float trio_sum = (y0.data<float>()[i] + y1.data<float>()[i]) + y2.data<float>()[i];
    ASSERT_EQ(pair[0].data<float>()[i], pair_sum) << i;
    ASSERT_EQ(pair[2].data<float>()[i], pair_sum) << i;
    ASSERT_EQ(pair[1].data<float>()[i], x1.data<float>()[i]) << "rank 1 is no member";
    for (int rank = 0; rank < 3; ++rank) ASSERT_EQ(trio[rank].data<float>()[i], trio_sum) << i;
  }
}

// A group of four, named out of order: each element is the sum of the members' elements in world
// rank order (the contract's order), on every member, whatever the element count (fewer elements
// than members too: members with empty slices), in f32, bf16 (summed in f32, rounded once) and i32;
// every staging buffer goes back.
TEST_P(CommunicatorTest, FourMemberAllReduceSumsEveryElementInRankOrderAtEverySize) {
  Comms comms = Make(5);
  const std::vector<int> group = {3, 0, 4, 1};  // rank 2 is no member
  for (const int64_t elements : {1, 3, 4, 5, 1001}) {
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kI32}) {
      std::vector<Tensor> inputs(5), results(5);
      for (int rank = 0; rank < 5; ++rank) {
        Tensor r = Random(100 + rank, elements);
        inputs[rank] = Tensor::Empty(allocator_, {elements}, dtype, MemCategory::kGrads);
        if (dtype == DType::kI32) {
          for (int64_t i = 0; i < elements; ++i) {
            inputs[rank].data<int32_t>()[i] = static_cast<int32_t>(r.data<float>()[i] * 1e3f);
          }
        } else {
          ConvertFloats(r.raw(), DType::kF32, inputs[rank].raw(), dtype, elements);
        }
        results[rank] = Tensor::Empty(allocator_, {elements}, dtype, MemCategory::kGrads);
        std::memcpy(results[rank].raw(), inputs[rank].raw(), inputs[rank].nbytes());
      }
      RunRanks(5, [&](int rank) {
        if (rank != 2) comms[rank]->AllReduceSum(results[rank], group, kGenerous);
      });
      std::vector<Tensor> ordered;
      for (int member : {0, 1, 3, 4}) {
        ordered.push_back(Tensor::Empty(allocator_, {elements}, dtype, MemCategory::kGrads));
        std::memcpy(ordered.back().raw(), inputs[member].raw(), inputs[member].nbytes());
      }
      SumInOrder(ordered);  // the reference: whole tensors summed in rank order
      for (int rank = 0; rank < 5; ++rank) {
        const Tensor& expected = rank == 2 ? inputs[2] : ordered[0];
        EXPECT_EQ(std::memcmp(results[rank].raw(), expected.raw(), expected.nbytes()), 0)
            << Name(dtype) << ", " << elements << " elements, rank " << rank;
      }
    }
  }
  EXPECT_EQ(ledger_.current(MemCategory::kComm), comm_base_);
}

// 2 stages x 2 replicas: world rank = replica * 2 + stage. Each replica's pipeline is a view of
// its two ranks, and each stage's replicas another; both map ranks and sum only their members.
TEST_P(CommunicatorTest, SubgroupViewsMapRanksAndReduceOverTheirMembersOnly) {
  Comms comms = Make(4);
  RunRanks(4, [&](int rank) {
    const int stage = rank % 2, replica = rank / 2;
    Group pipeline(*comms[rank], {replica * 2, replica * 2 + 1});
    Group replicas(*comms[rank], {stage, stage + 2});
    BATON_CHECK(pipeline.rank() == stage && pipeline.size() == 2, "pipeline rank {} of {}",
                pipeline.rank(), pipeline.size());
    BATON_CHECK(replicas.rank() == replica, "replica rank {}", replicas.rank());
    // Stage 0 of each replica sends its world rank to stage 1 of the same replica.
    Tensor message = Filled(static_cast<float>(rank));
    if (stage == 0) {
      pipeline.Isend(message, 1)->Wait(kGenerous);
    } else {
      Tensor in = Filled(-1);
      pipeline.Irecv(in, 0)->Wait(kGenerous);
      BATON_CHECK(in.data<float>()[0] == static_cast<float>(rank - 1),
                  "stage 1 of replica {} "
                  "got {}",
                  replica, in.data<float>()[0]);
    }
    Tensor across_stages = Filled(static_cast<float>(rank));
    pipeline.AllReduceSum(across_stages, kGenerous);
    const float pipeline_sum = static_cast<float>(4 * replica + 1);
    BATON_CHECK(across_stages.data<float>()[3] == pipeline_sum, "pipeline sum {}",
                across_stages.data<float>()[3]);
    Tensor across_replicas = Filled(static_cast<float>(rank));
    replicas.AllReduceSum(across_replicas, {0, 1}, kGenerous);
    BATON_CHECK(across_replicas.data<float>()[0] == static_cast<float>(2 * stage + 2),
                "replica sum {}", across_replicas.data<float>()[0]);
    replicas.Barrier(kGenerous);
  });
  EXPECT_THROW(Group(*comms[0], {1, 2}), Error);  // rank 0 is not a member
}

// A group of world ranks {2, 0} (its rank 0 is world rank 2) beside rank 1, which is no member:
// slices move point to point and land at their member's place, sums keep the rank order.
TEST_P(CommunicatorTest, GroupCollectivesMoveSlicesInTheGroupsRankOrder) {
  Comms comms = Make(3);
  constexpr int64_t kRows = 2, kCols = 5, kElements = 2 * kRows * kCols;
  std::vector<Tensor> gathered(3), scattered(3), exchanged(3);
  RunRanks(3, [&](int rank) {
    if (rank == 1) return;
    Group group(*comms[rank], {2, 0});
    const int me = group.rank();
    BATON_CHECK(me == (rank == 2 ? 0 : 1) && group.ViewRank(rank) == me &&
                    group.ViewRank(1) == -1 && group.WorldRank(0) == 2,
                "world rank {} is group rank {}", rank, me);
    // All-gather: each member writes its slice; the other slice holds garbage until gathered.
    gathered[rank] = Filled(-7.0f, kElements).View({2 * kRows, kCols});
    Tensor mine = group.SliceOf(gathered[rank], me);
    for (int64_t i = 0; i < kRows * kCols; ++i) mine.data<float>()[i] = 100.0f * me + i;
    group.AllGather(gathered[rank], kGenerous);
    // Reduce-scatter: the member's slice of the rank-order sum.
    scattered[rank] = Random(20 + rank, kElements).View({2 * kRows, kCols});
    group.ReduceScatterSum(scattered[rank], kGenerous);
    // All-to-all: slice j of what member i sends is 1000 i + 10 j + element.
    Tensor send = Filled(0, kElements).View({2 * kRows, kCols});
    for (int j = 0; j < 2; ++j) {
      Tensor slice = group.SliceOf(send, j);
      for (int64_t i = 0; i < kRows * kCols; ++i) {
        slice.data<float>()[i] = 1000.0f * me + 10.0f * j + i;
      }
    }
    exchanged[rank] = Filled(-1, kElements).View({2 * kRows, kCols});
    group.AllToAll(send, exchanged[rank], kGenerous);
  });
  const Tensor x_g0 = Random(22, kElements), x_g1 = Random(20, kElements);  // world 2, then 0
  for (int rank : {0, 2}) {
    const int me = rank == 2 ? 0 : 1;
    for (int64_t e = 0; e < kElements; ++e) {
      const int member = static_cast<int>(e / (kRows * kCols));
      const int64_t i = e % (kRows * kCols);
      ASSERT_EQ(gathered[rank].data<float>()[e], 100.0f * member + i) << rank << " " << e;
      ASSERT_EQ(exchanged[rank].data<float>()[e], 1000.0f * member + 10.0f * me + i)
          << rank << " " << e;
      if (member == me) {
        ASSERT_EQ(scattered[rank].data<float>()[e], x_g0.data<float>()[e] + x_g1.data<float>()[e])
            << rank << " " << e;
      }
    }
  }
  EXPECT_THROW(Group(*comms[0], {0, 2}).SliceOf(Filled(0, 5), 0), Error);  // 5 rows, 2 members
}

// Along a later dimension a slice is one piece per leading index: a (B, S, C) activation cut
// along the sequence over 3 members gathers every batch row's parts at their places, and the
// reduce-scatter leaves each member's positions of every row summed.
TEST_P(CommunicatorTest, GroupCollectivesCutAlongALaterDimension) {
  Comms comms = Make(3);
  constexpr int64_t kBatch = 2, kSeq = 6, kWidth = 3, kElements = kBatch * kSeq * kWidth;
  std::vector<Tensor> gathered(3), scattered(3);
  RunRanks(3, [&](int rank) {
    Group group(*comms[rank], {1, 2, 0});
    const int me = group.rank();
    gathered[rank] = Filled(-7.0f, kElements).View({kBatch, kSeq, kWidth});
    ASSERT_EQ(group.SliceOf(gathered[rank], me, /*dim=*/1).shape(), Shape({kBatch, 2, kWidth}));
    for (int64_t b = 0; b < kBatch; ++b) {
      for (int64_t s = 0; s < kSeq / 3; ++s) {
        for (int64_t c = 0; c < kWidth; ++c) {
          gathered[rank].data<float>()[(b * kSeq + 2 * me + s) * kWidth + c] =
              100.0f * b + 10.0f * (2 * me + s) + c;
        }
      }
    }
    group.AllGather(gathered[rank], kGenerous, /*dim=*/1);
    scattered[rank] = Random(30 + rank, kElements).View({kBatch, kSeq, kWidth});
    group.ReduceScatterSum(scattered[rank], kGenerous, /*dim=*/1);
  });
  // Group ranks 0, 1, 2 are world ranks 1, 2, 0; the world's subgroup sum adds in world order.
  const Tensor x0 = Random(30, kElements), x1 = Random(31, kElements), x2 = Random(32, kElements);
  for (int rank = 0; rank < 3; ++rank) {
    const int me = (rank + 2) % 3;
    for (int64_t e = 0; e < kElements; ++e) {
      const int64_t b = e / (kSeq * kWidth), s = e / kWidth % kSeq, c = e % kWidth;
      ASSERT_EQ(gathered[rank].data<float>()[e], 100.0f * b + 10.0f * s + c) << rank << " " << e;
      if (s / 2 == me) {
        ASSERT_EQ(scattered[rank].data<float>()[e],
                  x0.data<float>()[e] + x1.data<float>()[e] + x2.data<float>()[e])
            << rank << " " << e;
      }
    }
  }
  EXPECT_THROW(Group(*comms[0], {0, 1}).SliceOf(Filled(0, 6).View({2, 3}), 0, 1), Error);
}

TEST_P(CommunicatorTest, BarrierReturnsOnlyOnceEveryRankEntered) {
  Comms comms = Make(3);
  std::atomic<int> entered = 0;
  std::atomic<int> early = 0;
  RunRanks(3, [&](int rank) {
    std::this_thread::sleep_for(milliseconds(30 * rank));
    entered++;
    comms[rank]->Barrier(kGenerous);
    if (entered.load() != 3) early++;
  });
  EXPECT_EQ(early.load(), 0);
}

TEST_P(CommunicatorTest, WaitTimeoutNamesThePeerAndTheMessage) {
  Comms comms = Make(2);
  Tensor in = Filled(0);
  auto work = comms[0]->Irecv(in, 1);
  try {
    work->Wait(milliseconds(100));
    FAIL() << "no message was sent, yet the receive completed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed out after 0.1 s"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("receive of f32(16)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("from rank 1"), std::string::npos) << e.what();
  }
  // The receive is still posted: a late send completes it.
  comms[1]->Isend(Filled(9), 0)->Wait(kGenerous);
  work->Wait(kGenerous);
  EXPECT_EQ(in.data<float>()[0], 9);
}

TEST_P(CommunicatorTest, AbortMakesAPendingWaitThrowWithTheReason) {
  Comms comms = Make(2);
  Tensor in = Filled(0);
  auto work = comms[0]->Irecv(in, 1);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    comms[0]->Abort("stage 1 failed");
  });
  try {
    work->Wait(kGenerous);
    ADD_FAILURE() << "the receive completed without a send";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("aborted: stage 1 failed"), std::string::npos) << e.what();
  }
  aborter.join();
  EXPECT_THROW(comms[0]->Isend(in, 1), Error);
}

TEST_P(CommunicatorTest, SendingToItselfOrOutsideTheWorldIsRefused) {
  Comms comms = Make(2);
  EXPECT_THROW(comms[0]->Isend(Filled(1), 0), Error);
  EXPECT_THROW(comms[0]->Isend(Filled(1), 2), Error);
  Tensor t = Filled(1);
  EXPECT_THROW(comms[0]->AllReduceSum(t, {1}, kGenerous), Error);  // not a member
}

INSTANTIATE_TEST_SUITE_P(Cpu, CommunicatorTest, ::testing::Values("fake", "gloo", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(FakeCommunicatorTest, MismatchedMessageSizesFailBothEnds) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  FakeHub hub(2);
  auto a = hub.Make(0);
  auto b = hub.Make(1);
  Tensor small = Tensor::Zeros(allocator, {4}, DType::kF32, MemCategory::kActivations);
  Tensor large = Tensor::Zeros(allocator, {8}, DType::kF32, MemCategory::kActivations);
  auto send = a->Isend(small, 1);
  auto recv = b->Irecv(large, 0);
  try {
    recv->Wait(kGenerous);
    FAIL() << "a 4-element message filled an 8-element receive";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sent f32(4)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(send->Test(), Error);
}

TEST(FakeCommunicatorTest, HubAbortStopsEveryRank) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  FakeHub hub(3);
  Comms comms;
  for (int rank = 0; rank < 3; ++rank) comms.push_back(hub.Make(rank));
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    hub.Abort("stage 2 ran out of memory");
  });
  RunRanks(3, [&](int rank) {
    Tensor t = Tensor::Zeros(allocator, {4}, DType::kF32, MemCategory::kActivations);
    try {
      if (rank == 0) comms[0]->Irecv(t, 1)->Wait(kGenerous);  // never sent
      if (rank == 1) comms[1]->Barrier(kGenerous);            // rank 2 never comes
      if (rank == 2) comms[2]->AllReduceSum(t, {0, 2}, kGenerous);
      BATON_FAIL("rank {} finished its wait", rank);
    } catch (const Error& e) {
      BATON_CHECK(std::string(e.what()).find("stage 2 ran out of memory") != std::string::npos,
                  "rank {}: {}", rank, e.what());
    }
  });
  aborter.join();
}

}  // namespace
}  // namespace baton
