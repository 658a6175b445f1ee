#!/usr/bin/env bash
# Builds and runs the kernel tests against oneDNN 3.x, the API that Ubuntu 24.04 (the Docker
# image's base) ships (libdnnl-dev 3.1.1), on a Debian 12 machine whose own libdnnl-dev is 2.6.
# oneDNN comes from Intel's PyPI wheels (headers and library), downloaded once into the cache
# folder; nothing is installed. Both GEMM engines run every kernel test, including the check that
# no f32 GEMM form falls to oneDNN's reference loop. Not part of CI (it downloads).
#
#   scripts/onednn3-check.sh [BUILD_DIR]     (default: build-onednn3)
#
# Environment: BATON_ONEDNN3_CACHE, where the wheels go (default: ~/.cache/baton/onednn3);
# BATON_ONEDNN3_WHEEL, the wheels' version (default 2023.1.0, which is oneDNN 3.1.0; 2023.2.0 is
# 3.2.0).
set -euo pipefail

build_dir=${1:-build-onednn3}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${BATON_ONEDNN3_CACHE:-$HOME/.cache/baton/onednn3}
version=${BATON_ONEDNN3_WHEEL:-2023.1.0}

mkdir -p "$cache"
for wheel in onednn-cpu-gomp onednn-devel-cpu-gomp; do
  file="$cache/${wheel//-/_}-$version-py2.py3-none-manylinux1_x86_64.whl"
  if [ ! -f "$file" ]; then
    python3 -m pip download --quiet --no-deps --dest "$cache" "$wheel==$version"
  fi
  python3 -m zipfile -e "$file" "$cache/unpacked-$version"
done
include="$cache/unpacked-$version/onednn_devel_cpu_gomp-$version.data/data/include"
library="$cache/unpacked-$version/onednn_cpu_gomp-$version.data/data/lib/libdnnl.so.3"
grep -q 'define DNNL_VERSION_MAJOR 3' "$include/oneapi/dnnl/dnnl_version.h" ||
  { echo "onednn3-check: $include is not oneDNN 3.x" >&2; exit 1; }

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATON_WITH_CUDA=OFF \
  -DBATON_DNNL_INCLUDE="$include" -DBATON_DNNL_LIBRARY="$library" >/dev/null
cmake --build "$build_dir" -j "${JOBS:-2}" --target kernels_test
for engine in onednn openblas; do
  echo "onednn3-check: kernel tests, BATON_CPU_GEMM=$engine"
  BATON_CPU_GEMM=$engine "$build_dir/kernels/kernels_test" --gtest_brief=1
done
dnnl_version=$(grep -E 'define DNNL_VERSION_(MAJOR|MINOR|PATCH)' "$include/oneapi/dnnl/dnnl_version.h" |
  awk '{printf "%s%s", sep, $3; sep="."}')
echo "onednn3-check: passed against oneDNN $dnnl_version ($library)"
