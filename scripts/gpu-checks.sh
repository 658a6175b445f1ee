#!/usr/bin/env bash
# The GPU checks, on binaries that are already built: the one list of checks that both
# `make gpu-check` (scripts/gpu-check.sh, from a build tree) and the GPU bundle's runner
# (scripts/run-gpu-checks.sh, from an unpacked bundle) run (docs/cuda.md):
#   1. the GPU tests: every CUDA kernel against the CPU backend (cuda_backend_test), and the NCCL
#      transport (nccl_communicator_test); each normalised error vs the CPU goes to the summary;
#   2. the CUDA unit tests (allocator on a fake device, backend factory, run-report figures);
#      these also run without a GPU;
#   3. the device, its dense bf16 peak, and the bf16 GEMM rate the CUDA backend reaches;
#   4. configs/gpt-tiny.yaml (and configs/llama-tiny.yaml and configs/moe-tiny.yaml, 1 and 2
#      stages) on one GPU, 1 stage,
#      2 stages sharing it (1F1B, and the V-shaped zb-v), 1 stage x 2
#      data-parallel replicas sharing it (with and without ZeRO-1; the replicas' exchange goes
#      through the host on one GPU, over NCCL on two), and 1 stage x 2 tensor ranks sharing it
#      (with and without sequence parallelism), against the CPU run: step-by-step losses
#      must agree (fp32, exact f32 GEMMs) to a relative 2e-3;
#   5. the benchmark: configs/gpt2-124m.yaml in bf16, 1 stage and 2 stages sharing the GPU:
#      tokens/s, MFU and per-stage peak memory (bench/README.md, GPU section).
#
#   scripts/gpu-checks.sh --bin DIR --out DIR [--root DIR] [--corpus FILE] [--budget S]
#                         [--dry-run] [--no-gpu]
#   scripts/gpu-checks.sh --list-binaries         the binaries the checks run, as build-tree paths
#   scripts/gpu-checks.sh --make-corpus FILE [--root DIR]   write the generated text corpus
#
#   --bin DIR     baton, gpu_bench and the test binaries, side by side
#   --out DIR     logs, reports and summary.txt (the figures and each check's outcome)
#   --root DIR    where configs/ is (default: this script's checkout, or its unpacked bundle)
#   --corpus FILE the text corpus; default: generated from --root's sources into --out
#   --budget S    stop starting checks after S seconds, so the whole run fits a lease (300)
#   --dry-run     print each planned check and skip it
#   --no-gpu      skip the checks that need a GPU, as on a machine without one
# Environment: BENCH_STEPS (gpt2-124m steps, default 20, the first 3 not measured), TINY_STEPS
# (default 20), BATON_PEAK_TFLOPS (peak for MFU on a device missing from the table).
#
# Without a GPU (no nvidia-smi GPU and no /dev/nvidia0, or --no-gpu) each GPU check prints
# "skipped: no GPU"; the CPU-only check 2 still runs. Every check runs even if an earlier one
# failed; the exit status is 1 if any failed, 2 on a usage error, 0 otherwise (skips included).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=""
out=""
corpus=""
budget=300
dry_run=0
no_gpu=0
bench_steps=${BENCH_STEPS:-20}
tiny_steps=${TINY_STEPS:-20}

# The binaries, as paths in a build tree (gpu-check.sh links them, gpu-bundle.sh packs them).
binaries=(baton bench/gpu/gpu_bench kernels/cuda/cuda_backend_test comm/nccl_communicator_test
  kernels/cuda/cuda_allocator_test kernels/backend_factory_test bench/gpu/gpu_bench_test)
gpu_tests=(cuda_backend_test nccl_communicator_test)
unit_tests=(cuda_allocator_test backend_factory_test gpu_bench_test)

usage() {
  sed -n '/^#   scripts\/gpu-checks.sh --bin/,/^#   --no-gpu/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

# The corpus: this repository's own sources and docs (byte tokens are valid GPT-2 ids).
make_corpus() {
  (cd "$root" && find docs kernels config model worker data checkpoint scheduler comm core \
    launcher -type f \( -name '*.md' -o -name '*.h' -o -name '*.cc' \) -print0 | sort -z |
    xargs -0 cat) >"$1"
}

mode=checks
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=${2:?--bin needs a folder}; shift ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    --root) root=${2:?--root needs a folder}; shift ;;
    --corpus) corpus=${2:?--corpus needs a file}; shift ;;
    --budget) budget=${2:?--budget needs seconds}; shift ;;
    --dry-run) dry_run=1 ;;
    --no-gpu) no_gpu=1 ;;
    --list-binaries) mode=list ;;
    --make-corpus) mode=corpus; corpus=${2:?--make-corpus needs a file}; shift ;;
    -h | --help) usage ;;
    *) echo "gpu-checks: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
case $mode in
  list) printf '%s\n' "${binaries[@]}"; exit 0 ;;
  corpus) make_corpus "$corpus"; exit ;;
esac
if [ -z "$bin" ] || [ -z "$out" ]; then usage; fi
case $budget in '' | *[!0-9]*) echo "gpu-checks: --budget takes whole seconds" >&2; usage ;; esac
bin=$(cd "$bin" && pwd) || exit 2
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
baton_bin="$bin/baton"
gpu_bench="$bin/gpu_bench"
summary="$out/summary.txt"
: >"$summary"
failures=()
has_gpu=0
if [ "$no_gpu" = 0 ] && { nvidia-smi -L 2>/dev/null | grep -q '^GPU' || [ -e /dev/nvidia0 ]; }; then
  has_gpu=1
fi

# ---- bookkeeping: each check opens with `check`, and ends in `passed`, `failed` or `skipped`.
current=""
current_ok=1
note() { printf '%s\n' "$@" | tee -a "$summary"; }
check() {
  current=$1
  current_ok=1
  printf '\n==== %s  [%ds]\n' "$current" "$SECONDS"
}
# Records a failure of the current check (and goes on).
fail() {
  current_ok=0
  failures+=("$current: $1")
  printf 'FAILED: %s\n' "$1"
}
# The check's line in the summary, then its figures (lines given, indented).
finish() {
  local status=passed
  [ "$current_ok" = 1 ] || status=FAILED
  note "$current: $status"
  [ $# -eq 0 ] || printf '    %s\n' "$@" | tee -a "$summary"
}
# Skips the current check with a reason, unless it may run: returns 0 when it should run.
# `may_run gpu|cpu "what it would run"`
may_run() {
  local needs=$1
  shift
  local reason=""
  if [ "$needs" = gpu ] && [ "$has_gpu" = 0 ]; then
    reason="no GPU"
  elif [ "$dry_run" = 1 ]; then
    reason="dry run"
  elif [ "$SECONDS" -ge "$budget" ]; then
    reason="out of time (budget ${budget}s)"
    failures+=("$current: not run, out of time")
  fi
  [ -z "$reason" ] && return 0
  printf 'planned: %s\n' "$@"
  note "$current: skipped: $reason"
  return 1
}
# The seconds a step may take: its own limit, cut to what is left of the budget (at least 10).
limit() {
  local left=$((budget - SECONDS))
  [ "$left" -lt 10 ] && left=10
  [ "$1" -lt "$left" ] && left=$1
  echo "$left"
}

note "gpu checks: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n), binaries in $bin"
if [ "$has_gpu" = 1 ]; then
  note "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    2>/dev/null | head -n 1)"
else
  note "GPU: none$([ "$no_gpu" = 1 ] && echo ' (--no-gpu)')"
fi

# ---- 1. GPU tests
# Runs a gtest binary directly (not through ctest: its paths are the build tree's) into
# $out/NAME.log; prints the outcome line.
run_gtest() {
  local name=$1 seconds=$2 status
  timeout -k 15 "$seconds" "$bin/$name" --gtest_brief=1 >"$out/$name.log" 2>&1
  status=$?
  local passed skipped failed
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out/$name.log")
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out/$name.log")
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out/$name.log")
  outcome="$name: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
  [ "$status" = 124 ] && outcome="$outcome, timed out after ${seconds}s"
  skipped_count=${skipped:-0}
  if [ "$skipped_count" -gt 0 ]; then
    # gtest prints "file:line: Skipped" and then the reason.
    outcome="$outcome (skipped: $(grep -A 1 ': Skipped$' "$out/$name.log" |
      grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c | sort -rn | head -n 1 | sed 's/^ *//'))"
  fi
  echo "$outcome"
  [ "$status" = 0 ]
}
# Worst normalised error vs the CPU per dtype (a test's last name part: f32, bf16, f16) from
# the tests' "[ vs CPU   ] Suite.Test ERROR" lines; every comparison goes to kernel-errors.txt.
kernel_errors() {
  [ -f "$out/cuda_backend_test.log" ] || return 0
  sed -n 's/^\[ vs CPU   \] //p' "$out/cuda_backend_test.log" | sort -k2,2 -g -r \
    >"$out/kernel-errors.txt"
  awk '{ n = split($1, part, "/"); d = part[n];
         if (d != "f32" && d != "bf16" && d != "f16") d = "fixed dtype";
         count[d]++; if (!(d in worst) || $2 + 0 > worst[d] + 0) { worst[d] = $2; at[d] = $1 } }
       END { for (d in worst)
               printf "worst error vs CPU, %s: %s in %s (%d comparisons)\n",
                 d, worst[d], at[d], count[d] }' \
    "$out/kernel-errors.txt" | sort
}
check "1. GPU tests (${gpu_tests[*]})"
if may_run gpu "${gpu_tests[@]/%/ --gtest_brief=1}"; then
  lines=()
  for t in "${gpu_tests[@]}"; do
    run_gtest "$t" "$(limit 180)" || fail "$t (see $t.log)"
    lines+=("$outcome")
  done
  # Every kernel test needs one GPU (NCCL's two-rank test may skip on a one-GPU machine).
  grep -q '^cuda_backend_test: [0-9]* passed, 0 skipped' <<<"${lines[0]}" ||
    fail "cuda_backend_test skipped tests on a machine with a GPU"
  mapfile -t errors < <(kernel_errors)
  finish "${lines[@]}" "${errors[@]}"
fi

# ---- 2. CUDA unit tests (no GPU needed)
check "2. CUDA unit tests (${unit_tests[*]})"
if may_run cpu "${unit_tests[@]/%/ --gtest_brief=1}"; then
  lines=()
  for t in "${unit_tests[@]}"; do
    BATON_SOURCE_DIR=$root run_gtest "$t" "$(limit 120)" || fail "$t (see $t.log)"
    lines+=("$outcome")
  done
  finish "${lines[@]}"
fi

# ---- 3. device and GEMM rate
check "3. device, dense bf16 peak, bf16 GEMM rate"
if may_run gpu "gpu_bench device --gemm 8192 --repeats 20"; then
  timeout -k 15 "$(limit 90)" "$gpu_bench" device --gemm 8192 --repeats 20 \
    >"$out/device.log" 2>&1 ||
    fail "gpu_bench device (see device.log)"
  cat "$out/device.log"
  mapfile -t lines <"$out/device.log"
  finish "${lines[@]}"
fi

# ---- the generated text corpus (the runs of checks 4 and 5 read it)
corpus_ready() {
  [ -n "$corpus" ] && [ -f "$corpus" ] && return 0
  corpus=${corpus:-$out/corpus.txt}
  make_corpus "$corpus"
  printf 'corpus: %s bytes of repository text\n' "$(wc -c <"$corpus")"
}

# Runs `baton run` with a time limit, logging to $out/NAME.log; the report goes to $out/NAME.json.
run_baton() {
  local name=$1 seconds
  seconds=$(limit "$2")
  shift 2
  (cd "$root" && timeout -k 15 "$seconds" "$baton_bin" run "$@" --set "output.dir=$out/$name" \
    --report "$out/$name.json") >"$out/$name.log" 2>&1
  local status=$?
  tail -n 3 "$out/$name.log"
  return $status
}

# ---- 4. the GPU against the CPU, end to end: 1 stage, and 2 stages sharing the GPU
# The CPU reference runs 2 stages: on the CPU, 1 and 2 stages give bit-identical losses.
check "4. gpt-tiny fp32: CPU vs one GPU, 1 and 2 stages, 2 replicas, 2 tensor ranks ($tiny_steps steps)"
cuda_runs=0
if may_run gpu "baton run configs/gpt-tiny.yaml on the CPU (2 stages), then device.type=cuda" \
  "with 1 and 2 stages, and 1 stage x 2 replicas with and without ZeRO-1; gpu_bench" \
  "compare-losses, relative tolerance 2e-3"; then
  corpus_ready
  cuda_runs=1
  tiny=(configs/gpt-tiny.yaml --set "data.path=$corpus" --set data.format=text
    --set "train.steps=$tiny_steps")
  lines=()
  if run_baton tiny-cpu 120 "${tiny[@]}" --set parallel.stages=2 --set device.type=cpu \
    --set device.threads=4; then
    # The V-shaped zb-v: stage 0 holds the embedding and the head, and each stage hands
    # activations between its own two chunks on the device.
    # Two tensor ranks sharing the GPU run the vocab-parallel embedding and cross-entropy
    # kernels, with and without sequence parallelism. Every GPU run saves a background
    # checkpoint every 2 steps (output.async_checkpoint: device-to-host copies of the state).
    for layout in "1 1 0 1f1b 1 false" "2 1 0 1f1b 1 false" "2 1 0 zb-v 1 false" \
      "1 2 0 1f1b 1 false" "1 2 1 1f1b 1 false" "1 1 0 1f1b 2 false" "1 1 0 1f1b 2 true"; do
      read -r stages replicas zero schedule tensor sequence <<< "$layout"
      name="tiny-cuda-${stages}stage"
      [ "$replicas" = 1 ] || name="tiny-cuda-${stages}x${replicas}-zero${zero}"
      [ "$schedule" = 1f1b ] || name="$name-$schedule"
      [ "$tensor" = 1 ] || name="$name-tensor${tensor}"
      [ "$sequence" = false ] || name="$name-sp"
      if run_baton "$name" 120 "${tiny[@]}" --set "parallel.stages=$stages" \
        --set "parallel.replicas=$replicas" --set "parallel.zero=$zero" \
        --set "parallel.schedule=$schedule" --set "parallel.tensor=$tensor" \
        --set "parallel.sequence_parallel=$sequence" --set device.type=cuda \
        --set output.checkpoint_every=2 --set output.async_checkpoint=true; then
        # Exit 3: the run gave the CPU's exact bits, so it ran on the CPU.
        "$gpu_bench" compare-losses "$out/tiny-cpu.json" "$out/$name.json" --tolerance 2e-3 \
          --require-difference 1 >"$out/$name.compare" 2>&1
        case $? in
          0) ;;
          3)
            fail "$name: device.type=cuda ran on the CPU (bit-identical losses)"
            cuda_runs=0
            ;;
          *) fail "$name: GPU losses differ from the CPU's" ;;
        esac
        cat "$out/$name.compare"
        lines+=("$stages stage(s) x $replicas replica(s) x $tensor tensor rank(s), zero $zero, $schedule, sequence parallel $sequence: $(sed "s|$out/||g" "$out/$name.compare" | tr '\n' ' ')")
      else
        fail "$name (see $name.log)"
      fi
    done
  else
    fail "gpt-tiny CPU reference run (see tiny-cpu.log)"
  fi
  # Llama (RMSNorm, rotary, SwiGLU, grouped-query attention: the CUDA kernels of llama.cu) and its
  # experts (model.moe: the router read back to the host, moe.cu's dispatch and combine, one
  # cuBLAS GEMM per expert) the same way: the CPU's 2 stages against one GPU with 1 and 2 stages.
  for kind in llama moe; do
    run=("configs/$kind-tiny.yaml" --set "data.path=$corpus" --set data.format=text
      --set "train.steps=$tiny_steps")
    if run_baton "$kind-cpu" 120 "${run[@]}" --set parallel.stages=2 --set device.type=cpu \
      --set device.threads=4; then
      for stages in 1 2; do
        name="$kind-cuda-${stages}stage"
        if run_baton "$name" 120 "${run[@]}" --set "parallel.stages=$stages" \
          --set device.type=cuda; then
          "$gpu_bench" compare-losses "$out/$kind-cpu.json" "$out/$name.json" --tolerance 2e-3 \
            --require-difference 1 >"$out/$name.compare" 2>&1 ||
            fail "$name: GPU losses differ from the CPU's (or ran on the CPU)"
          cat "$out/$name.compare"
          lines+=("$kind $stages stage(s): $(sed "s|$out/||g" "$out/$name.compare" | tr '\n' ' ')")
        else
          fail "$name (see $name.log)"
        fi
      done
    else
      fail "$kind-tiny CPU reference run (see $kind-cpu.log)"
    fi
  done
  finish "${lines[@]}"
fi

# ---- 5. gpt2-124m benchmark
# The largest device memory in use while a run is going (nvidia-smi samples every 200 ms):
# what the GPU really holds (CUDA contexts, the caching allocators' reserve, NCCL buffers).
sample_memory() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$out/$1.mem" \
    2>/dev/null &
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
    report_memory "$name" >"$out/$name.memory"
    local peak=()
    [ -n "${BATON_PEAK_TFLOPS:-}" ] && peak=(--peak-tflops "$BATON_PEAK_TFLOPS")
    "$gpu_bench" summary "$out/$name.json" --label "$label" --warmup 3 --gpus 1 "${peak[@]}" \
      >"$out/$name.summary" 2>&1 || fail "$label: summary check"
    cat "$out/$name.summary" "$out/$name.memory"
    mapfile -t -O "${#lines[@]}" lines < <(cat "$out/$name.summary" "$out/$name.memory")
  else
    report_memory "$name"
    fail "$label (see $name.log)"
  fi
}
check "5. gpt2-124m bf16 benchmark ($bench_steps steps each, 1 and 2 stages on one GPU)"
if may_run gpu "baton data prepare (corpus -> byte tokens), then baton run configs/gpt2-124m.yaml" \
  "with 1 and 2 stages; gpu_bench summary: tokens/s, MFU, peak memory"; then
  if [ "$cuda_runs" -eq 1 ]; then
    corpus_ready
    lines=()
    "$baton_bin" data prepare "$corpus" "$out/gpt2-bytes.bin" >"$out/data-prepare.log" 2>&1 ||
      fail "data prepare (see data-prepare.log)"
    bench gpt2-1stage 1 "gpt2-124m bf16, 1 stage, 1 GPU"
    bench gpt2-2stages 2 "gpt2-124m bf16, 2 stages sharing 1 GPU"
    finish "${lines[@]}"
  else
    fail "not run: gpt-tiny showed device.type=cuda running on the CPU (or did not run)"
    finish
  fi
fi

# ---- summary
printf '\n==== done  [%ds]\n' "$SECONDS"
if [ ${#failures[@]} -eq 0 ]; then
  note "gpu checks: no failures in ${SECONDS}s (logs and reports in $out)"
  exit 0
fi
note "gpu checks: ${#failures[@]} failed in ${SECONDS}s (logs and reports in $out):"
printf '  - %s\n' "${failures[@]}" | tee -a "$summary"
exit 1
