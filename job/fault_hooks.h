// Seams through which a test build injects faults into the worker process. The `baton` binary
// sets none, so its workers run no test code; the integration tests' `baton_faults` binary
// (tests/fault_injection.h) sets them from environment variables before anything runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/kv_store.h"

namespace baton {

struct FaultHooks {
  // Called by world rank `rank` at the start of step `step`.
  std::function<void(int rank, int64_t step)> at_step_start;
  // Called by world rank `rank` after each layer file of step `step`'s checkpoint it wrote (on
  // the thread that wrote it: a background checkpoint's own).
  std::function<void(int rank, int64_t step)> after_checkpoint_file;
  // The store the transport's mesh round (keys starting with `prefix`, "gloo/<attempt>") goes
  // through instead of `inner`; null: `inner` itself.
  std::function<std::unique_ptr<KvStore>(KvStore& inner, const std::string& prefix, int rank)>
      mesh_store;
};

// Set once, at the start of main, before any thread exists; read by the worker process.
void SetFaultHooks(FaultHooks hooks);
const FaultHooks& GetFaultHooks();

}  // namespace baton
