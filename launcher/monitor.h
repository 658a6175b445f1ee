// Watches a running job through the coordinator: prints one merged progress line per logged step,
// and notices failure — a worker that reported an error, was declared dead, or (local launches)
// whose process exited — naming the stage and what it was doing.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launcher/process.h"
#include "proto/coordinator_server.h"

namespace baton {

struct MonitorOptions {
  int num_ranks = 1;
  int head_rank = 0;  // the rank whose reports carry the loss
  int64_t total_steps = 0;
  int64_t log_every = 10;
};

class JobMonitor {
 public:
  // `children` may be null (mpirun / srun: no processes of our own to watch).
  JobMonitor(CoordinatorServer& server, ProcessGroup* children, MonitorOptions options);

  // Blocks until every worker is done (returns nullopt) or the job fails (returns what failed,
  // with the rank table).
  std::optional<std::string> Run();

 private:
  void MaybePrintProgress(const std::vector<RankState>& ranks);
  std::optional<std::string> CheckFailure(const std::vector<RankState>& ranks);
  // A child that exited abnormally within `grace`, described; reaps children that exited well.
  std::optional<std::string> DeadChild(const std::vector<RankState>& ranks,
                                       std::chrono::milliseconds grace);

  CoordinatorServer& server_;
  ProcessGroup* children_;
  MonitorOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  int64_t printed_step_ = 0;
  bool stop_forwarded_ = false;
  int exited_ok_ = 0;
};

}  // namespace baton
