// Who each rank of a job is: its coordinates along the parallel axes, its printed place, its
// metrics key and every group it belongs to, derived from one list of axes and their order
// (as Megatron-Core's RankGenerator derives every group from one order string). docs/parallel.md,
// "Rank layout", states the formulas; nothing outside this file does rank arithmetic.
//
// The axes, innermost first: tensor ranks (consecutive world ranks: one node), pipeline stages,
// data-parallel replicas. A new axis (experts, context) is one more entry in kAxesInnermostFirst
// and kAxesAsPrinted, and one more size.
//
// A value type: cheap to copy, no state but the sizes.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace baton {

struct ParallelConfig;

enum class Axis { kTensor, kPipeline, kData };
inline constexpr int kNumAxes = 3;

// The order world ranks enumerate the axes in: the first varies fastest.
inline constexpr std::array<Axis, kNumAxes> kAxesInnermostFirst = {Axis::kTensor, Axis::kPipeline,
                                                                   Axis::kData};

// A rank's coordinate along every axis.
struct Coordinates {
  int stage = 0;
  int replica = 0;
  int tensor = 0;
  int& operator[](Axis axis);
  int operator[](Axis axis) const;
  bool operator==(const Coordinates&) const = default;
};

class ParallelLayout {
 public:
  // One rank.
  ParallelLayout() = default;
  // Each size at least 1; `experts` divides `replicas`.
  ParallelLayout(int stages, int tensor, int replicas, int experts = 1);
  // parallel.stages x parallel.tensor x parallel.replicas, parallel.experts.
  static ParallelLayout Of(const ParallelConfig& parallel);

  int size(Axis axis) const { return sizes_[static_cast<size_t>(axis)]; }
  int stages() const { return size(Axis::kPipeline); }
  int tensor() const { return size(Axis::kTensor); }
  int replicas() const { return size(Axis::kData); }
  // Expert parallelism (parallel.experts E): not an axis of its own but a cut of the data axis,
  // as Megatron forms its expert groups inside the data-parallel ranks: replicas [g E, (g + 1) E)
  // of a stage (and tensor rank) are expert group g, whose members split each MoE layer's experts.
  int experts() const { return experts_; }
  int world_size() const;

  // World rank <-> coordinates. `rank` must be in [0, world_size()).
  Coordinates At(int rank) const;
  int WorldRank(const Coordinates& at) const;
  int StageOf(int rank) const { return At(rank).stage; }
  int ReplicaOf(int rank) const { return At(rank).replica; }
  int TensorOf(int rank) const { return At(rank).tensor; }

  // The ranks that share every coordinate with `rank` but `axis`'s, in that axis's order (rank
  // itself included): its pipeline (kPipeline), its stage's replicas (kData), its stage's tensor
  // ranks (kTensor).
  std::vector<int> GroupOf(Axis axis, int rank) const;
  // The world cut into those groups, each in axis order, the groups by their lowest rank.
  std::vector<std::vector<int>> Groups(Axis axis) const;
  // `rank`'s expert group (its E replicas of expert group replica / E, replica order), and its
  // expert-data-parallel group (the R / E replicas holding the same experts: replica % E equal).
  std::vector<int> ExpertGroupOf(int rank) const;
  std::vector<int> ExpertDataGroupOf(int rank) const;

  // How logs, errors and the rank table name a rank: "stage 1", then " replica 0" when the job
  // has replicas and " tensor 1" when it has tensor ranks.
  std::string Place(int rank) const;
  // Place, followed by " (rank 3)" when that is not the rank itself (replicas or tensor ranks).
  std::string Who(int rank) const;
  // The progress line's short form: "s1", "s1r0", "s1t1", "s1r0t1".
  std::string ShortPlace(int rank) const;
  // metrics.jsonl's and TensorBoard's per-rank key: "stage1", "stage1_replica0",
  // "stage1_tensor1", "stage1_replica0_tensor1".
  std::string MetricsKey(int rank) const;

  bool operator==(const ParallelLayout&) const = default;

 private:
  int Stride(Axis axis) const;
  void CheckRank(int rank) const;

  std::array<int, kNumAxes> sizes_ = {1, 1, 1};  // by Axis
  int experts_ = 1;
};

}  // namespace baton
