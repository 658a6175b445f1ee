// Where this process sits in a job: launched by Baton itself, by mpirun, by Slurm's srun, or by
// torchrun (or anything that sets its variables: Kubeflow's PyTorchJob, torchelastic).
//
// Open MPI sets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}; Slurm sets SLURM_{PROCID,NTASKS,LOCALID};
// torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. `--launcher auto`
// (the default) reads them, Open MPI first, then Slurm, then torchrun's (RANK, WORLD_SIZE and
// MASTER_ADDR all set); with none, Baton launches its own workers. `--launcher
// local|mpi|slurm|torchrun` says which: `local` ignores the variables (e.g. a `baton run` inside a
// Slurm allocation that should spawn its own workers), the others require theirs. The
// coordinator address comes from --coordinator or BATON_COORDINATOR (HOST:PORT), or under
// torchrun from MASTER_ADDR and MASTER_PORT (TorchrunCoordinator); rank 0 hosts it.
#pragma once

#include <string>

namespace baton {

enum class LaunchMode { kLocal, kMpi, kSlurm, kTorchrun };

struct LaunchEnvironment {
  LaunchMode mode = LaunchMode::kLocal;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string coordinator;  // HOST:PORT from BATON_COORDINATOR, "" if unset
};

// "auto", "local", "mpi" (or "mpirun"), "slurm", "torchrun".
enum class LauncherChoice { kAuto, kLocal, kMpi, kSlurm, kTorchrun };
LauncherChoice ParseLauncherChoice(const std::string& text);

// Reads the environment as `choice` says; throws baton::Error on malformed or missing values.
LaunchEnvironment DetectLaunchEnvironment(LauncherChoice choice = LauncherChoice::kAuto);
std::string Name(LaunchMode mode);

// The coordinator's address from torchrun's variables: MASTER_ADDR and the port after
// MASTER_PORT when torchrun's agent runs (TORCHELASTIC_RUN_ID is set: its own store may hold
// MASTER_PORT), MASTER_PORT itself when the variables come from elsewhere (a PyTorchJob pod
// running baton directly). Throws when MASTER_ADDR or MASTER_PORT is missing or malformed.
std::string TorchrunCoordinator();

}  // namespace baton
