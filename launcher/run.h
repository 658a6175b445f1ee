// `baton run` and `baton plan`: the launcher's two commands.
//
// run, with no launcher environment: plan the job, host the coordinator on loopback, spawn one
// worker process per stage, print one merged progress line per logged step, and on any failure
// stop every worker and exit non-zero naming the stage and what it was doing; with
// --max-restarts N, restart every worker from the newest checkpoint up to N times first.
// eval: the same launch with every rank only evaluating the held-out data (docs/data.md).
// run under mpirun / srun: every rank runs the same command and becomes its rank's agent, which
// runs the rank's worker as a child process (job/agent.h); rank 0 also hosts the coordinator
// (its address and the job token reach the others through MPI, or BATON_COORDINATOR /
// BATON_TOKEN under Slurm), watches the job as the local launcher does and decides, after a
// failure, whether every agent restarts its worker (--max-restarts, the same on every rank) or
// the job ends.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/result.h"

namespace baton {

struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;  // "section.key=value"
};

// --memory-budget and --fit (planner/memory_planner.h, planner/fit.h).
struct MemoryArgs {
  std::string budget;  // bytes per stage, as "24GiB", "512MiB", "1.5GB" or plain bytes; empty: none
  bool fit = false;    // search precision x checkpointing x micro-batches x stages to fit it
  int max_stages = 0;  // --fit's upper bound on stages; 0: twice the configured
  int max_processes = 0;  // --fit may add replicas (ZeRO-1) up to stages x replicas; 0: none
};

struct RunOptions {
  ConfigArgs config;
  MemoryArgs memory;
  std::string report_path;  // overrides output.report
  std::string coordinator;  // HOST:PORT to host (rank 0) or reach (others)
  // A checkpoint (step dir, checkpoints root or output dir), or "auto": output.dir's latest
  // checkpoint when there is one, else a fresh start.
  std::string resume;
  // With a resume: train this many steps past the checkpoint's, the learning rate decaying on
  // from the rate it had reached (Launch::lr_segments); the checkpoints keep the extension.
  int64_t steps_more = 0;
  // A fresh run into an output.dir that holds another run's outputs removes them first
  // (launcher/output_dir.h); without it such a run is refused.
  bool overwrite = false;
  std::string launcher = "auto";  // auto | local | mpi | slurm (launcher/environment.h)
  // Restarts of every worker from the newest checkpoint after a failure (any launcher).
  int max_restarts = 0;
  std::string log_level = "info";
  // `baton eval`: load the weights (--resume, or model.init_from), evaluate the held-out data
  // once on the planned stages, print the result to `eval_out` (one line, or JSON), train nothing.
  bool evaluate_only = false;
  bool eval_json = false;
  std::ostream* eval_out = nullptr;
  // Set: the evaluation (the head rank's record) lands here instead of being printed (Evaluate).
  EvalRecord* eval_into = nullptr;
};

struct PlanOptions {
  ConfigArgs config;
  MemoryArgs memory;
  std::string format = "text";  // text | json: per stage the predicted memory, same keys as the
                                // run report's stages[i].memory.predicted
};

int RunCommand(const RunOptions& options);
// `baton eval`: RunCommand with options.evaluate_only set.
int EvalCommand(RunOptions options, std::ostream& out);
// `baton eval` as a function: the evaluation, or nullopt when the job failed (its failure logged).
std::optional<EvalRecord> Evaluate(RunOptions options);
int PlanCommand(const PlanOptions& options, std::ostream& out);

}  // namespace baton
