#!/usr/bin/env bash
# comm_alternatives.sh: the libraries weighed against Baton's own shared-memory links for ranks
# on one host (docs/parallel.md, "Ranks on one host"), measured on this machine. Builds
# bench/mpi_comm_bench.c with mpicc and runs it on 2 ranks under Open MPI's shared-memory
# transport (pml ob1, btl vader), its TCP one (btl tcp), and UCX (pml ucx, UCX's shared-memory
# transports); prints each one's all-reduce and send/recv bus bandwidth per size. Compare with
# `build/bench/comm_bench --ranks 2 --collectives all_reduce,send_recv` in the same session.
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
run "Open MPI over UCX, shared memory (pml ucx, UCX_TLS=sm,self)" --mca pml ucx -x UCX_TLS=sm,self
