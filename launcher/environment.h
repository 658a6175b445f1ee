// Where this process sits in a job: launched by Baton itself, by mpirun, or by Slurm's srun.
//
// Open MPI sets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}; Slurm sets SLURM_{PROCID,NTASKS,LOCALID}.
// With neither, Baton launches its own workers. The coordinator address comes from --coordinator
// or BATON_COORDINATOR (HOST:PORT); rank 0 hosts it.
#pragma once

#include <string>

namespace baton {

enum class LaunchMode { kLocal, kMpi, kSlurm };

struct LaunchEnvironment {
  LaunchMode mode = LaunchMode::kLocal;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string coordinator;  // HOST:PORT from BATON_COORDINATOR, "" if unset
};

// Reads the environment; throws baton::Error on malformed values.
LaunchEnvironment DetectLaunchEnvironment();
std::string Name(LaunchMode mode);

}  // namespace baton
