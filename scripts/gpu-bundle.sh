#!/usr/bin/env bash
# `make gpu-bundle`: build here what a lent GPU machine will run, so that device time is spent
# only on running (docs/cuda.md). That machine has the CUDA toolkit or PyTorch's NVIDIA wheels but
# none of this project's packages, and nothing can be installed there; what travels is the working
# tree plus carried paths, 64 MiB in all.
#
# Builds the CUDA variant (Release, sm_90 by default) in its own build folder, strips the binaries
# the GPU checks run (scripts/gpu-checks.sh --list-binaries), and packs them with every shared
# library they need except the C/C++ runtime and CUDA/cuBLAS/NCCL (which the runner finds on the
# GPU machine: they are hundreds of MiB), the configs, the generated corpus and the checks into
# DEST/baton-gpu-bundle.tar.gz; the runner goes beside it as DEST/run-gpu-checks.sh.
#
#   scripts/gpu-bundle.sh [--arch ARCHS] [--build-dir DIR] [--from-build DIR] [--dest DIR]
#
#   --arch ARCHS      CMAKE_CUDA_ARCHITECTURES (default $BATON_GPU_ARCH or 90; 80 for A100, "80;90")
#   --build-dir DIR   the Release build folder (default build-bundle)
#   --from-build DIR  pack an existing CUDA build as it is (no configure, no build): how the CI
#                     rehearsal packs build/ (RelWithDebInfo; the binaries are stripped copies)
#   --dest DIR        where the archive and the runner go (default .gpu-bundle, ignored by git)
#
# Environment: JOBS (default 2), GZIP_LEVEL (default 9; the rehearsal uses 6).
# The bundle's binaries find its libraries through LD_LIBRARY_PATH, which the runner sets (no
# RPATH rewriting, so no patchelf); it must stay under 48 MiB (the tree that travels: 64 MiB).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
arch=${BATON_GPU_ARCH:-90}
build="build-bundle"
from_build=""
dest=.gpu-bundle
jobs=${JOBS:-2}
limit_mib=48

usage() {
  sed -n '/^#   scripts\/gpu-bundle.sh \[/,/^#   --dest/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --arch) arch=${2:?--arch needs architectures}; shift ;;
    --build-dir) build=${2:?--build-dir needs a folder}; shift ;;
    --from-build) from_build=${2:?--from-build needs a folder}; shift ;;
    --dest) dest=${2:?--dest needs a folder}; shift ;;
    -h | --help) usage ;;
    *) echo "gpu-bundle: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done

mapfile -t binaries < <(scripts/gpu-checks.sh --list-binaries)
if [ -n "$from_build" ]; then
  build=$from_build
  echo "gpu-bundle: packing $build as it is"
else
  # Release at -O2, the optimisation CI's RelWithDebInfo build compiles and tests: at -O3, g++ 12
  # reports false -Wrestrict errors inside std::string (GCC bug 105329), and warnings are errors.
  echo "gpu-bundle: configure $build (Release -O2, CUDA architectures $arch)"
  mkdir -p "$build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
    -DBATON_WITH_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch" >"$build/gpu-bundle-configure.log" 2>&1 ||
    { cat "$build/gpu-bundle-configure.log"; exit 1; }
fi
if [ ! -d "$build/kernels/cuda" ]; then
  echo "gpu-bundle: $build has no CUDA backend (is /usr/local/cuda/bin/nvcc there?)" >&2
  exit 1
fi
if [ -z "$from_build" ]; then
  echo "gpu-bundle: build ${binaries[*]##*/} (-j$jobs)"
  ninja -C "$build" -j "$jobs" "${binaries[@]##*/}"
fi
build=$(cd "$build" && pwd)

# ---- stage: bin/ lib/ configs/ data/ scripts/ run-gpu-checks.sh BUNDLE-INFO
work=$(mktemp -d "${TMPDIR:-/tmp}/baton-gpu-bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/baton-gpu-bundle"
mkdir -p "$stage/bin" "$stage/lib" "$stage/configs" "$stage/data" "$stage/scripts"
for b in "${binaries[@]}"; do
  strip --strip-all -o "$stage/bin/${b##*/}" "$build/$b"
done

# Every library the binaries load, but the C/C++ runtime and CUDA/cuBLAS/NCCL (the runner's
# lists: run-gpu-checks.sh checks the same), copied under the name they are asked for.
left_to_machine='^(linux-vdso|ld-linux[^ ]*|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libcudart|libcublas|libcublasLt|libnccl)\.so'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '$2 == "=>" { print $1, $3 }'
done | sort -u | while read -r name path; do
  [[ $name =~ $left_to_machine ]] && continue
  if [ "$path" = not ]; then
    echo "gpu-bundle: $name is not found here" >&2
    exit 1
  fi
  cp -L "$path" "$stage/lib/$name"
done

cp configs/*.yaml "$stage/configs/"
scripts/gpu-checks.sh --make-corpus "$stage/data/corpus.txt"
cp scripts/gpu-checks.sh "$stage/scripts/"
cp scripts/run-gpu-checks.sh "$stage/"
{
  echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)'), packed $(date -u '+%Y-%m-%d %H:%M UTC')"
  cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
  nvcc_version=$(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' \
    "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -n 1)
  echo "build $(cache CMAKE_BUILD_TYPE), CUDA architectures $(cache CMAKE_CUDA_ARCHITECTURES), nvcc $nvcc_version"
  echo "needs from the machine: libcudart.so.13, libcublas.so.13, libcublasLt.so.13, libnccl.so.2"
} >"$stage/BUNDLE-INFO"

# ---- pack
mkdir -p "$dest"
archive="$dest/baton-gpu-bundle.tar.gz"
tar -cf - -C "$work" baton-gpu-bundle | gzip "-${GZIP_LEVEL:-9}" >"$archive.tmp"
mv "$archive.tmp" "$archive"
cp scripts/run-gpu-checks.sh "$dest/run-gpu-checks.sh"

bytes=$(stat -c %s "$archive")
printf 'gpu-bundle: %s, %s binaries, %s libraries, %s MiB\n' "$archive" "${#binaries[@]}" \
  "$(find "$stage/lib" -type f | wc -l)" "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
if [ "$bytes" -ge $((limit_mib * 1048576)) ]; then
  echo "gpu-bundle: FAILED: the archive must stay under $limit_mib MiB" >&2
  exit 1
fi
echo "gpu-bundle: on a GPU machine: bash $dest/run-gpu-checks.sh \"\$OUT\"   (docs/cuda.md)"
