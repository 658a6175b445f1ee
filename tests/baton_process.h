// The one harness for running real `baton` processes: the integration tests under tests/ and the
// benchmarks under bench/ both use it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace baton::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// The baton binary under test (BATON_BINARY, set by CMake).
std::string BatonBinary();
// `baton` with the tests' fault hooks (tests/fault_injection.h: BATON_TEST_STALL,
// BATON_TEST_MESH_GATE), which the `baton` binary does not have.
std::string BatonFaultsBinary();
std::string SourceDir();
// Runs `command` (a shell command line) to completion and captures its output.
CommandResult RunShell(const std::string& command);
// Runs `argv` (no shell) to completion with stdout and stderr into the file `log_path`; returns
// its exit code, or 128 + the signal that killed it. Throws baton::Error when it cannot start.
int RunLogged(const std::vector<std::string>& argv, const std::string& log_path);
// The last `count` lines of a file, each prefixed "  | " (a failed run's log, for its error).
std::string LastLines(const std::string& path, size_t count);
// Runs `baton ARGS...`; args are shell-quoted. Under BATON_WORKER_PREFIX (job/agent.cc: words
// before every worker's command line, e.g. "/usr/bin/qemu-x86_64 -cpu Haswell") the launcher
// runs through it too, so that the whole job runs on the one (emulated) CPU.
CommandResult RunBaton(const std::vector<std::string>& args);
// A fresh temporary directory for one test, removed with everything in it when the test process
// exits (BATON_KEEP_TEST_DIRS=1 keeps them, to look at a failure).
std::string TempDir(const std::string& name);
nlohmann::json ReadJson(const std::string& path);
// Losses of every step of a report, in order.
std::vector<double> Losses(const nlohmann::json& report);

// Runs `command` (from the source dir) in the background with its output in `log`, followed by
// a line "exit=CODE"; returns the pid of the subshell whose child is the command.
int Background(const std::string& command, const std::string& log);
std::string ReadFile(const std::string& path);
// Whether `output` holds a worker's log line ("[rank 3]" before it knows its stage, "[stage 1]"
// or "[stage 1 replica 0]" after): a check that the launcher refused before any worker started.
bool AnyWorkerLogged(const std::string& output);
// Waits up to `seconds` for `text` to appear in the file.
bool WaitFor(const std::string& path, const std::string& text, int seconds);
std::vector<int> ChildPids(int parent);
// Sends `signal` to the one process `shell` (Background's pid) runs, e.g. a launcher (SIGKILL:
// its workers die with it, PR_SET_PDEATHSIG), and waits up to `seconds` for the log's "exit="
// line; returns the log. Throws baton::Error when the shell has not exactly one child or no exit
// line came.
std::string SignalTheChildOf(int shell, int signal, const std::string& log, int seconds);
// The "resumed from ..." line of a gpt-tiny run that resumes from `checkpoint` (a checkpoints
// root or step folder) with its outputs in `dir`, stopped once it has printed it; "" if it never
// did.
std::string ResumedFromLine(const std::string& checkpoint, const std::string& dir);
// Every process below `root` (its children, theirs, ...), not `root` itself.
std::vector<int> DescendantPids(int root);
// Whether `pid` is a process that has not exited: gone, or a zombie not yet reaped (as processes
// whose parent exited first are, until init reaps them), is not running.
bool Running(int pid);
// The names under /dev/shm of the shared-memory segments process `pid` created and that still
// have a name (comm/shared_memory.h: a rank's segment loses its name once its peers mapped it).
std::vector<std::string> SharedMemoryNamesOf(int pid);
// The worker process of `rank` below `shell` (Background's pid): a child of the local launcher,
// or under mpirun of the rank's agent; -1 if there is none (yet). Only this test's own processes
// are ever found.
int WorkerPid(int shell, int rank);

}  // namespace baton::testing
