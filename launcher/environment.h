// Where this process sits in a job: launched by Baton itself, by mpirun, or by Slurm's srun.
//
// Open MPI sets OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK}; Slurm sets SLURM_{PROCID,NTASKS,LOCALID}.
// `--launcher auto` (the default) reads them, Open MPI first; with neither, Baton launches its
// own workers. `--launcher local|mpi|slurm` says which: `local` ignores the variables (e.g. a
// `baton run` inside a Slurm allocation that should spawn its own workers), `mpi` and `slurm`
// require theirs. The coordinator address comes from --coordinator or BATON_COORDINATOR
// (HOST:PORT); rank 0 hosts it.
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

// "auto", "local", "mpi" (or "mpirun"), "slurm".
enum class LauncherChoice { kAuto, kLocal, kMpi, kSlurm };
LauncherChoice ParseLauncherChoice(const std::string& text);

// Reads the environment as `choice` says; throws baton::Error on malformed or missing values.
LaunchEnvironment DetectLaunchEnvironment(LauncherChoice choice = LauncherChoice::kAuto);
std::string Name(LaunchMode mode);

}  // namespace baton
