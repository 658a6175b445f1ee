#!/usr/bin/env bash
# comm_alternatives.sh: the libraries weighed against Baton's own shared-memory links for ranks
# on one host (docs/parallel.md, "Ranks on one host"), measured on this machine. Builds
# bench/mpi_comm_bench.c with mpicc and runs it on 2 ranks under Open MPI's shared-memory
# transport (pml ob1, btl vader) and its TCP one (btl tcp), printing each one's all-reduce and
# send/recv bus bandwidth per size; then, where ucx-utils is installed, UCX's own tag-matched
# bandwidth over its shared-memory transports (ucx_perftest tag_bw, one direction: UCX has
# point-to-point only). Compare with `build/bench/comm_bench --ranks 2` in the same session.
#
#   bench/comm_alternatives.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
command -v mpicc > /dev/null || { echo "comm_alternatives: needs mpicc (libopenmpi-dev)" >&2; exit 2; }
mpicc -O2 -o "$work/mpi_comm_bench" "$here/mpi_comm_bench.c"
run() {
  local name="$1"
  shift
  echo
  echo "== $name =="
  mpirun --allow-run-as-root --oversubscribe -np 2 "$@" "$work/mpi_comm_bench"
}
echo "comm_alternatives: 2 ranks on one host, load average $(cut -d' ' -f1-3 /proc/loadavg)"
run "Open MPI, shared memory (pml ob1, btl vader)" --mca pml ob1 --mca btl vader,self
run "Open MPI, TCP loopback (pml ob1, btl tcp)" --mca pml ob1 --mca btl tcp,self
if command -v ucx_perftest > /dev/null; then
  echo
  echo "== UCX 1.13 point to point, shared memory (ucx_perftest tag_bw, UCX_TLS=posix,cma,self) =="
  port=$((20000 + RANDOM % 20000))
  for bytes in 262144 4194304 67108864; do
    UCX_TLS=posix,cma,self ucx_perftest -t tag_bw -s "$bytes" -n 50 -p "$port" > /dev/null 2>&1 &
    server=$!
    sleep 1  # the server listens; the client retries nothing, so give it a moment
    printf '%-8s ' "$((bytes >> 10)) KiB"
    UCX_TLS=posix,cma,self ucx_perftest 127.0.0.1 -t tag_bw -s "$bytes" -n 50 -p "$port" |
      awk '/Final/ { printf "%.3f GB/s one direction\n", $7 / 1000 }'
    wait "$server" || true
    port=$((port + 1))
  done
fi
