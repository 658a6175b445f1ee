#include "plan/parallel_layout.h"

#include <fmt/format.h>

#include <string_view>

#include "config/config.h"
#include "core/error.h"

namespace baton {
namespace {

// How places print, in this order: the stage always, the other axes where the job has them.
struct AxisName {
  Axis axis;
  const char* word;   // "stage 1", "stage1" in a metrics key
  const char* brief;  // "s1" on the progress line
};
constexpr std::array<AxisName, kNumAxes> kAxesAsPrinted = {{
    {Axis::kPipeline, "stage", "s"},
    {Axis::kData, "replica", "r"},
    {Axis::kTensor, "tensor", "t"},
}};

// `rank`'s coordinates spelled with `name` (AxisName::word or ::brief), `inner` between a name
// and its value, `separator` between axes; axes of one rank left out but the stage.
std::string Spell(const ParallelLayout& layout, int rank, const char* AxisName::*name,
                  std::string_view inner, std::string_view separator) {
  const Coordinates at = layout.At(rank);
  std::string text;
  for (const AxisName& axis : kAxesAsPrinted) {
    if (axis.axis != Axis::kPipeline && layout.size(axis.axis) == 1) continue;
    text +=
        fmt::format("{}{}{}{}", text.empty() ? "" : separator, axis.*name, inner, at[axis.axis]);
  }
  return text;
}

}  // namespace

int& Coordinates::operator[](Axis axis) {
  switch (axis) {
    case Axis::kTensor:
      return tensor;
    case Axis::kPipeline:
      return stage;
    case Axis::kData:
      return replica;
  }
  BATON_FAIL("unknown parallel axis {}", static_cast<int>(axis));
}

int Coordinates::operator[](Axis axis) const { return (*const_cast<Coordinates*>(this))[axis]; }

ParallelLayout::ParallelLayout(int stages, int tensor, int replicas, int experts)
    : experts_(experts) {
  BATON_CHECK(stages >= 1 && tensor >= 1 && replicas >= 1,
              "a parallel layout needs at least one rank along every axis, got {} stage(s) x {} "
              "tensor rank(s) x {} replica(s)",
              stages, tensor, replicas);
  BATON_CHECK(experts >= 1 && replicas % experts == 0,
              "expert groups of {} replicas do not cut {} replicas evenly", experts, replicas);
  sizes_[static_cast<size_t>(Axis::kPipeline)] = stages;
  sizes_[static_cast<size_t>(Axis::kTensor)] = tensor;
  sizes_[static_cast<size_t>(Axis::kData)] = replicas;
}

ParallelLayout ParallelLayout::Of(const ParallelConfig& parallel) {
  return ParallelLayout(parallel.stages, parallel.tensor, parallel.replicas, parallel.experts);
}

int ParallelLayout::world_size() const {
  int n = 1;
  for (int size : sizes_) n *= size;
  return n;
}

int ParallelLayout::Stride(Axis axis) const {
  int stride = 1;
  for (Axis inner : kAxesInnermostFirst) {
    if (inner == axis) return stride;
    stride *= size(inner);
  }
  BATON_FAIL("unknown parallel axis {}", static_cast<int>(axis));
}

void ParallelLayout::CheckRank(int rank) const {
  BATON_CHECK(rank >= 0 && rank < world_size(), "rank {} is outside the job's {} rank(s)", rank,
              world_size());
}

Coordinates ParallelLayout::At(int rank) const {
  CheckRank(rank);
  Coordinates at;
  for (Axis axis : kAxesInnermostFirst) at[axis] = rank / Stride(axis) % size(axis);
  return at;
}

int ParallelLayout::WorldRank(const Coordinates& at) const {
  int rank = 0;
  for (Axis axis : kAxesInnermostFirst) {
    BATON_CHECK(at[axis] >= 0 && at[axis] < size(axis),
                "coordinate {} is outside an axis of {} rank(s)", at[axis], size(axis));
    rank += at[axis] * Stride(axis);
  }
  return rank;
}

std::vector<int> ParallelLayout::GroupOf(Axis axis, int rank) const {
  Coordinates at = At(rank);
  std::vector<int> group;
  for (int i = 0; i < size(axis); ++i) {
    at[axis] = i;
    group.push_back(WorldRank(at));
  }
  return group;
}

std::vector<int> ParallelLayout::ExpertGroupOf(int rank) const {
  const std::vector<int> replicas = GroupOf(Axis::kData, rank);
  const int first = At(rank).replica / experts_ * experts_;
  return {replicas.begin() + first, replicas.begin() + first + experts_};
}

std::vector<int> ParallelLayout::ExpertDataGroupOf(int rank) const {
  std::vector<int> group;
  const std::vector<int> replicas = GroupOf(Axis::kData, rank);
  for (int r = At(rank).replica % experts_; r < this->replicas(); r += experts_) {
    group.push_back(replicas[static_cast<size_t>(r)]);
  }
  return group;
}

std::vector<std::vector<int>> ParallelLayout::Groups(Axis axis) const {
  std::vector<std::vector<int>> groups;
  for (int rank = 0; rank < world_size(); ++rank) {
    if (At(rank)[axis] == 0) groups.push_back(GroupOf(axis, rank));
  }
  return groups;
}

std::string ParallelLayout::Place(int rank) const {
  return Spell(*this, rank, &AxisName::word, " ", " ");
}

std::string ParallelLayout::Who(int rank) const {
  if (world_size() == stages()) return Place(rank);
  return fmt::format("{} (rank {})", Place(rank), rank);
}

std::string ParallelLayout::ShortPlace(int rank) const {
  return Spell(*this, rank, &AxisName::brief, "", "");
}

std::string ParallelLayout::MetricsKey(int rank) const {
  return Spell(*this, rank, &AxisName::word, "", "_");
}

}  // namespace baton
