#!/usr/bin/env bash
# ctest gpu_bundle_rehearsal: the GPU bundle (docs/cuda.md) rehearsed here, without a GPU, on a
# bundle packed from this build tree as it is (scripts/gpu-bundle.sh --from-build: no second
# build). What a lent GPU machine would need that can be checked without one:
#   - the runner, under a scrubbed environment (env -i), unpacks the bundle, and ldd resolves
#     every library of every binary from the bundle's lib/ alone, except the C/C++ runtime and
#     CUDA/cuBLAS/NCCL (found in the toolkit here);
#   - the CPU-only check runs and passes from the bundle; each GPU check says "skipped: no GPU";
#   - what comes back fits the device tool: at most 8 files, each under 16 MiB, plain names;
#   - a dry run skips everything and exits 0; bad arguments exit 2 with the usage;
#   - a library missing from the bundle is caught (found outside it, or not at all), and so is
#     an NCCL that lacks symbols the binaries use (every symbol is bound at start).
#
#   tests/gpu_bundle_rehearsal.sh BUILD_DIR
#
# Exit status: 0 passed, 1 failed, 77 skipped (a build without the CUDA backend: nothing to pack).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: gpu_bundle_rehearsal.sh BUILD_DIR}
cd "$root" || exit 1
if [ ! -d "$build/kernels/cuda" ]; then
  echo "skipped: $build was built without the CUDA backend (no nvcc): there is no GPU bundle"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-bundle-rehearsal.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failures=0
expect() {
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAILED: $what"
    failures=$((failures + 1))
  fi
}
# The runner as the GPU machine would start it: no variables of ours (PATH aside).
scrubbed() { env -i PATH=/usr/bin:/bin HOME="$work" TMPDIR="$work/tmp" "$@"; }
mkdir -p "$work/tmp"
lines() { grep -c -- "$1" "$2"; }

# ---- pack build/ as it is (stripped copies; gzip's default level, ~8 s: within 0.5 MiB of the
# real bundle's -9 and under the 48 MiB limit, which -1 no longer is with oneDNN and OpenBLAS both)
if ! GZIP_LEVEL=6 scripts/gpu-bundle.sh --from-build "$build" --dest "$work/dest" \
  >"$work/pack.log" 2>&1; then
  cat "$work/pack.log"
  echo "FAILED: scripts/gpu-bundle.sh --from-build $build"
  exit 1
fi
tail -n 2 "$work/pack.log"
runner="$work/dest/run-gpu-checks.sh"

# ---- a run without a GPU
scrubbed bash "$runner" "$work/out" --no-gpu >"$work/run.log" 2>&1
status=$?
cat "$work/out/summary.txt" 2>/dev/null
expect "the runner exits 0 without a GPU (status $status)" [ "$status" = 0 ]
expect "libraries resolve from the bundle, the C/C++ runtime and CUDA/NCCL alone" \
  grep -q '^libraries: ok' "$work/out/summary.txt"
expect "the four GPU checks say 'skipped: no GPU'" \
  [ "$(lines ': skipped: no GPU$' "$work/out/summary.txt")" = 4 ]
expect "the CPU-only check (CUDA unit tests) passed from the bundle" \
  grep -q '^2\. CUDA unit tests .*: passed$' "$work/out/summary.txt"
expect "what comes back is summary.txt, console.log and logs.tar.gz" \
  [ "$(find "$work/out" -mindepth 1 -printf '%f\n' | sort | tr '\n' ' ')" = \
  "console.log logs.tar.gz summary.txt " ]
expect "each file is under 16 MiB" \
  [ -z "$(find "$work/out" -type f -size +16M)" ]
logs_complete() {
  [ "$(tar -tzf "$work/out/logs.tar.gz" |
    grep -c -E 'out/(cuda_allocator_test|backend_factory_test|gpu_bench_test|libraries)\.log$')" = 4 ]
}
expect "the logs hold every test log and the ldd listing" logs_complete
expect "the console log has the whole run" grep -q 'gpu checks: no failures' "$work/out/console.log"
expect "the unpacked bundle was removed" [ -z "$(ls "$work/tmp")" ]

# ---- a dry run: every check planned and skipped
scrubbed bash "$runner" "$work/dry" --dry-run --no-gpu >"$work/dry.log" 2>&1
status=$?
expect "a dry run exits 0 (status $status)" [ "$status" = 0 ]
dry_run_skips_all() {
  [ "$(lines '^planned: ' "$work/dry.log")" -ge 5 ] &&
    [ "$(lines ': skipped: ' "$work/dry/summary.txt")" = 5 ]
}
expect "a dry run plans each check and skips it" dry_run_skips_all

# ---- arguments
scrubbed bash "$runner" "$work/bad" --frobnicate >"$work/bad.log" 2>&1
status=$?
usage_shown() { [ "$status" = 2 ] && grep -q 'run-gpu-checks.sh \[OUT_DIR\]' "$work/bad.log"; }
expect "an unknown option exits 2 with the usage (status $status)" usage_shown
scrubbed bash "$runner" "$work/bad" --budget soon >/dev/null 2>&1
status=$?
expect "a budget that is not seconds exits 2 (status $status)" [ "$status" = 2 ]
scrubbed OUT="$work/from-env" bash "$runner" --libraries-only >/dev/null 2>&1
expect "the output folder defaults to \$OUT" [ -f "$work/from-env/console.log" ]

# ---- a library missing from the bundle is caught
mkdir -p "$work/unpacked"
tar -xzf "$work/dest/baton-gpu-bundle.tar.gz" -C "$work/unpacked"
removed=$(find "$work/unpacked/baton-gpu-bundle/lib" -name 'libyaml-cpp.so*' -printf '%f\n' |
  head -n 1)
rm -f "$work/unpacked/baton-gpu-bundle/lib/$removed"
scrubbed bash "$work/unpacked/baton-gpu-bundle/run-gpu-checks.sh" "$work/missing" \
  --libraries-only >"$work/missing.log" 2>&1
status=$?
missing_caught() {
  [ "$status" = 1 ] && grep -q "FAILED.*outside the bundle" "$work/missing.log" &&
    grep -q "$removed" "$work/missing.log"
}
expect "a bundle without $removed fails the library check (status $status)" missing_caught

# ---- an NCCL without the symbols the binaries use (an older one, say) is caught before any check
mkdir -p "$work/old-nccl"
if echo 'int ncclGetVersion(int* v) { *v = 0; return 0; }' |
  cc -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$work/old-nccl/libnccl.so.2" -x c - \
    2>/dev/null; then
  scrubbed BATON_CUDA_LIBS="$work/old-nccl" bash "$runner" "$work/old" --libraries-only \
    >"$work/old.log" 2>&1
  status=$?
  skew_caught() {
    [ "$status" = 1 ] && grep -q "does not start: .*undefined symbol: nccl" "$work/old.log"
  }
  expect "an NCCL missing symbols fails the library check (status $status)" skew_caught
else
  echo "(no C compiler: the NCCL version check is not rehearsed)"
fi

if [ "$failures" -gt 0 ]; then
  echo "gpu_bundle_rehearsal: $failures failed; the runner's output:"
  cat "$work/run.log"
  exit 1
fi
echo "gpu_bundle_rehearsal: all passed in ${SECONDS}s"
