// Stop requests from asynchronous signals, received on one thread so that no signal ever
// interrupts a compute thread.
//
// A signal delivered to a thread running oneDNN's AVX-512 kernels corrupts the heap, even with a
// handler that only stores a flag (issue 37: one signal was enough for a 25-line program calling
// dnnl_sgemm). So every process of Baton calls InstallStopSignals() first thing in main(), before
// any thread exists: it blocks the stop signals in the calling thread, and every thread started
// after it (the kernels' pool, oneDNN's OpenMP team, gRPC's and Gloo's threads) inherits that
// mask; one thread receives them with sigwait() and sets the stop request.
//
// main() is late: the libraries' and the program's static constructors take about 0.1 s before
// it, and a stop signal then would kill the process by its default action. So the `baton` binary
// blocks them earlier still, with BlockStopSignals() from its .preinit_array (launcher/cli.cc),
// which glibc runs before any shared library's constructor and any static constructor: a stop
// signal from then on stays pending until the signal thread takes it. Only the dynamic loader's
// own work before it (mapping and relocating the libraries, a few milliseconds) is uncovered:
// no code of the program runs there.
//
//   - stop signals: SIGTERM (Slurm, mpirun, the launcher), SIGINT (Ctrl-C), SIGHUP (the terminal
//     went away; left ignored when it came in ignored, as under nohup), SIGUSR1 (Slurm's
//     `--signal=USR1@...` warning; what mpirun forwards without killing the job). Each asks for a
//     stop: the run finishes its step, writes a checkpoint and exits 0.
//   - SIGPIPE is ignored: a closed pipe on stdout (`baton run ... | tee log`, tee killed by the
//     same Ctrl-C; `| head`) fails the write instead of killing the process, and the launcher,
//     which polls OutputClosed(), stops the run as a stop signal would: checkpoint, exit 0.
//   - A child forked from any thread keeps the stop signals blocked across exec, so a signal that
//     reaches a worker before its own main() has run stays pending until its signal thread takes
//     it: a stop request is never lost, however early it comes. This is meant: the only programs
//     Baton starts are its own workers (job/process.h, the same binary), which take the blocked
//     signals with their own signal thread. A child that is not Baton would have to unblock them
//     between fork and exec.
//
// Thread-safety: everything here may be called from any thread. The signal thread touches only
// atomics (never the logger or the heap), so it is safe while the process exits.
#pragma once

#include <atomic>

namespace baton {

// Blocks the stop signals in the calling thread and sets their dispositions as InstallStopSignals
// does, and nothing else: no heap, no lock, no thread, only sigaction and pthread_sigmask, so it
// may run before anything else in the process (the `baton` binary's .preinit_array). A stop signal
// from then on stays pending until InstallStopSignals' thread takes it. Idempotent.
void BlockStopSignals();

// Blocks the stop signals in the calling thread, ignores SIGPIPE and starts the signal thread,
// which takes any that came while they were blocked. Idempotent; call it before any other thread
// starts.
void InstallStopSignals();

// True once a stop signal arrived (or RequestStop() was called).
bool StopRequested();

// The flag itself, for code that polls it without depending on this module (the trainer).
const std::atomic<bool>& StopFlag();

// The first stop signal received (SIGTERM, ...), 0 when none came; and how many came in all.
int StopSignal();
long StopSignalCount();

// Whether stdout or stderr is a pipe (or socket) whose reading end has closed.
bool OutputClosed();

// Asks for a stop as a signal would (tests, and code that decides to stop by itself).
void RequestStop();

}  // namespace baton
