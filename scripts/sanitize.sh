#!/usr/bin/env bash
# make sanitize, and CI: the test suite under sanitizers, in two builds with CUDA off (README,
# "Using it").
#   build-asan  ASan + UBSan, every target but the benchmarks no test runs (bench/CMakeLists.txt);
#               runs every test but the GPU ones, the GPU bundle's, the lint and the AVX2
#               emulation (qemu runs no ASan binary): the unit tests, the
#               fuzzers, and the integration tests that start processes (workers, launchers,
#               mpirun and srun stand-ins: signals, kills and restarts). The two `slow` ones (300
#               steps of learning, the precision comparison: the same code as the others, for 5 to
#               10 minutes each under ASan), six sweeps and the two reference scripts (below)
#               only with BATON_SANITIZE_SLOW=1.
#   build-tsan  TSan; the tests of everything that has threads: the coordinator's server and
#               client, the communicators (Gloo's wrappers, the host-staged and fake ones), the
#               pipeline engine and the in-process runs that drive it with a thread per stage,
#               the CPU backend's thread pool and GEMM engine, signals under the pool, the
#               launcher's monitor.
# Every report fails the run: it halts the process that made it (a test or a worker that test
# started) and is written to a file under BUILD/sanitizer-reports; the script ends with a non-zero
# status, printing them, if any is there, also where the test itself passed (a worker's report in
# a test that expects the worker to fail).
#
#   scripts/sanitize.sh [asan|tsan|all] [CTEST_REGEX]     (default: all, every test)
#
# Environment: JOBS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=${1:-all}
regex=${2:-}
jobs=${JOBS:-2}
# The two slow ones, by name: gtest_discover_tests gives every discovered test the label
# "integration" only, not the second one tests/CMakeLists.txt asks for. And sweeps that run the
# same code as their neighbours many times over (about 480 s of CI's ASan run; 107 natively, in
# make test, which runs them all): two --fit searches (FitTest's other cases stay), two
# schedule-property sweeps (PropertiesTest's other cases stay), the memory plan over every
# precision, policy and schedule (MemoryPlannerTest's other cases stay), ZeRO checkpoints resumed
# onto every layout (ReplicaTest.ZeroThree... resumes ZeRO-1 and -3 checkpoints across levels and
# layouts); and the two scripts that compare exports and evaluations with the independent
# plain-Python GPT-2 (its numbers, not Baton's memory, are what they add: export, eval and
# compress run under ASan in OperationsTest and LlamaOperationsTest).
slow_names='PrecisionTest\.|LearningTest\.'
slow_names+='|FitTest\.ReplicasWithZeroOneComeAfterStagesWhenMoreProcessesAreAllowed$'
slow_names+='|FitTest\.AnImpossibleBudgetFailsNamingTheSmallestPeakReachable$'
slow_names+='|PropertiesTest\.ReceivesPostedEarlyKeepTheProgramValidAndItsTimeline$'
slow_names+='|PropertiesTest\.EveryRendezvousSafeScheduleDryRunsWithBlockingAndWithBufferedSends$'
slow_names+='|MemoryPlannerTest\.PredictsTheLedgerForEveryPrecisionPolicyAndSchedule$'
slow_names+='|ReplicaTest\.ZeroCheckpointsHoldTheWholeStateAndResumeOntoAnyLayout$'
slow_names+='|structure_reference$|eval_reference$'
slow=(-E "^($slow_names)")
if [ "${BATON_SANITIZE_SLOW:-0}" = 1 ]; then slow=(); fi
filter=()
if [ -n "$regex" ]; then filter=(-R "$regex"); fi

configure() {  # configure DIR SANITIZER
  BATON_CMAKE_ARGS="${BATON_CMAKE_ARGS:-} -DBATON_WITH_CUDA=OFF -DBATON_SANITIZE=$2" \
    scripts/setup.sh "$1"
}

# A fresh, empty report folder for a build: the sanitizers write one file per reporting process.
reports_dir() {
  local dir="$root/$1/sanitizer-reports"
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "$dir"
}

# Fails (printing them) when a run left reports; `ctest_status` is the suite's own. Reports are
# looked for twice: as files under DIR, and in ctest's log of every test's output
# (Testing/Temporary/LastTest.log), where a worker's report lands when the sanitizer writes it to
# stderr after all (UBSan's "runtime error" does, whatever log_path says).
check_reports() {  # check_reports DIR NAME CTEST_STATUS
  local dir=$1 name=$2 status=$3
  local files marks='runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer|WARNING: ThreadSanitizer'
  local log
  log="$(dirname "$dir")/Testing/Temporary/LastTest.log"
  if [ -f "$log" ] && grep -Eq "$marks" "$log"; then
    grep -En "$marks" "$log" | head -50 > "$dir/in-test-output.txt"
  fi
  files=$(find "$dir" -type f | sort)
  if [ -n "$files" ]; then
    echo "sanitize: $name left $(echo "$files" | wc -l) report file(s) in $dir:" >&2
    for f in $files; do
      echo "---- $f" >&2
      head -c 20000 "$f" >&2
    done
    return 1
  fi
  if [ "$status" -ne 0 ]; then
    echo "sanitize: $name: tests failed (exit $status), no sanitizer report" >&2
    return "$status"
  fi
  echo "sanitize: $name: every test passed, no report"
}

run_asan() {
  configure build-asan address
  cmake --build build-asan -j "$jobs"
  local reports status=0
  reports=$(reports_dir build-asan)
  # Leaks: Open MPI's runtime and mpirun leak by design (TOOLCHAIN.md), and every process the
  # tests start is checked by the same options, so leak checking is off; every other report halts
  # the process with a non-zero exit, which fails its test, and leaves its file.
  # verify_asan_link_order=0: SignalAtStartUpTest preloads a library (tests/sigterm_at_load.cc)
  # before ASan's runtime, which the executable links; the runtime still intercepts first.
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=66:verify_asan_link_order=0:log_path=$reports/asan \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=66:log_path=$reports/ubsan \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" \
      -LE "gpu|bundle|lint|avx2" "${slow[@]}" "${filter[@]}" || status=$?
  check_reports "$reports" "ASan+UBSan" "$status"
}

# The tests of everything with threads of its own (see the top), and their executables.
tsan_targets=(comm_test gloo_communicator_test shared_memory_test host_staged_communicator_test
  coordinator_test planner_test worker_test kernels_test signal_burst_test launcher_test)
tsan_tests='^(CoordinatorTest|Cpu/CommunicatorTest|FakeCommunicatorTest|GlooCommunicatorTest'
tsan_tests+='|GlooPairTest|RankTableTest|HostStagedCommunicatorTest|InProcess|LlamaInProcess'
tsan_tests+='|ScheduleRuntimeTest|StageEngineTest|ThreadPoolTest|ParallelForTest|GemmEngineTest'
tsan_tests+='|SignalBurstTest|MonitorTest|WaiterPoolTest|SharedMemoryTest)'

run_tsan() {
  configure build-tsan thread
  cmake --build build-tsan -j "$jobs" --target "${tsan_targets[@]}"
  local reports status=0
  reports=$(reports_dir build-tsan)
  # OpenBLAS and oneDNN run their GEMMs on libgomp's threads, which TSan cannot see synchronise
  # (libgomp is not instrumented): one OpenMP thread each, so that every thread TSan watches is
  # one of Baton's own (the CPU backend's pool, the stages, gRPC's and Gloo's).
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:log_path=$reports/tsan:suppressions=$root/scripts/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" -R "${regex:-$tsan_tests}" ||
    status=$?
  check_reports "$reports" "TSan" "$status"
}

case "$mode" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan && run_tsan ;;
  *) echo "usage: $0 [asan|tsan|all] [CTEST_REGEX]" >&2; exit 2 ;;
esac
