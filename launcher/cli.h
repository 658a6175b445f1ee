// The `baton` command line: parses argv and runs the subcommand, returning the exit code. The
// `baton` binary's main calls it and nothing else; the integration tests' `baton_faults` binary
// (tests/baton_faults_main.cc) first sets fault hooks (job/fault_hooks.h).
#pragma once

namespace baton {

// Blocks the stop signals first (core/stop_signals.h): call it before any thread exists.
int BatonMain(int argc, char** argv);

}  // namespace baton
