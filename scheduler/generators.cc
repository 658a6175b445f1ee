#include "scheduler/generators.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "scheduler/generators_internal.h"

namespace baton {
namespace generators_internal {
namespace {

// The most (micro-batch, virtual stage) cells a generated schedule may hold: 4M cells make ~10M
// actions with communication (hundreds of MB), beyond any real pipeline.
constexpr int64_t kMaxCells = int64_t{1} << 22;

void CheckShape(int stages, int microbatches, int chunks) {
  if (stages < 1 || microbatches < 1 || chunks < 1) {
    throw Error("schedule needs stages, microbatches and chunks >= 1 (got " +
                std::to_string(stages) + ", " + std::to_string(microbatches) + ", " +
                std::to_string(chunks) + ")");
  }
  const int64_t cells = int64_t{stages} * microbatches * chunks;
  if (cells > kMaxCells) {
    throw Error("schedule of " + std::to_string(stages) + " stages x " +
                std::to_string(microbatches) + " micro-batches x " + std::to_string(chunks) +
                " chunks = " + std::to_string(cells) + " cells is over the limit of " +
                std::to_string(kMaxCells));
  }
}

}  // namespace

Schedule EmptySchedule(std::string name, int stages, int microbatches, int chunks,
                       ChunkLayout layout) {
  CheckShape(stages, microbatches, chunks);
  Schedule schedule{std::move(name), stages, microbatches, chunks, layout, {}};
  schedule.per_stage.resize(stages);
  return schedule;
}

}  // namespace generators_internal

namespace {

using generators_internal::EmptySchedule;

// Appends actions of one stage, chunk 0.
struct RankProgram {
  std::vector<Action>* actions;
  int rank;
  void Add(ActionKind kind, int microbatch) {
    actions->push_back(Action{rank, kind, microbatch, 0});
  }
};

}  // namespace

Schedule GPipe(int stages, int microbatches) {
  Schedule schedule = EmptySchedule("gpipe", stages, microbatches, 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankProgram program{&schedule.per_stage[rank], rank};
    for (int mb = 0; mb < microbatches; ++mb) program.Add(ActionKind::kForward, mb);
    for (int mb = 0; mb < microbatches; ++mb) program.Add(ActionKind::kBackward, mb);
  }
  return schedule;
}

Schedule OneFOneB(int stages, int microbatches) {
  Schedule schedule = EmptySchedule("1f1b", stages, microbatches, 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankProgram program{&schedule.per_stage[rank], rank};
    const int warmup = std::min(stages - rank - 1, microbatches);
    const int steady = microbatches - warmup;
    // Warmup: fill the pipeline with forwards.
    for (int mb = 0; mb < warmup; ++mb) program.Add(ActionKind::kForward, mb);
    // Steady state: one forward, then the backward of the oldest micro-batch in flight.
    for (int i = 0; i < steady; ++i) {
      program.Add(ActionKind::kForward, warmup + i);
      program.Add(ActionKind::kBackward, i);
    }
    // Cooldown: drain the backwards of the warmup micro-batches.
    for (int mb = steady; mb < microbatches; ++mb) program.Add(ActionKind::kBackward, mb);
  }
  return schedule;
}

Schedule Interleaved1F1B(int stages, int microbatches, int chunks) {
  Schedule schedule = EmptySchedule("interleaved", stages, microbatches, chunks);
  // Megatron orders work in groups of p micro-batches: a group runs through chunk 0 on every
  // micro-batch, then chunk 1, ...; backward visits the chunks in reverse.
  const int padded = (microbatches + stages - 1) / stages * stages;
  const int group_span = stages * chunks;
  const int total = padded * chunks;  // (micro-batch, chunk) pairs per stage, padding included
  auto microbatch_at = [&](int k) { return k / group_span * stages + k % group_span % stages; };
  auto forward_chunk_at = [&](int k) { return k % group_span / stages; };
  auto backward_chunk_at = [&](int k) { return chunks - 1 - forward_chunk_at(k); };
  for (int rank = 0; rank < stages; ++rank) {
    auto& actions = schedule.per_stage[rank];
    auto add = [&](ActionKind kind, int k, int chunk) {
      if (microbatch_at(k) < microbatches) actions.push_back({rank, kind, microbatch_at(k), chunk});
    };
    const int warmup = std::min(total, 2 * (stages - rank - 1) + (chunks - 1) * stages);
    // Warmup: forwards until the first backward can arrive.
    for (int k = 0; k < warmup; ++k) add(ActionKind::kForward, k, forward_chunk_at(k));
    // Steady state: one forward, one backward.
    for (int k = 0; k < total - warmup; ++k) {
      add(ActionKind::kForward, warmup + k, forward_chunk_at(warmup + k));
      add(ActionKind::kBackward, k, backward_chunk_at(k));
    }
    // Cooldown: the remaining backwards.
    for (int k = total - warmup; k < total; ++k) {
      add(ActionKind::kBackward, k, backward_chunk_at(k));
    }
  }
  return schedule;
}

Schedule InterleavedZeroBubble(int stages, int microbatches, int chunks) {
  Schedule schedule = EmptySchedule("interleaved-zb", stages, microbatches, chunks);
  // Rounds of `round` micro-batches (torch's microbatches_per_round), the last padded.
  const int rounds = std::max(1, microbatches / stages);
  const int round = (microbatches + rounds - 1) / rounds;
  const int span = round * chunks;            // (micro-batch, chunk) pairs of one round
  const int total = rounds * round * chunks;  // per stage, padding included
  auto microbatch_at = [&](int k) { return k / span * round + k % round; };
  auto forward_chunk_at = [&](int k) { return k % span / round; };
  auto backward_chunk_at = [&](int k) { return chunks - 1 - forward_chunk_at(k); };
  for (int rank = 0; rank < stages; ++rank) {
    auto& actions = schedule.per_stage[static_cast<size_t>(rank)];
    auto add = [&](ActionKind kind, int k, int chunk) {
      if (microbatch_at(k) < microbatches) actions.push_back({rank, kind, microbatch_at(k), chunk});
    };
    const int warmup = std::min(total, (chunks - 1) * round + stages - 1 - rank);
    const int deferred_weights = rank;  // W's this stage holds back to fill its bubbles
    int next_weight = 0;
    auto weight = [&] {
      add(ActionKind::kBackwardWeight, next_weight, backward_chunk_at(next_weight));
      ++next_weight;
    };
    // Warm-up: forwards until the first input gradient can arrive.
    for (int k = 0; k < warmup; ++k) add(ActionKind::kForward, k, forward_chunk_at(k));
    // Steady state: F, I, and the W of the I `deferred_weights` behind; then the remaining I's,
    // each with its W.
    for (int k = 0; k < total; ++k) {
      if (warmup + k < total) add(ActionKind::kForward, warmup + k, forward_chunk_at(warmup + k));
      add(ActionKind::kBackwardInput, k, backward_chunk_at(k));
      if (k >= deferred_weights) weight();
    }
    // The W's still held back.
    while (next_weight < total) weight();
  }
  return schedule;
}

Schedule ZeroBubbleH1(int stages, int microbatches) {
  Schedule schedule = EmptySchedule("zb-h1", stages, microbatches, 1);
  for (int rank = 0; rank < stages; ++rank) {
    RankProgram program{&schedule.per_stage[rank], rank};
    const int warmup = std::min(stages - rank - 1, microbatches);
    const int steady = microbatches - warmup;
    const int deferred_weights = rank;  // W's this stage holds back to fill its bubbles
    int next_weight = 0;
    // Warmup: as 1F1B.
    for (int mb = 0; mb < warmup; ++mb) program.Add(ActionKind::kForward, mb);
    // Steady state: F, I, and the W of the micro-batch `deferred_weights` behind.
    for (int i = 0; i < steady; ++i) {
      program.Add(ActionKind::kForward, warmup + i);
      program.Add(ActionKind::kBackwardInput, i);
      if (i >= deferred_weights) program.Add(ActionKind::kBackwardWeight, next_weight++);
    }
    // Cooldown: each I is followed by one deferred W, run while the next gradient is on its way.
    for (int mb = steady; mb < microbatches; ++mb) {
      program.Add(ActionKind::kBackwardInput, mb);
      program.Add(ActionKind::kBackwardWeight, next_weight++);
    }
    // Flush the W's still deferred.
    while (next_weight < microbatches) program.Add(ActionKind::kBackwardWeight, next_weight++);
  }
  return schedule;
}

Schedule ZeroBubbleH2(int stages, int microbatches) {
  Schedule schedule = EmptySchedule("zb-h2", stages, microbatches, 1);
  const int p = stages;
  const int m = microbatches;
  const int limit = 2 * p - 1;  // micro-batches a stage may hold (F started, W not yet done)
  // A unit-cost list scheduler: at each time step every free stage starts one action, by priority
  // I (the previous stage waits for it) > F (within the limit) > W (fills what is left). It
  // simulates time, so each stage's order is consistent with one timeline and deadlock-free.
  constexpr int kNotYet = std::numeric_limits<int>::max();
  std::vector<std::vector<int>> forward_end(static_cast<size_t>(p), std::vector<int>(m, kNotYet));
  std::vector<std::vector<int>> input_end = forward_end;
  std::vector<int> next_forward(p, 0), next_input(p, 0), next_weight(p, 0);
  const int64_t total = int64_t{3} * p * m;
  int64_t done = 0;
  for (int time = 0; done < total; ++time) {
    for (int s = 0; s < p; ++s) {
      auto& actions = schedule.per_stage[static_cast<size_t>(s)];
      auto& forwards = forward_end[static_cast<size_t>(s)];
      auto& inputs = input_end[static_cast<size_t>(s)];
      const int input = next_input[s];
      const int forward = next_forward[s];
      if (input < m && forwards[input] <= time &&
          (s == p - 1 || input_end[static_cast<size_t>(s + 1)][input] <= time)) {
        actions.push_back({s, ActionKind::kBackwardInput, input, 0});
        inputs[input] = time + 1;
        ++next_input[s];
      } else if (forward < m && forward - next_weight[s] < limit &&
                 (s == 0 || forward_end[static_cast<size_t>(s - 1)][forward] <= time)) {
        actions.push_back({s, ActionKind::kForward, forward, 0});
        forwards[forward] = time + 1;
        ++next_forward[s];
      } else if (next_weight[s] < next_input[s]) {
        actions.push_back({s, ActionKind::kBackwardWeight, next_weight[s]++, 0});
      } else {
        continue;  // idle this step
      }
      ++done;
    }
    if (time > 4 * total) throw Error("zb-h2: internal error: the list scheduler made no progress");
  }
  return schedule;
}

Schedule LoopedBFS(int stages, int microbatches, int chunks) {
  if (chunks < 2) {
    throw Error("schedule 'looped-bfs' needs chunks >= 2 (model chunks per stage), got " +
                std::to_string(chunks));
  }
  Schedule schedule = EmptySchedule("looped-bfs", stages, microbatches, chunks);
  for (int s = 0; s < stages; ++s) {
    auto& actions = schedule.per_stage[static_cast<size_t>(s)];
    // Breadth first: every micro-batch through chunk 0, then chunk 1, ...
    for (int chunk = 0; chunk < chunks; ++chunk) {
      for (int mb = 0; mb < microbatches; ++mb) {
        actions.push_back({s, ActionKind::kForward, mb, chunk});
      }
    }
    // ... then the backwards, last chunk first.
    for (int chunk = chunks - 1; chunk >= 0; --chunk) {
      for (int mb = 0; mb < microbatches; ++mb) {
        actions.push_back({s, ActionKind::kBackward, mb, chunk});
      }
    }
  }
  return schedule;
}

Schedule ForwardOnly(int stages, int microbatches, int chunks, ChunkLayout layout) {
  Schedule schedule = EmptySchedule("forward", stages, microbatches, chunks, layout);
  for (int rank = 0; rank < stages; ++rank) {
    // Chunk-major: chunk c holds virtual stages c*p .. c*p + p-1 (either layout), whose inputs
    // come from chunk c or c - 1, and every stage finishes its chunk c before c + 1, so each
    // stage's order is a topological order of the dependencies.
    for (int chunk = 0; chunk < chunks; ++chunk) {
      for (int mb = 0; mb < microbatches; ++mb) {
        schedule.per_stage[static_cast<size_t>(rank)].push_back(
            Action{rank, ActionKind::kForward, mb, chunk});
      }
    }
  }
  return schedule;
}

const std::vector<std::string>& ScheduleNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const ScheduleKindInfo& info : kScheduleKinds) all.emplace_back(info.name);
    return all;
  }();
  return names;
}

namespace {

// The table's entry for `name`; throws naming the known ones when there is none.
const ScheduleKindInfo& Known(std::string_view name) {
  if (const ScheduleKindInfo* info = FindScheduleKind(name)) return *info;
  std::string known;
  for (const std::string& each : ScheduleNames()) known += (known.empty() ? "" : ", ") + each;
  throw Error("unknown schedule '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace

int ChunksFor(std::string_view name, int requested) {
  const ScheduleKindInfo& info = Known(name);
  const std::string quoted = "schedule '" + std::string(name) + "'";
  switch (info.chunks) {
    case ChunkRule::kV:
      if (requested != 1 && requested != 2) {
        throw Error(quoted + " runs 2 chunks per stage in a V; chunks " +
                    std::to_string(requested) + " was asked for");
      }
      return 2;
    case ChunkRule::kMany:
      if (requested < 2) {
        throw Error(quoted + " needs chunks >= 2 (model chunks per stage), got " +
                    std::to_string(requested));
      }
      return requested;
    case ChunkRule::kOne:
      if (requested != 1) {
        throw Error(quoted +
                    " has one chunk per stage; chunks > 1 needs 'interleaved' or "
                    "'looped-bfs' (the V schedules take 2 by themselves)");
      }
      return 1;
  }
  throw Error(quoted + ": no chunk rule");
}

Schedule MakeSchedule(std::string_view name, int stages, int microbatches, int chunks) {
  const ScheduleKindInfo& info = Known(name);
  // Interleaved keeps accepting one chunk (it is then 1F1B); everything else as ChunksFor says.
  if (info.kind != ScheduleKind::kInterleaved) ChunksFor(name, chunks);
  switch (info.kind) {
    case ScheduleKind::kGpipe:
      return GPipe(stages, microbatches);
    case ScheduleKind::k1F1B:
      return OneFOneB(stages, microbatches);
    case ScheduleKind::kInterleaved:
      return Interleaved1F1B(stages, microbatches, chunks);
    case ScheduleKind::kZbH1:
      return ZeroBubbleH1(stages, microbatches);
    case ScheduleKind::kZbH2:
      return ZeroBubbleH2(stages, microbatches);
    case ScheduleKind::kZbV:
      return ZeroBubbleV(stages, microbatches);
    case ScheduleKind::kVHalf:
      return VHalf(stages, microbatches);
    case ScheduleKind::kVMin:
      return VMin(stages, microbatches);
    case ScheduleKind::kDualPipeV:
      return DualPipeV(stages, microbatches);
    case ScheduleKind::kLoopedBfs:
      return LoopedBFS(stages, microbatches, chunks);
    case ScheduleKind::kInterleavedZb:
      return InterleavedZeroBubble(stages, microbatches, chunks);
  }
  throw Error("schedule '" + std::string(name) + "' has no generator");
}

}  // namespace baton
