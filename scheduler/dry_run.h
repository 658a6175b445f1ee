// Dry run: executes every stage's action list against the others, without data, to find deadlocks,
// broken dependencies and mismatched messages, and (with costs) when each action runs.
//
// Shared engine of Validate() and Simulate(); callers normally use those. Preconditions, checked by
// Validate() before it calls DryRun(): every action's stage is its row's stage and its chunk and
// micro-batch are in range.
//
// Dependencies (virtual stage j, micro-batch k; V = stages * chunks):
//   F(j,k)    needs the activation of F(j-1,k)            (none for j = 0)
//   B/I(j,k)  needs F(j,k) on the same stage, and the input gradient of B/I(j+1,k) (none for j =
//   V-1) W(j,k)    needs I(j,k) on the same stage
// A producer on the same stage (interleaved with one stage) must simply come earlier in its list.
// A producer on another stage is reached:
//   - in a schedule with SEND/RECV actions, through a RECV on this stage before the consumer, whose
//     message the producer's stage SENDs after the producer;
//   - in a compute-only schedule (no SEND/RECV anywhere), directly: the consumer waits until the
//     producer has run (implicit, instant-to-post messaging).
// Messages have no tags (like NCCL): on each ordered pair of stages the n-th RECV takes the n-th
// SEND, and must name the same message (kind, micro-batch, virtual stage).
//
// A RECV posts a receive and never blocks its stage (the runtime's irecv: Gloo's recv into an
// unbound buffer, NCCL's recv on the link's own stream); the compute that consumes the data waits
// until its message has arrived. So a RECV placed early (PostReceivesEarly, communication.h) lets
// a blocking SEND complete sooner without holding its own stage.
//
// Timing: actions start as soon as their stage is free and their inputs are there; a compute takes
// its cost; a SEND or RECV takes its `post` cost (0 by default); a message is usable
// `communication` after its SEND starts.
#pragma once

#include <string>
#include <vector>

#include "scheduler/costs.h"
#include "scheduler/schedule.h"

namespace baton {

// When a SEND or RECV blocks its stage during the dry run.
enum class CommSemantics {
  // A SEND is posted and never blocks (buffered / async isend). What Baton's runtime does when
  // sends complete asynchronously (isend/irecv, wait when the data is needed).
  kAsync,
  // A SEND blocks until the receiver has posted the matching RECV, and completes then (a send that
  // completes only once its receive is posted: NCCL, large Gloo messages, and the engine's
  // sends-complete-before-compute mode). Stricter: every schedule that passes it passes kAsync.
  kRendezvous,
};

struct DryRunResult {
  bool ok = true;
  std::string reason;  // why it failed; empty when ok
  int stage = -1;      // the offending action's stage, -1 when ok
  int step = -1;
  // start[r][i] / end[r][i]: when action i of stage r ran (complete only when ok).
  std::vector<std::vector<double>> start;
  std::vector<std::vector<double>> end;
};

DryRunResult DryRun(const Schedule& schedule, CommSemantics semantics, const Costs& costs = {});

}  // namespace baton
