// How the ranks of an mpirun / srun job agree on the coordinator's address and the job's secret.
//
// mpirun: rank 0 draws the token and job id, binds the coordinator (on --coordinator /
// BATON_COORDINATOR if given, else loopback with a free port, which serves one node), and
// broadcasts "address token job" to every rank through MPI; MPI is used for nothing else and is
// finalised right after. srun without MPI: BATON_COORDINATOR and BATON_TOKEN must be set for
// every task (deploy/slurm/train.sbatch does it); the job id is SLURM_JOB_ID. torchrun: the
// address from its variables (environment.h), the token BATON_TOKEN or, without it, a digest of
// the rendezvous (not a secret), the job id TORCHELASTIC_RUN_ID (or "torchrun").
#pragma once

#include <string>

#include "launcher/environment.h"

namespace baton {

struct JobRendezvous {
  std::string bind_address;     // what rank 0's coordinator binds
  std::string connect_address;  // what workers dial (valid after PublishCoordinator)
  std::string token;
  std::string job_id;
};

// The address this rank's transport listens on, which its peers dial: BATON_HOST when set (an
// address or a name of this node), else the local address of the interface that routes to the
// coordinator's host (a loopback coordinator means one node: 127.0.0.1). Throws, naming both,
// when the coordinator's host does not resolve or no route reaches it.
std::string ListenHostFor(const std::string& coordinator_address);

// Step 1, on every rank: decide what can be decided before rank 0 has bound its port.
JobRendezvous ShareCoordinator(const LaunchEnvironment& env, const std::string& coordinator_flag);
// Step 2, on every rank, after rank 0 started the coordinator on `bound_port` (ignored elsewhere):
// every rank learns the connect address, token and job id.
JobRendezvous PublishCoordinator(const LaunchEnvironment& env, JobRendezvous rendezvous,
                                 int bound_port);

}  // namespace baton
