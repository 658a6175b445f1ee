#!/usr/bin/env bash
# The GPU bundle's runner (scripts/gpu-bundle.sh packs it; docs/cuda.md says how to call it on a
# lent GPU machine). It runs every GPU check of scripts/gpu-checks.sh on the bundle's prebuilt
# binaries, on a machine that has a GPU, the CUDA toolkit or PyTorch's NVIDIA wheels, and none
# of this project's packages:
#   1. unpacks the bundle (baton-gpu-bundle.tar.gz beside this script) into a temporary folder,
#      unless it runs from an unpacked bundle already;
#   2. finds libcudart, libcublas + libcublasLt (one folder, one version) and libnccl: in
#      BATON_CUDA_LIBS (folders, ':'-separated), the toolkit (/usr/local/cuda*/lib64,
#      /usr/local/cuda*/targets/*/lib), Python's NVIDIA wheels (site-packages/nvidia/*/lib);
#   3. checks with ldd that each binary resolves every library from the bundle's lib/, those
#      folders, or the C/C++ runtime (libc, libm, libstdc++, libgcc_s, ...), and that each
#      starts with every symbol bound (LD_BIND_NOW=1);
#   4. runs the checks with LD_LIBRARY_PATH = the bundle's lib/ + those folders;
#   5. writes to OUT_DIR: summary.txt (each check's outcome and figures), console.log (all that
#      was printed) and logs.tar.gz (every log and report); three files, as the device tool
#      returns at most 8 from $OUT.
#
#   run-gpu-checks.sh [OUT_DIR] [--dry-run] [--no-gpu] [--libraries-only] [--budget S]
#                     [--bundle FILE.tar.gz] [--keep]
#
#   OUT_DIR           default: $OUT when set (the device tool's folder), else ./gpu-check-out
#   --dry-run         unpack, find and check the libraries, print the planned checks, skip them
#   --no-gpu          run as on a machine without a GPU (the CPU-only check runs, the rest skip)
#   --libraries-only  stop after the library check (exit 1 if a library is missing or foreign)
#   --budget S        seconds the checks may start new steps in (default 300: all within 6 min)
#   --bundle FILE     the archive (default: baton-gpu-bundle.tar.gz beside this script)
#   --keep            keep the unpacked bundle and the work folder (printed at the end)
#
# Exit status: 0 when nothing failed (skips included), 1 when a check or the library check
# failed, 2 on a usage error.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-}
archive=""
checks_args=()
libraries_only=0
keep=0
budget=300

usage() {
  sed -n '/^#   run-gpu-checks.sh \[OUT_DIR\]/,/^#   --keep/s/^# \{0,1\}//p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run | --no-gpu) checks_args+=("$1") ;;
    --libraries-only) libraries_only=1 ;;
    --keep) keep=1 ;;
    --budget) budget=${2:?--budget needs seconds}; shift ;;
    --bundle) archive=${2:?--bundle needs an archive}; shift ;;
    -h | --help) usage ;;
    -*) echo "run-gpu-checks: unknown option '$1'" >&2; usage ;;
    *) out=$1 ;;
  esac
  shift
done
case $budget in
  '' | *[!0-9]*) echo "run-gpu-checks: --budget takes whole seconds" >&2; usage ;;
esac
[ -n "$out" ] || out="$PWD/gpu-check-out"
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2

# Libraries the bundle leaves to the machine: the C and C++ runtime (here), and the CUDA/NCCL
# ones (found by candidate_dirs).
system_libs='^(linux-vdso|ld-linux[^ ]*|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so'

# Folders that may hold the CUDA/NCCL libraries, most wanted first.
candidate_dirs() {
  local d site
  if [ -n "${BATON_CUDA_LIBS:-}" ]; then
    tr ':' '\n' <<<"$BATON_CUDA_LIBS"
  fi
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/*/lib \
    /usr/local/cuda-*/targets/*/lib; do
    [ -d "$d" ] && echo "$d"
  done
  # Python's NVIDIA wheels (PyTorch's cuBLAS and NCCL): ask the interpreters, then look.
  for python in python3 /opt/torch/.venv/bin/python3; do
    command -v "$python" >/dev/null 2>&1 || continue
    "$python" -c 'import nvidia, os
for p in nvidia.__path__:
    for d in sorted(os.listdir(p)):
        if os.path.isdir(os.path.join(p, d, "lib")): print(os.path.join(p, d, "lib"))' 2>/dev/null
  done
  for site in /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
    /usr/lib/python3/dist-packages; do
    for d in "$site"/nvidia/*/lib; do
      [ -d "$d" ] && echo "$d"
    done
  done
  # Last, the loader's cache (a distribution's packages).
  ldconfig -p 2>/dev/null | awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl)\.so/ {
    sub(/\/[^\/]*$/, "", $NF); print $NF }'
}
# The first candidate folder that holds all of the given files.
dir_with() {
  local d f ok
  while read -r d; do
    ok=1
    for f in "$@"; do
      [ -e "$d/$f" ] || ok=0
    done
    [ "$ok" = 1 ] && { echo "$d"; return 0; }
  done < <(candidate_dirs)
  return 1
}

# The libraries each binary needs, resolved under LD_LIBRARY_PATH: "  binary: name => where" for
# every one that is neither in the bundle's lib/, nor the C/C++ runtime, nor in a folder found
# for the CUDA/NCCL libraries.
foreign_libraries() {
  local b name arrow path rest
  for b in "$bundle"/bin/*; do
    while read -r name arrow path rest; do
      [ "$arrow" = "=>" ] || { path=$name; name=${name##*/}; }
      case $path in
        "$bundle"/lib/*) continue ;;
      esac
      if [[ $name =~ $system_libs ]] && [ "$path" != not ]; then continue; fi
      # The CUDA/NCCL libraries and what they load from their own folders.
      if [ "$path" != not ] && [ -n "$cuda_path" ] && [[ :$cuda_path: == *:"${path%/*}":* ]]; then
        continue
      fi
      echo "  ${b##*/}: $name => $path${rest:+ $rest}"
    done < <(ldd "$b" 2>&1 | sed 's/ (0x[0-9a-f]*)$//; s/^[[:space:]]*//')
  done
}

main() {
  local status=0 work
  printf '==== GPU bundle runner  [%ds]\n' "$SECONDS"
  work=$(mktemp -d "${TMPDIR:-/tmp}/baton-gpu-check.XXXXXX") || return 1
  if [ -x "$here/bin/baton" ]; then
    bundle=$here
    echo "bundle: $bundle (unpacked)"
  else
    archive=${archive:-$here/baton-gpu-bundle.tar.gz}
    if [ ! -f "$archive" ]; then
      echo "FAILED: no bundle at $archive (make gpu-bundle builds it)"
      return 1
    fi
    tar -xzf "$archive" -C "$work" || { echo "FAILED: unpacking $archive"; return 1; }
    bundle="$work/baton-gpu-bundle"
    echo "bundle: $archive unpacked into $bundle"
  fi
  sed 's/^/  /' "$bundle/BUNDLE-INFO" 2>/dev/null

  # ---- the CUDA/NCCL libraries of this machine
  local cudart cublas nccl driver
  cudart=$(dir_with libcudart.so.13)
  cublas=$(dir_with libcublas.so.13 libcublasLt.so.13)
  nccl=$(dir_with libnccl.so.2)
  echo "machine: $(uname -m), $(ldd --version 2>/dev/null | head -n 1)"
  local found
  found="libcudart.so.13 in ${cudart:-NOT FOUND}"
  found+="; libcublas.so.13 + libcublasLt.so.13 in ${cublas:-NOT FOUND}"
  found+="; libnccl.so.2 in ${nccl:-NOT FOUND}"
  echo "$found"
  # The chosen files first (a folder of links: another folder on the path may hold other
  # versions of them), then their folders (for what they load themselves).
  local chosen="$work/cuda-libs" f
  mkdir -p "$chosen"
  cuda_path=$chosen
  for f in "$cudart/libcudart.so.13" "$cublas/libcublas.so.13" "$cublas/libcublasLt.so.13" \
    "$nccl/libnccl.so.2"; do
    [ -e "$f" ] && ln -sf "$f" "$chosen/"
    [[ :$cuda_path: != *:"${f%/*}":* ]] && [ -d "${f%/*}" ] && cuda_path=$cuda_path:${f%/*}
  done
  # The driver's libcuda, where it is not in the loader's cache (a mounted driver folder).
  for driver in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -e "$driver/libcuda.so.1" ] && cuda_path=${cuda_path:+$cuda_path:}$driver && break
  done
  export LD_LIBRARY_PATH="$bundle/lib${cuda_path:+:$cuda_path}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

  # ---- every library from the bundle, the runtime or those folders
  local foreign
  foreign=$(foreign_libraries)
  {
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for b in "$bundle"/bin/*; do
      echo "== ${b##*/}"
      ldd "$b" 2>&1
    done
  } >"$work/libraries.log"

  # ---- and every binary starts, binding every symbol at once (LD_BIND_NOW): a CUDA/NCCL library
  # older than the one built against shows here as a missing symbol or version, not mid-check.
  local b args started
  for b in "$bundle"/bin/*; do
    case ${b##*/} in
      baton) args=(--help) ;;
      gpu_bench) args=() ;;  # prints its usage
      *) args=(--gtest_list_tests) ;;
    esac
    LD_BIND_NOW=1 "$b" "${args[@]}" >"$work/start.log" 2>&1
    started=$?
    if [ "$started" -ge 126 ] ||
      grep -q -e 'error while loading shared libraries' -e 'symbol lookup error' \
        -e "version \`.*' not found" "$work/start.log"; then
      foreign+="${foreign:+$'\n'}  ${b##*/} does not start: $(head -n 3 "$work/start.log")"
    fi
  done

  local libraries_line
  if [ -z "$foreign" ]; then
    libraries_line="libraries: ok, every binary starts (bundle lib/, C/C++ runtime, CUDA/NCCL"
    libraries_line+=" as found)"
  else
    libraries_line="libraries: FAILED, missing, from outside the bundle, or not starting:"
    status=1
  fi
  echo "$libraries_line"
  [ -z "$foreign" ] || echo "$foreign"

  if [ "$libraries_only" = 1 ]; then
    [ "$keep" = 1 ] || rm -rf "$work"
    return "$status"
  fi

  # ---- the checks
  "$bundle/scripts/gpu-checks.sh" --bin "$bundle/bin" --root "$bundle" \
    --corpus "$bundle/data/corpus.txt" --out "$work/out" --budget "$budget" \
    "${checks_args[@]}" || status=1

  # ---- what comes back: summary.txt, logs.tar.gz (console.log is written by the caller)
  {
    echo "GPU bundle runner: $(date -u '+%Y-%m-%d %H:%M UTC')"
    sed 's/^/  /' "$bundle/BUNDLE-INFO" 2>/dev/null
    echo "machine: $(uname -m), $(ldd --version 2>/dev/null | head -n 1)"
    echo "$found"
    echo "$libraries_line"
    [ -z "$foreign" ] || echo "$foreign"
    # Paths as they are in logs.tar.gz (out/...) and the archive (baton-gpu-bundle/...).
    sed "s|$work/||g" "$work/out/summary.txt"
  } >"$out/summary.txt"
  cp "$work/libraries.log" "$work/out/"
  # Everything but the data (the corpus is in the bundle, the token file is made from it).
  tar -czf "$out/logs.tar.gz" -C "$work" --exclude='*.bin' --exclude=corpus.txt out
  # The device tool returns files up to 16 MiB: without the traces if need be.
  if [ "$(stat -c %s "$out/logs.tar.gz")" -gt $((15 * 1048576)) ]; then
    tar -czf "$out/logs.tar.gz" -C "$work" --exclude='*.bin' --exclude=corpus.txt \
      --exclude=trace.json --exclude='*.svg' out
  fi
  echo "summary: $out/summary.txt, logs: $out/logs.tar.gz"
  if [ "$keep" = 1 ]; then
    echo "kept: $work"
  else
    rm -rf "$work"
  fi
  return "$status"
}

main 2>&1 | tee "$out/console.log"
exit "${PIPESTATUS[0]}"
