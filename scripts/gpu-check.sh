#!/usr/bin/env bash
# `make gpu-check`: everything a GPU session checks, in one command that fits an 8-minute lease on
# one H200 (docs/cuda.md):
#   1. configure and build the CUDA variant (BUILD_DIR, default build-gpu; -j JOBS, default 16);
#   2. the GPU tests: ctest -L gpu (each CUDA kernel against the CPU backend);
#   3. the device, its dense bf16 peak, and the bf16 GEMM rate the CUDA backend reaches;
#   4. configs/gpt-tiny.yaml on one GPU, 1 stage and 2 stages sharing it, against the CPU run:
#      step-by-step losses must agree (fp32, exact f32 GEMMs) to a relative 2e-3;
#   5. the benchmark: configs/gpt2-124m.yaml in bf16, 1 stage and 2 stages sharing the GPU,
#      printing tokens/s, MFU and per-stage peak memory (bench/README.md, GPU section).
#
#   scripts/gpu-check.sh [BUILD_DIR]
#
# Environment: JOBS, BENCH_STEPS (gpt2-124m steps, default 20, the first 3 not measured),
# TINY_STEPS (default 20), BATON_PEAK_TFLOPS (peak for MFU on a device missing from the table),
# SKIP_BUILD=1 (rerun the checks on an existing build).
#
# Data is generated, so the check is self-contained: a text corpus made of this repository's
# own sources and docs. gpt-tiny reads it as bytes; for gpt2-124m (vocab 50257) `baton data
# prepare` turns it into a .bin of byte tokens (0..255, all valid GPT-2 ids). The losses are
# then not GPT-2 BPE losses, but every kernel and byte of memory is the same as with real data.
#
# Every step runs even if an earlier one failed (except the build); the summary at the end lists
# the failures and the exit status is 1 if there were any.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-gpu}
jobs=${JOBS:-16}
bench_steps=${BENCH_STEPS:-20}
tiny_steps=${TINY_STEPS:-20}
out="$build/gpu-check"
failures=()

section() { printf '\n==== %s  [%ds]\n' "$1" "$SECONDS"; }
fail() {
  failures+=("$1")
  printf 'FAILED: %s\n' "$1"
}
baton_bin="$build/baton"
gpu_bench="$build/bench/gpu/gpu_bench"

# ---- 1. build
section "1. configure and build $build (-j$jobs)"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_WITH_CUDA=ON || exit 1
fi
if [ ! -d "$build/kernels/cuda" ]; then
  echo "FAILED: $build was configured without the CUDA backend (is /usr/local/cuda/bin/nvcc there?)"
  exit 1
fi
# Everything: ctest -L gpu needs every gpu-labelled test (kernels/cuda, comm's NCCL tests).
if [ "${SKIP_BUILD:-0}" = 1 ]; then
  echo "SKIP_BUILD=1: using $build as it is"
else
  ninja -C "$build" -j "$jobs" || { echo "FAILED: build"; exit 1; }
fi
mkdir -p "$out"

# ---- 2. GPU tests
section "2. GPU tests (ctest -L gpu)"
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not available)"
ctest --test-dir "$build" -L gpu --output-on-failure -j 8 --timeout 300 || fail "ctest -L gpu"
ctest --test-dir "$build" -R 'CachingAllocator|BackendFactory|RunReport|DeviceTable' -j 8 \
  --output-on-failure >"$out/unit-tests.log" 2>&1 || fail "CUDA unit tests (see $out/unit-tests.log)"

# ---- 3. device and GEMM rate
section "3. device, dense bf16 peak, bf16 GEMM rate"
"$gpu_bench" device --gemm 8192 --repeats 20 || fail "gpu_bench device"

# ---- the generated text corpus
corpus="$out/corpus.txt"
find docs kernels model worker scheduler comm core launcher -type f \
  \( -name '*.md' -o -name '*.h' -o -name '*.cc' \) -print0 | sort -z | xargs -0 cat >"$corpus"
printf 'corpus: %s bytes of repository text\n' "$(wc -c <"$corpus")"

# Runs `baton run` with a time limit, logging to $out/NAME.log; the report goes to $out/NAME.json.
run_baton() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$baton_bin" run "$@" --set "output.dir=$out/$name" --report "$out/$name.json" \
    >"$out/$name.log" 2>&1
  local status=$?
  tail -n 3 "$out/$name.log"
  return $status
}

# ---- 4. the GPU against the CPU, end to end: 1 stage, and 2 stages sharing the GPU
# The CPU reference runs 2 stages: on the CPU, 1 and 2 stages give bit-identical losses.
section "4. gpt-tiny fp32: CPU vs one GPU, 1 stage and 2 stages ($tiny_steps steps)"
tiny=(configs/gpt-tiny.yaml --set "data.path=$corpus" --set data.format=text
  --set "train.steps=$tiny_steps")
cuda_runs=1
# Compares run NAME with the CPU's; returns 3 when it gave the CPU's bits (it ran on the CPU).
compare_with_cpu() {
  "$gpu_bench" compare-losses "$out/tiny-cpu.json" "$out/$1.json" --tolerance 2e-3 \
    --require-difference 1
}
if run_baton tiny-cpu 120 "${tiny[@]}" --set parallel.stages=2 --set device.type=cpu \
  --set device.threads=4; then
  for stages in 1 2; do
    name="tiny-cuda-${stages}stage"
    if run_baton "$name" 120 "${tiny[@]}" --set "parallel.stages=$stages" --set device.type=cuda; then
      compare_with_cpu "$name"
      case $? in
        0) ;;
        3)
          fail "$name: device.type=cuda ran on the CPU (bit-identical losses)"
          cuda_runs=0
          ;;
        *) fail "$name: GPU losses differ from the CPU's" ;;
      esac
    else
      fail "$name (see $out/$name.log)"
    fi
  done
else
  fail "gpt-tiny CPU reference run (see $out/tiny-cpu.log)"
fi

# ---- 5. gpt2-124m benchmark
section "5. gpt2-124m bf16 benchmark ($bench_steps steps each)"
"$baton_bin" data prepare "$corpus" "$out/gpt2-bytes.bin" >/dev/null || fail "data prepare"
# The largest device memory in use while a run is going (nvidia-smi samples every 200 ms):
# what the GPU really holds (CUDA contexts, the caching allocators' reserve, NCCL buffers).
sample_memory() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$out/$1.mem" 2>/dev/null &
  sampler=$!
}
report_memory() {
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  local max
  max=$(sort -n "$out/$1.mem" 2>/dev/null | tail -n 1)
  [ -n "$max" ] && printf '  device memory used (nvidia-smi, max during the run): %s MiB\n' "$max"
}
bench() {
  local name=$1 stages=$2 label=$3
  sample_memory "$name"
  if run_baton "$name" 180 configs/gpt2-124m.yaml --set "data.path=$out/gpt2-bytes.bin" \
    --set data.format=bin --set "train.steps=$bench_steps" --set "parallel.stages=$stages" \
    --set output.checkpoint_every=0 --set train.log_every=5; then
    report_memory "$name"
    "$gpu_bench" summary "$out/$name.json" --label "$label" --warmup 3 --gpus 1 ||
      fail "$label: summary check"
  else
    report_memory "$name"
    fail "$label (see $out/$name.log)"
  fi
}
if [ "$cuda_runs" -eq 1 ]; then
  bench gpt2-1stage 1 "gpt2-124m bf16, 1 stage, 1 GPU"
  bench gpt2-2stages 2 "gpt2-124m bf16, 2 stages sharing 1 GPU"
else
  echo "skipped: gpt2-124m would run on the CPU"
fi

# ---- summary
section "done"
if [ ${#failures[@]} -eq 0 ]; then
  echo "gpu-check: all passed in ${SECONDS}s (logs and reports in $out)"
  exit 0
fi
echo "gpu-check: ${#failures[@]} failed in ${SECONDS}s (logs and reports in $out):"
printf '  - %s\n' "${failures[@]}"
exit 1
