#include "scheduler/validator.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "core/error.h"

namespace baton {
namespace {

ValidationResult Invalid(const Schedule& schedule, int rank, int step, const std::string& reason) {
  std::string where;
  if (rank >= 0 && step >= 0) {
    where =
        "stage " + std::to_string(rank) + " step " + std::to_string(step) + " (" +
        ToString(schedule.per_stage[rank][step], std::max(schedule.stages, 1), schedule.layout) +
        "): ";
  }
  return ValidationResult{false,
                          "schedule '" + schedule.name + "' is invalid: " + where + reason + "\n" +
                              FormatGrid(schedule, rank, step),
                          rank, step};
}

ValidationResult CheckShape(const Schedule& schedule) {
  if (schedule.stages < 1 || schedule.microbatches < 1 || schedule.chunks < 1) {
    return Invalid(schedule, -1, -1, "stages, microbatches and chunks must be >= 1");
  }
  if (static_cast<int>(schedule.per_stage.size()) != schedule.stages) {
    return Invalid(schedule, -1, -1,
                   "has " + std::to_string(schedule.per_stage.size()) + " stage rows for " +
                       std::to_string(schedule.stages) + " stages");
  }
  for (int rank = 0; rank < schedule.stages; ++rank) {
    const auto& actions = schedule.per_stage[rank];
    for (int step = 0; step < static_cast<int>(actions.size()); ++step) {
      const Action& action = actions[step];
      if (action.stage != rank) {
        return Invalid(schedule, rank, step,
                       "action of stage " + std::to_string(action.stage) + " in stage " +
                           std::to_string(rank) + "'s list");
      }
      if (action.chunk < 0 || action.chunk >= schedule.chunks) {
        return Invalid(schedule, rank, step,
                       "chunk " + std::to_string(action.chunk) + " out of range [0, " +
                           std::to_string(schedule.chunks) + ")");
      }
      if (action.microbatch < 0 || action.microbatch >= schedule.microbatches) {
        return Invalid(schedule, rank, step,
                       "micro-batch " + std::to_string(action.microbatch) + " out of range [0, " +
                           std::to_string(schedule.microbatches) + ")");
      }
    }
  }
  return {};
}

// Exactly one F, and one B or one I plus one W, per (virtual stage, micro-batch).
ValidationResult CheckEachComputedOnce(const Schedule& schedule) {
  struct Seen {
    int count = 0;
    int step = -1;  // first occurrence
  };
  constexpr std::array<ActionKind, 4> kKinds = {ActionKind::kForward, ActionKind::kBackward,
                                                ActionKind::kBackwardInput,
                                                ActionKind::kBackwardWeight};
  const int p = schedule.stages;
  const int m = schedule.microbatches;
  std::vector<std::array<Seen, 4>> seen(static_cast<size_t>(schedule.num_virtual_stages()) * m);
  for (int rank = 0; rank < p; ++rank) {
    const auto& actions = schedule.per_stage[rank];
    for (int step = 0; step < static_cast<int>(actions.size()); ++step) {
      const Action& action = actions[step];
      const auto kind = std::find(kKinds.begin(), kKinds.end(), action.kind);
      if (kind == kKinds.end()) continue;
      Seen& entry =
          seen[schedule.VirtualStageOf(action) * m + action.microbatch][kind - kKinds.begin()];
      if (++entry.count > 1) {
        return Invalid(schedule, rank, step,
                       "duplicate: " + ToString(action, p, schedule.layout) +
                           " already ran at step " + std::to_string(entry.step));
      }
      entry.step = step;
    }
  }
  // A schedule without any B, I or W is forward-only (evaluation): it needs just the F's.
  const bool forward_only = std::all_of(seen.begin(), seen.end(), [](const auto& cell) {
    return cell[1].count + cell[2].count + cell[3].count == 0;
  });
  for (int stage = 0; stage < schedule.num_virtual_stages(); ++stage) {
    const int rank = schedule.StageOf(stage);
    const int last_step = static_cast<int>(schedule.per_stage[rank].size()) - 1;
    for (int mb = 0; mb < m; ++mb) {
      const auto& [forward, backward, input, weight] = seen[stage * m + mb];
      const std::string where =
          " of micro-batch " + std::to_string(mb) + " on virtual stage " + std::to_string(stage);
      if (backward.count > 0 && input.count + weight.count > 0) {
        const int later = std::max({backward.step, input.step, weight.step});
        return Invalid(schedule, rank, later, "mixes a full B with split I/W" + where);
      }
      std::string missing;
      if (forward.count == 0) missing = "F";
      if (backward.count == 0 && input.count == 0 && !forward_only) {
        missing += missing.empty() ? "B (or I)" : ", B";
      }
      if (input.count > 0 && weight.count == 0) missing = "W";
      if (weight.count > 0 && input.count == 0) missing = "I";
      if (!missing.empty()) {
        return Invalid(schedule, rank, last_step,
                       "missing: stage " + std::to_string(rank) + " never runs " + missing + where);
      }
    }
  }
  return {};
}

// Every RECV has a SEND of the same message somewhere on its peer, and every SEND a RECV.
// (Order, duplicates and direction are left to the dry run, which reports them in context.)
ValidationResult CheckEveryMessagePaired(const Schedule& schedule) {
  const int p = schedule.stages;
  const int num_virtual = schedule.num_virtual_stages();
  const size_t cells = static_cast<size_t>(num_virtual) * schedule.microbatches;
  // Count per message (activation or gradient; micro-batch; virtual stage that sends it).
  std::vector<int> sends(2 * cells, 0);
  std::vector<int> recvs(2 * cells, 0);
  auto message = [&](const Action& action) -> int {
    const bool forward =
        action.kind == ActionKind::kSendForward || action.kind == ActionKind::kRecvForward;
    const int peer = PeerVirtualStage(action, p, schedule.layout);
    if (peer < 0 || peer >= num_virtual) return -1;  // no peer; the dry run says so
    const int from = IsSend(action.kind) ? schedule.VirtualStageOf(action) : peer;
    return (forward ? 0 : static_cast<int>(cells)) + from * schedule.microbatches +
           action.microbatch;
  };
  for (const auto& actions : schedule.per_stage) {
    for (const Action& action : actions) {
      if (!IsCommunication(action.kind)) continue;
      if (const int key = message(action); key >= 0) ++(IsSend(action.kind) ? sends : recvs)[key];
    }
  }
  for (bool check_recvs : {true, false}) {
    for (int rank = 0; rank < p; ++rank) {
      const auto& actions = schedule.per_stage[rank];
      for (int step = 0; step < static_cast<int>(actions.size()); ++step) {
        const Action& action = actions[step];
        if (!IsCommunication(action.kind) || IsRecv(action.kind) != check_recvs) continue;
        const int key = message(action);
        if (key < 0 || (check_recvs ? sends : recvs)[key] > 0) continue;
        const std::string peer = std::to_string(PeerStage(action, p, schedule.layout));
        return Invalid(schedule, rank, step,
                       check_recvs
                           ? "receive without a send: stage " + peer + " never sends it"
                           : "send without a receive: stage " + peer + " never receives it");
      }
    }
  }
  return {};
}

}  // namespace

ValidationResult Validate(const Schedule& schedule, CommSemantics semantics) {
  if (ValidationResult shape = CheckShape(schedule); !shape) return shape;
  if (ValidationResult once = CheckEachComputedOnce(schedule); !once) return once;
  if (ValidationResult paired = CheckEveryMessagePaired(schedule); !paired) return paired;
  const DryRunResult run = DryRun(schedule, semantics);
  if (!run.ok) return Invalid(schedule, run.stage, run.step, run.reason);
  return {};
}

void CheckValid(const Schedule& schedule, CommSemantics semantics) {
  if (ValidationResult result = Validate(schedule, semantics); !result) {
    throw Error(result.message);
  }
}

std::string FormatGrid(const Schedule& schedule, int mark_rank, int mark_step) {
  const int ranks = static_cast<int>(schedule.per_stage.size());
  const int num_stages = std::max(schedule.stages, 1);
  size_t steps = 0;
  std::vector<std::vector<std::string>> cells(ranks);
  size_t width = 10;  // "stage NN" plus two spaces
  for (int rank = 0; rank < ranks; ++rank) {
    const auto& actions = schedule.per_stage[rank];
    steps = std::max(steps, actions.size());
    for (int step = 0; step < static_cast<int>(actions.size()); ++step) {
      std::string text = ToString(actions[step], num_stages, schedule.layout);
      if (rank == mark_rank && step == mark_step) text = "[" + text + "]";
      width = std::max(width, text.size() + 3);
      cells[rank].push_back(std::move(text));
    }
  }
  auto pad = [](std::string text, size_t size) {
    text.resize(std::max(size, text.size()), ' ');
    return text;
  };
  auto end_line = [](std::string line) {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + '\n';
  };
  std::string header = pad("step", 6);
  for (int rank = 0; rank < ranks; ++rank) header += pad("stage " + std::to_string(rank), width);
  std::string grid = end_line(header);
  for (size_t step = 0; step < steps; ++step) {
    std::string row = pad(std::to_string(step), 6);
    for (int rank = 0; rank < ranks; ++rank) {
      row += pad(step < cells[rank].size() ? cells[rank][step] : "", width);
    }
    if (static_cast<int>(step) == mark_step && mark_rank >= 0) {
      row += "<-- ERROR HERE (stage " + std::to_string(mark_rank) + ")";
    }
    grid += end_line(row);
  }
  return grid;
}

}  // namespace baton
