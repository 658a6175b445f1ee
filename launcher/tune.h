// `baton tune CONFIG`: profiles the config's layers on this machine, searches schedule x stages x
// replicas x micro-batches x checkpointing x cut under a memory budget (planner/tune.h), prints
// the ranked table and writes the best configuration as YAML that `baton run` takes unchanged
// (docs/memory.md, "Tuning").
#pragma once

#include <ostream>
#include <string>

#include "launcher/run.h"

namespace baton {

struct TuneCommandOptions {
  ConfigArgs config;
  std::string budget;     // --memory-budget: bytes per process ("60MiB"); empty: none
  int max_stages = 0;     // 0: max_processes
  int max_processes = 0;  // 0: this machine's cores / device.threads
  std::string out = "tuned.yaml";
  int repeats = 7;  // timed repetitions per measurement (after a warm-up)
  int top = 15;     // rows of the table
};

// Returns 0; throws baton::Error (bad arguments, nothing fits) naming the config file.
int TuneCommand(const TuneCommandOptions& options, std::ostream& out);

}  // namespace baton
