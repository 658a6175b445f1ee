#!/usr/bin/env bash
# `make gpu-check`: on a machine with a GPU and this project's packages, build the CUDA variant
# and run every GPU check (docs/cuda.md). The checks themselves are scripts/gpu-checks.sh, which
# the GPU bundle's runner also runs (scripts/gpu-bundle.sh: for a GPU machine that cannot build).
#
#   scripts/gpu-check.sh [BUILD_DIR]      (default build-gpu)
#
# Environment: JOBS (default 16), SKIP_BUILD=1 (rerun the checks on an existing build), and
# gpu-checks.sh's BENCH_STEPS, TINY_STEPS and BATON_PEAK_TFLOPS, and GPU_CHECK_BUDGET (its
# --budget, 300 s).
# Outputs (logs, reports, summary.txt, the corpus) go to BUILD_DIR/gpu-check/.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-gpu}
jobs=${JOBS:-16}
out="$build/gpu-check"
mapfile -t binaries < <(scripts/gpu-checks.sh --list-binaries)

printf '==== configure and build %s (-j%s)\n' "$build" "$jobs"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_WITH_CUDA=ON || exit 1
fi
if [ ! -d "$build/kernels/cuda" ]; then
  echo "FAILED: $build was configured without the CUDA backend (is /usr/local/cuda/bin/nvcc there?)"
  exit 1
fi
if [ "${SKIP_BUILD:-0}" = 1 ]; then
  echo "SKIP_BUILD=1: using $build as it is"
else
  ninja -C "$build" -j "$jobs" "${binaries[@]##*/}" || { echo "FAILED: build"; exit 1; }
fi

# The checks take the binaries side by side: link them into one folder.
build_path=$(cd "$build" && pwd)
rm -rf "${out:?}/bin"
mkdir -p "$out/bin"
for b in "${binaries[@]}"; do
  ln -s "$build_path/$b" "$out/bin/${b##*/}"
done
exec scripts/gpu-checks.sh --bin "$out/bin" --out "$out" --budget "${GPU_CHECK_BUDGET:-300}"
