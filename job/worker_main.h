// A worker process (`baton worker`, the child that the local launcher, or under mpirun / srun a
// rank's agent, starts): joins the coordinator, receives the plan, builds its stage, rendezvouses
// its communicator, trains, and reports every step. Failures are reported to the coordinator (which
// aborts the job) and returned as a non-zero exit code; nothing here calls exit().
#pragma once

#include <string>

namespace baton {

struct WorkerArgs {
  std::string coordinator;  // HOST:PORT
  std::string token;        // the job's secret; "" = read BATON_TOKEN
  std::string job_id;       // "" = read BATON_JOB_ID
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;                     // the GPU to use under device cuda
  int attempt = 0;                        // the attempt it is started for (--max-restarts)
  std::string listen_host = "127.0.0.1";  // where this rank's transport accepts peers
  std::string log_level = "info";
};

// Returns the process exit code: 0 when the job finished, 1 when it failed or was aborted.
int RunWorker(const WorkerArgs& args);

// Key under which rank r leaves its final results (JSON) in the coordinator's store.
std::string ResultKey(int rank);

}  // namespace baton
