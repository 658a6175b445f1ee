// The schedules Baton generates, in one table: each kind's name (as YAML, `baton schedule` and
// errors spell it) and how many model chunks per stage it runs. The generators dispatch on the
// kind (scheduler/generators.h: a switch, so a new kind without a generator does not compile),
// the config parses the names (config/config_schema.h), and `baton tune` searches the table.
// Depends on nothing.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

namespace baton {

enum class ScheduleKind {
  kGpipe,
  k1F1B,
  kInterleaved,
  kZbH1,
  kZbH2,
  kZbV,
  kVHalf,
  kVMin,
  kDualPipeV,
  kLoopedBfs,
  kInterleavedZb
};

// Model chunks per stage.
enum class ChunkRule {
  kOne,   // one chunk per stage
  kMany,  // parallel.chunks >= 2, in Megatron's loop layout (interleaved, looped-bfs)
  kV,     // two, in the V layout (stage 0 holds the first and the last chunk)
};

struct ScheduleKindInfo {
  ScheduleKind kind;
  std::string_view name;
  ChunkRule chunks;
};

// In this order: the config's list of choices, ScheduleNames(), and `baton tune`'s search.
inline constexpr std::array<ScheduleKindInfo, 11> kScheduleKinds = {{
    {ScheduleKind::kGpipe, "gpipe", ChunkRule::kOne},
    {ScheduleKind::k1F1B, "1f1b", ChunkRule::kOne},
    {ScheduleKind::kInterleaved, "interleaved", ChunkRule::kMany},
    {ScheduleKind::kZbH1, "zb-h1", ChunkRule::kOne},
    {ScheduleKind::kZbH2, "zb-h2", ChunkRule::kOne},
    {ScheduleKind::kZbV, "zb-v", ChunkRule::kV},
    {ScheduleKind::kVHalf, "v-half", ChunkRule::kV},
    {ScheduleKind::kVMin, "v-min", ChunkRule::kV},
    {ScheduleKind::kDualPipeV, "dualpipev", ChunkRule::kV},
    {ScheduleKind::kLoopedBfs, "looped-bfs", ChunkRule::kMany},
    {ScheduleKind::kInterleavedZb, "interleaved-zb", ChunkRule::kMany},
}};

// The entry named `name`, or null.
constexpr const ScheduleKindInfo* FindScheduleKind(std::string_view name) {
  for (const ScheduleKindInfo& info : kScheduleKinds) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

// Row k of the table is kind k: every kind has its row, in the enum's order.
constexpr bool KindsInEnumOrder() {
  for (size_t i = 0; i < kScheduleKinds.size(); ++i) {
    if (kScheduleKinds[i].kind != static_cast<ScheduleKind>(i)) return false;
  }
  return true;
}
static_assert(KindsInEnumOrder(), "kScheduleKinds: one row per ScheduleKind, in the enum's order");

constexpr const ScheduleKindInfo& InfoOf(ScheduleKind kind) {
  return kScheduleKinds[static_cast<size_t>(kind)];
}

}  // namespace baton
