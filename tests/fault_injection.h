// Fault injection for the integration tests, linked into the `baton_faults` binary only (the
// `baton` binary has none): job/fault_hooks.h's hooks, each doing nothing unless its environment
// variable is set.
//
//   BATON_TEST_STALL=RANK:STEP  that rank stops answering its peers (it sleeps, heartbeats still
//                               running) at the start of that step: hang diagnosis
//                               (tests/failure_test.cc, tests/replica_test.cc).
//   BATON_TEST_HOLD_CHECKPOINT=STEP:DIR
//                               rank 0, having written its first layer file of step STEP's
//                               checkpoint, writes DIR/held and waits there for good (its thread:
//                               a background write's own): a test kills the job mid-write
//                               (tests/operations_test.cc).
//   BATON_TEST_MESH_GATE=DIR    each rank writes DIR/published-<rank> with the Gloo addresses it
//                               published for the first mesh round, and reads no other rank's
//                               addresses of that round before DIR/open exists: a test gets to
//                               connect to the ranks' listening ports while they wait
//                               (tests/failure_test.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/kv_store.h"
#include "job/fault_hooks.h"

namespace baton {

// BATON_TEST_STALL: called by world rank `rank` at the start of step `step`.
void MaybeStall(int rank, int64_t step);

// BATON_TEST_HOLD_CHECKPOINT: called by world rank `rank` after each checkpoint file of `step`.
void MaybeHoldCheckpoint(int rank, int64_t step);

// BATON_TEST_MESH_GATE: `inner` behind the gate for the mesh round whose keys start with
// `prefix` ("gloo/<attempt>"); null when the variable is not set.
std::unique_ptr<KvStore> MaybeGateMesh(KvStore& inner, const std::string& prefix, int rank);

// Both, as the worker process's fault hooks.
FaultHooks EnvironmentFaultHooks();

}  // namespace baton
