// A rank's worker as a child process, and the agent that supervises it under mpirun / srun.
//
// Every launch runs the same worker command (`baton worker --coordinator ... --rank R --attempt N`,
// with the job's token and id in the environment): the local launcher starts one per stage,
// and under mpirun or srun every launched process is its rank's *agent* (torchrun's elastic
// agent, in small), which starts its rank's worker and follows the job's attempts:
//
//   - while the worker runs, SIGTERM/SIGINT to the agent (what mpirun and srun forward) go on to
//     it (it finishes its step, checkpoints and exits 0), and when the coordinator aborts the
//     attempt the agent stops it (SIGTERM, SIGKILL after 2 s), so a hung worker cannot hold up a
//     restart;
//   - once it has exited, the agent reports how to the coordinator (a failed exit aborts the
//     attempt, naming the stage) and waits for what rank 0's launcher decides: start the worker
//     again for the next attempt (--max-restarts: it resumes from the newest checkpoint), or end
//     with the job: exit 0 when it succeeded, 1 with the failure named when it failed.
//
// The agent only restarts when rank 0 has reset the job to the next attempt, and the coordinator
// refuses a worker started for any other attempt, so no worker ever joins an attempt that is not
// its own. Protocol: docs/protocol.md, "Agents".
#pragma once

#include "job/process.h"
#include "job/worker_main.h"

namespace baton {

// Starts `worker.rank`'s worker of `worker.attempt` as a child in `group`.
void SpawnWorker(ChildProcesses& group, const WorkerArgs& worker);

// Runs `worker.rank`'s agent from attempt 0 until the job ends (see above); returns the process
// exit code. Stop signals (core/stop_signals.h) go on to the worker. Call it from the thread that
// lives as long as the agent: children die with the thread that started them (PR_SET_PDEATHSIG).
int RunAgent(const WorkerArgs& worker);

}  // namespace baton
