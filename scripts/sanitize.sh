#!/usr/bin/env bash
# make sanitize: the test suite under sanitizers, in two builds with CUDA off (README, "Using it").
#   build-asan  ASan + UBSan, every target; runs every test but the GPU ones, the GPU bundle's
#               and shellcheck: the unit tests, the fuzzers, and the integration tests that start
#               processes (workers, launchers, mpirun and srun stand-ins). The two `slow` ones
#               (300 steps of learning, the precision comparison: the same code as the others,
#               for 5 to 10 minutes each under ASan) only with BATON_SANITIZE_SLOW=1.
#   build-tsan  TSan; the communicator and coordinator tests, and the pipeline engine as
#               planner_test's in-process runs drive it (a thread per stage)
# A sanitizer report fails the test that triggered it (halt_on_error / exitcode).
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
slow="|slow"
if [ "${BATON_SANITIZE_SLOW:-0}" = 1 ]; then slow=""; fi
filter=()
if [ -n "$regex" ]; then filter=(-R "$regex"); fi

configure() {  # configure DIR SANITIZER
  BATON_CMAKE_ARGS="-DBATON_WITH_CUDA=OFF -DBATON_SANITIZE=$2" scripts/setup.sh "$1"
}

run_asan() {
  configure build-asan address
  cmake --build build-asan -j "$jobs"
  # Leaks: Open MPI's runtime and mpirun leak by design (TOOLCHAIN.md), and every process the
  # tests start is checked by the same options, so leak checking is off; every other report halts
  # the process with a non-zero exit, which fails its test.
  ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=66 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=66 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE "gpu|bundle|lint${slow}" \
      "${filter[@]}"
}

run_tsan() {
  configure build-tsan thread
  # Only the targets TSan checks: the communicators, the coordinator, and the pipeline engine,
  # which planner_test's in-process runs drive with one thread per stage.
  cmake --build build-tsan -j "$jobs" --target comm_test gloo_communicator_test \
    coordinator_test planner_test
  # OpenBLAS and oneDNN run their GEMMs on libgomp's threads, which TSan cannot see synchronise
  # (libgomp is not instrumented): one OpenMP thread each, so that every thread TSan watches is
  # one of Baton's own (the CPU backend's pool, the stages, gRPC's and Gloo's).
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp" \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" \
      -R "${regex:-^(CoordinatorTest|Cpu/CommunicatorTest|FakeCommunicatorTest|GlooCommunicatorTest|GlooPairTest|RankTableTest|InProcess)}"
}

case "$mode" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan && run_tsan ;;
  *) echo "usage: $0 [asan|tsan|all] [CTEST_REGEX]" >&2; exit 2 ;;
esac
