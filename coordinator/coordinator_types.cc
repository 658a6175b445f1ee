// Formatting for the coordinator's plain types (see coordinator_types.h).
#include "coordinator/coordinator_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace baton {

std::string_view Name(WorkerStatus status) {
  switch (status) {
    case WorkerStatus::kRunning:
      return "running";
    case WorkerStatus::kDone:
      return "done";
    case WorkerStatus::kFailed:
      return "failed";
  }
  return "?";
}

std::string BlockedAction::ToString() const {
  std::string text = action;
  if (micro_batch >= 0) text += fmt::format(" mb {}", micro_batch);
  if (peer_rank >= 0) text += fmt::format(" peer rank {}", peer_rank);
  text += fmt::format(", waiting {:.1f} s", waiting_s);
  return text;
}

std::string WorkerExit::Describe() const {
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exited with code {}", exit_code);
}

std::string DescribeRank(int rank, int stage, int replica, int tensor) {
  if (stage < 0) return fmt::format("rank {}", rank);
  std::string place = fmt::format("stage {}", stage);
  if (replica >= 0) place += fmt::format(" replica {}", replica);
  if (tensor >= 0) place += fmt::format(" tensor {}", tensor);
  return fmt::format("{} (rank {})", place, rank);
}

std::string FormatRankTable(const std::vector<RankState>& ranks,
                            const std::map<int, std::string>& exited) {
  // A replica column when the job has data-parallel replicas; "peer" is the world rank waited on.
  const bool replicas = std::any_of(ranks.begin(), ranks.end(), [](const RankState& r) {
    return r.has_report && r.report.replica >= 0;
  });
  const bool tensor = std::any_of(ranks.begin(), ranks.end(), [](const RankState& r) {
    return r.has_report && r.report.tensor >= 0;
  });
  std::string out =
      fmt::format("{:>5} {:>5} {}{}{:<8} {:<12} {:>4} {:>5} {:>9} {:>9}  {}\n", "rank", "stage",
                  replicas ? "replica " : "", tensor ? "tensor " : "", "status", "blocked on", "mb",
                  "peer", "waiting_s", "silent_s", "note");
  for (const RankState& r : ranks) {
    std::string stage = r.has_report && r.report.stage >= 0 ? std::to_string(r.report.stage) : "-";
    std::string replica;
    if (replicas) {
      replica = fmt::format(
          "{:>7} ", r.has_report && r.report.replica >= 0 ? std::to_string(r.report.replica) : "-");
    }
    std::string tensor_rank;
    if (tensor) {
      tensor_rank = fmt::format(
          "{:>6} ", r.has_report && r.report.tensor >= 0 ? std::to_string(r.report.tensor) : "-");
    }
    const auto exit = exited.find(r.rank);
    const bool reported_failure = r.has_report && r.report.status == WorkerStatus::kFailed;
    std::string status = exit != exited.end() && !reported_failure ? "exited"
                         : !r.joined                               ? "absent"
                         : r.dead                                  ? "dead"
                                  : std::string(Name(r.report.status));
    std::string action = "-", mb = "-", peer = "-", waiting = "-";
    if (r.has_report && r.report.blocked) {
      const BlockedAction& b = *r.report.blocked;
      action = b.action;
      if (b.micro_batch >= 0) mb = std::to_string(b.micro_batch);
      if (b.peer_rank >= 0) peer = std::to_string(b.peer_rank);
      waiting = fmt::format("{:.1f}", b.waiting_s);
    }
    std::string note = r.report.status == WorkerStatus::kFailed ? r.report.error : "";
    if (note.empty() && exit != exited.end()) note = "worker process " + exit->second;
    out += fmt::format("{:>5} {:>5} {}{}{:<8} {:<12} {:>4} {:>5} {:>9} {:>9.1f}  {}\n", r.rank,
                       stage, replica, tensor_rank, status, action, mb, peer, waiting,
                       r.seconds_since_heard, note);
  }
  return out;
}

}  // namespace baton
