#!/usr/bin/env bash
# The CPU-kind-dependent tests on an emulated AVX2-only CPU (Haswell: AVX2 and FMA, no AVX-512),
# where CI's CPU has AVX-512: qemu-x86_64 (user mode) reports that CPU's features through CPUID, so
# the row kernels' clones resolve to AVX2, oneDNN takes its avx2 paths, bf16 matrix products
# stage to f32 and AdamW8bit takes its gather paths, as on a real AVX2 machine. Runs the kernel,
# model, checkpoint and worker unit tests and the in-process 1-vs-p-stage bit-identity tests
# (each in one process), then the real-process memory prediction test with its launchers and
# workers under qemu too: qemu does not follow an exec, so the launcher starts its workers through
# BATON_WORKER_PREFIX (job/agent.cc) and the test starts the launcher through it
# (tests/baton_process.h); the other integration tests run natively only. Exits 77 (ctest:
# skipped) where qemu-x86_64 is absent or cannot hide AVX-512 (QEMU before 7.2 emulates no AVX2).
#
# Emulation speed differs by host far more than native speed (one in-process test took 20 s on
# one 2-core host and 60 s on another), so the runs share a budget of wall time,
# BATON_AVX2_BUDGET_S (default 300 s, inside ctest's 1200): most CPU-kind-dependent first (the
# kernels, the bf16 bit-identity runs), each run cut at what is left of it. The budget is short
# because ctest's serial tests (every real-process one) wait while this one holds a slot: on a
# 2-core host each second of it beyond the unit tests' own is a second of CI (600 s made the
# suite 5 minutes longer, and still ended inside model_test on a slow host). A run cut short, or
# not started, is reported as such, by name ("not finished within the budget"), and fails
# nothing; a test that fails does. Skipped (77) on a CPU without AVX-512: there the suite itself
# ran the AVX2 paths, natively.
#
#   scripts/avx2-emulation.sh [BUILD_DIR]     (default: build)
set -euo pipefail

build=${1:-build}
# Haswell less the CPUID bits user mode cannot give (qemu would warn about them once per thread).
cpu=Haswell,-pcid,-tsc-deadline,-x2apic,-hle,-invpcid,-rtm

if [ "$(uname -m)" != x86_64 ] || ! command -v qemu-x86_64 >/dev/null; then
  echo "avx2-emulation: skipped: needs qemu-x86_64 (Debian's qemu-user) on an x86-64 host"
  exit 77
fi

emulate() { qemu-x86_64 -cpu "$cpu" "$@"; }

host=$("$build/tests/cpu_kind_probe")
case "$host" in
  *"avx512f=1"*) ;;
  *)
    echo "avx2-emulation: skipped: this CPU ($host) has no AVX-512, so the suite ran the AVX2 paths natively"
    exit 77
    ;;
esac

features=$(emulate "$build/tests/cpu_kind_probe")
echo "avx2-emulation: qemu-x86_64 -cpu $cpu reports: $features"
case "$features" in
  *"avx2=1 fma=1 avx512f=0 avx512bw=0 avx512_bf16=0"*) ;;
  *)
    echo "avx2-emulation: skipped: this qemu does not present an AVX2-only CPU"
    exit 77
    ;;
esac

budget=${BATON_AVX2_BUDGET_S:-300}
failed=0
# Runs one emulated command within what is left of the budget: "passed", "FAILED", or cut short.
run() {
  local what=$1
  shift
  local left=$((budget - SECONDS)) start=$SECONDS rc=0
  if ((left < 10)); then
    echo "avx2-emulation: $what not run: the ${budget} s budget is spent (this host emulates slowly)"
    return
  fi
  # timeout signals its whole process group: a job's launcher and workers too.
  timeout --kill-after=20 "$left" "$@" || rc=$?
  if ((rc == 0)); then
    echo "avx2-emulation: $what passed in $((SECONDS - start)) s"
  elif ((rc == 124 || rc == 137)) && ((SECONDS - start >= left)); then
    echo "avx2-emulation: $what not finished within the ${budget} s budget (cut after $left s)"
  else
    echo "avx2-emulation: $what FAILED (exit $rc)"
    failed=1
  fi
}

# Binary and gtest filter, most CPU-kind-dependent first (the cheap core_test leads); kernels_test
# in three runs (emulated it takes minutes: qemu is ~200x slower on vector code), so that a budget
# cut still leaves whole runs reported: the kernels that dispatch on the CPU kind
# (16-bit products, the GEMM engines, the row kernels' clones, 8-bit state), the rest but
# attention, then attention (its GEMMs and rows are the first run's).
kernel_kinds='Formats/*:AllTransposes/*:GemmEngineTest.*:FastMathTest.*:AdamW8bitTest.*:QuantMapTest.*'
kernel_kinds+=':LedgerTest.*:DeterminismTest.*'
attention='AttentionTest.*:CachedAttentionTest.*'
runs=(
  "core/core_test" "*"
  "kernels/backend_factory_test" "*"
  "kernels/kernels_test" "$kernel_kinds"
  "planner/planner_test" "InProcessTest.Bf16IsBitIdenticalAcrossThreadAndStageCounts:InProcessTest.CheckpointingEveryLayerAndSelectiveAreBitIdenticalToNone"
  "kernels/kernels_test" "*:-$kernel_kinds:$attention"
  "kernels/kernels_test" "$attention"
  "model/model_test" "*"
  "worker/worker_test" "*"
  "checkpoint/checkpoint_test" "*"
  "planner/planner_test" "InProcess*:ScheduleRuntimeTest.*:-InProcessTest.Bf16IsBitIdenticalAcrossThreadAndStageCounts:InProcessTest.CheckpointingEveryLayerAndSelectiveAreBitIdenticalToNone"
)
for ((i = 0; i < ${#runs[@]}; i += 2)); do
  binary=${runs[i]} filter=${runs[i + 1]}
  run "$binary ($filter)" qemu-x86_64 -cpu "$cpu" "$build/$binary" --gtest_filter="$filter" \
    --gtest_brief=1
done
# Whole jobs on the emulated CPU: the launcher predicts and the workers measure on it.
run "tests/memory_prediction_test (whole jobs)" \
  env BATON_WORKER_PREFIX="$(command -v qemu-x86_64) -cpu $cpu" \
  "$build/tests/memory_prediction_test" --gtest_brief=1
exit "$failed"
