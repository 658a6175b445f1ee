#!/usr/bin/env bash
# bench/run.sh [BUILD]: every Baton benchmark, then the PyTorch reference, with all their figures
# (`make bench` runs it; bench/README.md defines each figure). Each benchmark checks its results
# and exits non-zero when one is wrong; this script runs them all and exits 1 if any failed.
#
#   kernels_bench   CPU kernel throughput (Google Benchmark)
#   train_bench     single-process tokens/s and MFU, gpt-tiny and gpt-small-cpu, 1 and 2 threads
#   pipeline_bench  1 vs 2 stages of real processes (each schedule, m = 8): tokens/s, speedup,
#                   measured and simulated bubble
#   memory_bench    peak bytes per stage and tokens/s per precision x checkpoint policy
#   planner         seconds for `baton plan` of gpt2-124m at 8 stages and for its --fit search
#   compress        gpt-small-cpu with f32/8-bit optimizer state, dense/pruned, and INT8: bytes,
#                   tokens/s, train and eval loss (bench/compress_bench.py)
#   structure       gpt-small-cpu dense, shared (all / attention / MLP) and low-rank C/4, and SVD
#                   after training: parameters, stage peaks, train and eval loss
#                   (bench/structure_bench.py)
#   parallel        gpt-small-cpu at (stages, replicas) = (1,1) (2,1) (1,2) (2,2): tokens/s,
#                   all-reduce time, every rank's peak beside the plan (bench/parallel_bench.py)
#   moe             moe-tiny beside llama-tiny (1 and 2 replicas), and at 2 replicas with
#                   parallel.experts 1 and 2: tokens/s, the all-to-all's seconds and share of the
#                   step, bytes, peaks beside the plan (bench/moe_bench.py)
#   checkpoint      gpt-small-cpu without checkpoints, with a synchronous and with a background
#                   one every 5 steps: step time and its cost (bench/checkpoint_bench.py)
#   generate        `baton generate` tokens/s with and without the KV cache, 200 new tokens on a
#                   gpt-tiny checkpoint with context 256 (bench/generate_bench.sh)
#   train_gpt.py    PyTorch CPU eager on the same models and threads (Debian's python3-torch),
#                   and its losses against Baton's for gpt-tiny
#
# Environment: BENCH_REPEATS (default 1) runs pipeline_bench and memory_bench that many times
# over, alternating, keeping each figure's fastest; BENCH_ONLY="train pipeline" runs a subset
# (kernels train pipeline memory planner compress structure parallel moe checkpoint generate
# pytorch). Time it on an idle machine: every figure is a speed.
set -uo pipefail

build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
repeats=${BENCH_REPEATS:-1}
only=${BENCH_ONLY:-kernels train pipeline memory planner compress structure parallel moe checkpoint generate pytorch}
python=/usr/bin/python3  # Debian's, which sees python3-torch (TOOLCHAIN.md)

wanted() { [[ " $only " == *" $1 "* ]]; }

cmake --build "$build" --target baton kernels_bench train_bench pipeline_bench memory_bench ||
  exit 1

work=$(mktemp -d "${TMPDIR:-/tmp}/baton_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
failed=()

run() {
  local name=$1
  shift
  echo
  echo "==== $name"
  if ! "$@"; then
    echo "==== $name FAILED"
    failed+=("$name")
  fi
}

echo "Baton benchmarks, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
wanted kernels && run kernels_bench "$build/bench/kernels_bench"
wanted train && run train_bench "$build/bench/train_bench" --repeats 3 --json "$work/train.json"
wanted pipeline && run pipeline_bench "$build/bench/pipeline_bench" --baton "$build/baton" \
  --repeats "$repeats"
wanted memory && run memory_bench "$build/bench/memory_bench" --baton "$build/baton" \
  --repeats "$repeats"

# The memory planner runs each rank's real trainer on a meta backend: how long planning takes.
# Checks: the plan has 8 stage rows with predicted bytes; --fit chooses a configuration.
planner_bench() {
  local config="$root/configs/gpt2-124m.yaml" start end plan_ms fit_ms out
  start=$(date +%s%N)
  out=$("$build/baton" plan "$config" --set parallel.stages=8 --format json) || return 1
  end=$(date +%s%N)
  plan_ms=$(((end - start) / 1000000))
  [[ $(grep -o '"predicted"' <<<"$out" | wc -l) -eq 8 ]] ||
    { echo "plan: expected 8 stages with predicted memory"; return 1; }
  start=$(date +%s%N)
  out=$("$build/baton" plan "$config" --set parallel.stages=4 --memory-budget 3GiB --fit) ||
    return 1
  end=$(date +%s%N)
  fit_ms=$(((end - start) / 1000000))
  grep -q '^chosen:' <<<"$out" || { echo "fit: no configuration chosen"; return 1; }
  grep '^chosen:\|^apply with:' <<<"$out"
  printf 'baton plan gpt2-124m, 8 stages: %d.%02d s\n' $((plan_ms / 1000)) $((plan_ms % 1000 / 10))
  printf 'baton plan gpt2-124m, 4 stages, --memory-budget 3GiB --fit: %d.%02d s\n' \
    $((fit_ms / 1000)) $((fit_ms % 1000 / 10))
}
wanted planner && run planner planner_bench
wanted compress && run compress_bench "$python" "$root/bench/compress_bench.py" "$build/baton"
wanted structure && run structure_bench "$python" "$root/bench/structure_bench.py" "$build/baton"
wanted parallel && run parallel_bench "$python" "$root/bench/parallel_bench.py" "$build/baton"
wanted moe && run moe_bench "$python" "$root/bench/moe_bench.py" "$build/baton"
wanted checkpoint && run checkpoint_bench "$python" "$root/bench/checkpoint_bench.py" \
  "$build/baton"
wanted generate && run generate_bench bash "$root/bench/generate_bench.sh" "$build"

if wanted pytorch; then
  if ! "$python" -c 'import torch' 2>/dev/null; then
    echo
    echo "==== PyTorch reference skipped: $python cannot import torch (apt-get install python3-torch)"
  elif [[ ! -s "$work/train.json" ]]; then
    echo
    echo "==== PyTorch reference skipped: it compares with train_bench's figures, which are missing"
  else
    run pytorch_reference "$python" "$root/bench/pytorch/train_gpt.py" \
      --baton-json "$work/train.json"
  fi
fi

echo
if ((${#failed[@]} > 0)); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all benchmarks passed their checks (load average $(cut -d' ' -f1-3 /proc/loadavg))"
