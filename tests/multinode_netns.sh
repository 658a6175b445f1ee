#!/usr/bin/env bash
# ctest multinode_netns: a job that spans two "nodes" on one machine: two Linux network namespaces
# joined by a veth pair (10.231.0.1 and 10.231.0.2, nothing else reachable), one Slurm task in
# each (SLURM_* and BATON_COORDINATOR / BATON_TOKEN set as deploy/slurm/train.sbatch sets them).
# Rank 0 hosts the coordinator on its node's address; each rank's transport listens on the
# address that routes to the coordinator (launcher/mpi_bootstrap.h, ListenHostFor). A 2-stage job
# and a 1-stage x 2-replica job must each end with the parameter checksum of the same job on one
# node (local launcher).
# Skipped (77), saying why, where network namespaces cannot be made (not root, no CAP_NET_ADMIN).
#
#   tests/multinode_netns.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: multinode_netns.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/multinode-netns.XXXXXX") || exit 1
n0="baton-n0-$$"
n1="baton-n1-$$"
cleanup() {
  ip netns del "$n0" 2>/dev/null
  ip netns del "$n1" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
skip() {
  echo "skipped: $*"
  exit 77
}
checksum() { sed -n 's/.*param checksum \([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }

data=/usr/share/common-licenses
[ -d "$data" ] || skip "$data is absent"
# shellcheck source=tests/netns_pair.sh
source "$root/tests/netns_pair.sh"
why=$(netns_pair "$n0" "$n1" 10.231.0)
case $? in
  0) ;;
  77) skip "$why" ;;
  *) fail "$why" ;;
esac

# Each layout on one node (the local launcher), then as two Slurm tasks, one per node: 2 stages x
# 1 replica (the pipeline spans the nodes), then 1 stage x 2 replicas (the gradient all-reduce
# spans them).
token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
for layout in "2 1" "1 2"; do
  read -r stages replicas <<< "$layout"
  name="${stages}x${replicas}"
  args=(configs/gpt-tiny.yaml --set device.type=cpu --set parallel.stages="$stages"
        --set parallel.replicas="$replicas" --set train.steps=6 --set train.log_every=1)

  "$build/baton" run "${args[@]}" --set output.dir="$work/one-$name" > "$work/one-$name.log" 2>&1 ||
    { tail -n 20 "$work/one-$name.log"; fail "the one-node $name job failed"; }
  one=$(checksum "$work/one-$name.log")
  [ -n "$one" ] || fail "no checksum from the one-node $name job"

  # Task 1 on node 1 in the background, task 0 (the coordinator) on node 0.
  task() {
    local ns=$1 rank=$2
    shift 2
    ip netns exec "$ns" env SLURM_PROCID="$rank" SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_JOB_ID=4343 \
      BATON_COORDINATOR=10.231.0.1:29500 BATON_TOKEN="$token" \
      timeout 300 "$build/baton" run --launcher slurm "${args[@]}" --set output.dir="$work/two-$name" "$@"
  }
  task "$n1" 1 > "$work/node1-$name.log" 2>&1 &
  node1=$!
  task "$n0" 0 > "$work/node0-$name.log" 2>&1
  code0=$?
  wait "$node1"
  code1=$?
  [ "$code0" = 0 ] || { tail -n 30 "$work/node0-$name.log"; fail "node 0's $name task exited $code0"; }
  [ "$code1" = 0 ] || { tail -n 30 "$work/node1-$name.log"; fail "node 1's $name task exited $code1"; }
  grep -q "rank 1 listens for its peers on 10.231.0.2" "$work/node1-$name.log" ||
    { grep listens "$work/node1-$name.log"; fail "node 1 did not listen on its veth address ($name)"; }
  two=$(checksum "$work/node0-$name.log")
  echo "$stages stage(s) x $replicas replica(s): one node $one, two nodes $two"
  [ "$one" = "$two" ] || fail "the two-node $name job ended with another checksum"
done
echo "PASS"
