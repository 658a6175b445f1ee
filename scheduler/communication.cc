#include "scheduler/communication.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "core/error.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

// The RECV that a compute action needs on its own stage, if its input comes from another stage.
std::optional<Action> RecvFor(const Action& compute, const Schedule& schedule) {
  const int stage = schedule.VirtualStageOf(compute);
  if (compute.kind == ActionKind::kForward && stage > 0 &&
      schedule.StageOf(stage - 1) != compute.stage) {
    return Action{compute.stage, ActionKind::kRecvForward, compute.microbatch, compute.chunk};
  }
  if ((compute.kind == ActionKind::kBackward || compute.kind == ActionKind::kBackwardInput) &&
      stage + 1 < schedule.num_virtual_stages() && schedule.StageOf(stage + 1) != compute.stage) {
    return Action{compute.stage, ActionKind::kRecvBackward, compute.microbatch, compute.chunk};
  }
  return std::nullopt;
}

// The SEND that follows a compute action, if another stage needs its output.
std::optional<Action> SendAfter(const Action& compute, const Schedule& schedule) {
  const int stage = schedule.VirtualStageOf(compute);
  if (compute.kind == ActionKind::kForward && stage + 1 < schedule.num_virtual_stages() &&
      schedule.StageOf(stage + 1) != compute.stage) {
    return Action{compute.stage, ActionKind::kSendForward, compute.microbatch, compute.chunk};
  }
  if ((compute.kind == ActionKind::kBackward || compute.kind == ActionKind::kBackwardInput) &&
      stage > 0 && schedule.StageOf(stage - 1) != compute.stage) {
    return Action{compute.stage, ActionKind::kSendBackward, compute.microbatch, compute.chunk};
  }
  return std::nullopt;
}

// The RECV on the peer that takes the message `send` posts.
Action MatchingRecv(const Action& send, const Schedule& schedule) {
  const int peer_stage = PeerVirtualStage(send, schedule.stages, schedule.layout);
  const ActionKind kind =
      send.kind == ActionKind::kSendForward ? ActionKind::kRecvForward : ActionKind::kRecvBackward;
  return Action{schedule.StageOf(peer_stage), kind, send.microbatch,
                ChunkOfVirtualStage(peer_stage, schedule.stages)};
}

Schedule JustInTime(const Schedule& compute) {
  const int p = compute.stages;
  // RECVs each link must deliver, in the sender's order.
  std::vector<std::vector<Action>> links(static_cast<size_t>(p) * p);
  for (const auto& actions : compute.per_stage) {
    for (const Action& action : actions) {
      if (auto send = SendAfter(action, compute)) {
        const Action recv = MatchingRecv(*send, compute);
        links[action.stage * p + recv.stage].push_back(recv);
      }
    }
  }
  Schedule result = compute;
  std::vector<size_t> posted(links.size(), 0);  // RECVs already placed, per link
  for (int rank = 0; rank < p; ++rank) {
    auto& out = result.per_stage[rank];
    out.clear();
    for (const Action& action : compute.per_stage[rank]) {
      if (auto recv = RecvFor(action, compute)) {
        // Post this link's RECVs up to and including ours, keeping the sender's order.
        const int from = PeerStage(*recv, p, compute.layout);
        const auto& link = links[from * p + rank];
        size_t& next = posted[from * p + rank];
        const size_t ours = std::find(link.begin() + next, link.end(), *recv) - link.begin();
        while (next <= ours && next < link.size()) out.push_back(link[next++]);
      }
      out.push_back(action);
      if (auto send = SendAfter(action, compute)) out.push_back(*send);
    }
  }
  return result;
}

Schedule RendezvousSafe(const Schedule& compute) {
  const int p = compute.stages;
  // The global order: the unit-cost timeline. Costs must be > 0 so starts are strictly increasing.
  const SimulationResult timing = Simulate(compute, Costs{});
  // Sort key: (time, 0 for a message exchanged when its producer ends / 1 for a compute starting,
  // sender stage, sender step) -- the same for both ends of a message.
  using Key = std::tuple<double, int, int, int>;
  std::vector<std::vector<std::pair<Key, Action>>> events(p);
  for (int rank = 0; rank < p; ++rank) {
    const auto& timeline = timing.timeline[rank];
    for (int step = 0; step < static_cast<int>(timeline.size()); ++step) {
      const Action& action = timeline[step].action;
      events[rank].push_back({Key{timeline[step].start, 1, rank, step}, action});
      if (auto send = SendAfter(action, compute)) {
        const Key exchange{timeline[step].end, 0, rank, step};
        const Action recv = MatchingRecv(*send, compute);
        events[rank].push_back({exchange, *send});
        events[recv.stage].push_back({exchange, recv});
      }
    }
  }
  Schedule result = compute;
  for (int rank = 0; rank < p; ++rank) {
    auto& rank_events = events[rank];
    std::sort(rank_events.begin(), rank_events.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    auto& out = result.per_stage[rank];
    out.clear();
    for (const auto& [key, action] : rank_events) out.push_back(action);
  }
  return result;
}

}  // namespace

Schedule InsertCommunication(const Schedule& compute_only, CommPlacement placement) {
  if (HasCommunication(compute_only)) {
    throw Error("InsertCommunication: schedule '" + compute_only.name +
                "' already has SEND/RECV actions");
  }
  CheckValid(compute_only);
  switch (placement) {
    case CommPlacement::kJustInTime:
      return JustInTime(compute_only);
    case CommPlacement::kRendezvousSafe:
      return RendezvousSafe(compute_only);
  }
  throw Error("unknown CommPlacement " + std::to_string(static_cast<int>(placement)));
}

Schedule PostReceivesEarly(const Schedule& with_communication) {
  if (!HasCommunication(with_communication) && with_communication.stages > 1) {
    throw Error("PostReceivesEarly: schedule '" + with_communication.name +
                "' has no SEND/RECV actions; run InsertCommunication first");
  }
  Schedule result = with_communication;
  for (auto& actions : result.per_stage) {
    std::vector<Action> lowered;
    lowered.reserve(actions.size());
    size_t i = 0;
    // Before the first compute action nothing runs that a RECV could overlap: keep the order.
    for (; i < actions.size() && !IsCompute(actions[i].kind); ++i) lowered.push_back(actions[i]);
    while (i < actions.size()) {
      const Action& compute = actions[i];
      size_t gap_end = i + 1;  // the gap: the actions up to the next compute
      while (gap_end < actions.size() && !IsCompute(actions[gap_end].kind)) ++gap_end;
      for (size_t j = i + 1; j < gap_end; ++j) {
        if (IsRecv(actions[j].kind)) lowered.push_back(actions[j]);
      }
      lowered.push_back(compute);
      for (size_t j = i + 1; j < gap_end; ++j) {
        if (!IsRecv(actions[j].kind)) lowered.push_back(actions[j]);
      }
      i = gap_end;
    }
    actions = std::move(lowered);
  }
  return result;
}

}  // namespace baton
