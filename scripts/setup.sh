#!/usr/bin/env bash
# Installs Baton's Debian packages when missing, then configures the CMake build (Ninja,
# RelWithDebInfo). Safe to run again: it only does what is missing.
#
#   scripts/setup.sh [BUILD_DIR]     (default: build)
#
# Environment: BATON_CMAKE_ARGS adds CMake arguments (e.g. -DBATON_WITH_CUDA=OFF).
set -euo pipefail

build_dir=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libyaml-cpp-dev libopenblas-dev libdnnl-dev libcli11-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin libgloo-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  qemu-user  # the avx2_emulation test: AVX2-only CPU paths checked on any x86-64 machine
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 update -q
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}"
fi

if [ ! -f "$build_dir/build.ninja" ]; then
  # shellcheck disable=SC2086  # BATON_CMAKE_ARGS is a list of words on purpose
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${BATON_CMAKE_ARGS:-}
fi
