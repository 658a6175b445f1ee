// CheckpointSnapshot: the host copy a background checkpoint is written from holds the state of the
// moment it was taken, whatever training does next; its files are the direct save's, byte for
// byte; its buffers are booked as checkpoint memory and reused by the next copy.
#include "checkpoint/checkpoint_snapshot.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_test_util.h"

namespace baton {
namespace {

using checkpoint_test::Fixture;
using checkpoint_test::Rank;
using checkpoint_test::TempDir;

// name -> checksum of the files of `step` written from `layers`.
std::map<std::string, uint64_t> Written(const std::string& root, int64_t step,
                                        const std::vector<LayerTensors>& layers, Backend& backend) {
  std::map<std::string, uint64_t> sums;
  for (const CheckpointFileEntry& e :
       CheckpointWriter(root).WriteLayers(step, 0, layers, backend)) {
    sums[e.name] = e.checksum;
  }
  return sums;
}

TEST(CheckpointSnapshotTest, WritesTheStateOfItsMomentByteForByteWhateverTrainingDoesNext) {
  for (const bool quantized_state : {false, true}) {
    SCOPED_TRACE(quantized_state ? "8-bit state" : "f32 state");
    Fixture f;
    TempDir direct_dir, snapshot_dir, later_dir;
    Rank r = f.MakeRank({{0, 3}}, 0, 1, DType::kBF16, 7, quantized_state);
    for (int step = 1; step <= 2; ++step) checkpoint_test::FakeStep({&r}, step);

    MemoryLedger host_ledger;
    CpuAllocator host(host_ledger);
    CheckpointSnapshot snapshot(host);
    snapshot.Begin();
    snapshot.Add(r.checkpoint_tensors(), *f.backend);
    const std::map<std::string, uint64_t> direct =
        Written(direct_dir.path(), 2, r.checkpoint_tensors(), *f.backend);
    // Training goes on; the copy does not move.
    checkpoint_test::FakeStep({&r}, 3);
    EXPECT_EQ(Written(snapshot_dir.path(), 2, snapshot.layers(), *f.backend), direct);
    EXPECT_NE(Written(later_dir.path(), 2, r.checkpoint_tensors(), *f.backend), direct);

    // Every stored tensor is in the copy, on the host, and booked as checkpoint memory; the
    // head's tied wte is not copied (the embedding's file stores it).
    int64_t expected = 0;
    for (const LayerTensors& layer : r.checkpoint_tensors()) {
      for (const ParamTensors& p : layer.params) {
        if (p.tied) continue;
        for (const Tensor* t :
             {&p.value, &p.master, &p.adam_m, &p.adam_v, &p.adam_m_absmax, &p.adam_v_absmax}) {
          if (t->defined()) expected += static_cast<int64_t>(t->nbytes());
        }
      }
    }
    ASSERT_EQ(snapshot.layers().size(), 4u);
    int tied = 0;
    for (const ParamTensors& p : snapshot.layers().back().params) {
      if (!p.tied) continue;
      ++tied;
      EXPECT_FALSE(p.value.defined()) << p.name;
    }
    EXPECT_EQ(tied, 1);
    EXPECT_EQ(snapshot.bytes(), expected);
    EXPECT_EQ(host_ledger.Current()[MemCategory::kCheckpoint], expected);
    EXPECT_EQ(host_ledger.Current().total, expected);

    // The next copy reuses the buffers: nothing more is booked, the same memory holds it.
    const void* first = snapshot.layers()[1].params[0].value.raw();
    snapshot.Begin();
    snapshot.Add(r.checkpoint_tensors(), *f.backend);
    EXPECT_EQ(snapshot.layers()[1].params[0].value.raw(), first);
    EXPECT_EQ(host_ledger.Peak()[MemCategory::kCheckpoint], expected);
    EXPECT_EQ(Written(snapshot_dir.path(), 3, snapshot.layers(), *f.backend),
              Written(later_dir.path(), 3, r.checkpoint_tensors(), *f.backend));
  }
}

TEST(CheckpointSnapshotTest, ABufferOfAnotherShapeIsRemadeAndTheOldOneReleased) {
  Fixture f;
  MemoryLedger host_ledger;
  CpuAllocator host(host_ledger);
  CheckpointSnapshot snapshot(host);
  Rank whole = f.MakeRank({{0, 3}}, 0, 1);
  Rank head = f.MakeRank({{3, 3}}, 1, 2);
  snapshot.Begin();
  snapshot.Add(whole.checkpoint_tensors(), *f.backend);
  const int64_t whole_bytes = snapshot.bytes();
  // Fewer, differently shaped tensors: the buffers that differ are remade, the ledger follows
  // (the leftover buffers stay, for a later copy of the whole again).
  snapshot.Begin();
  snapshot.Add(head.checkpoint_tensors(), *f.backend);
  ASSERT_EQ(snapshot.layers().size(), 1u);
  EXPECT_EQ(snapshot.layers()[0].name, "head");
  EXPECT_EQ(host_ledger.Current()[MemCategory::kCheckpoint], snapshot.bytes());
  EXPECT_LE(host_ledger.Peak()[MemCategory::kCheckpoint], whole_bytes + snapshot.bytes());
}

}  // namespace
}  // namespace baton
