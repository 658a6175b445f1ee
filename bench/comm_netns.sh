#!/usr/bin/env bash
# bench/comm_netns.sh [BUILD] [COMM_BENCH ARGS...]: comm_bench with its 2 ranks as processes,
# first on one host's loopback (shared memory, then TCP), then in two Linux network namespaces
# joined by a veth pair (10.232.0.1 and 10.232.0.2), as tests/multinode_netns.sh builds two
# "nodes" on one machine: there the ranks share no listen address, so they talk Gloo over TCP
# through the veth, as ranks on two hosts would (docs/parallel.md, "Ranks on one host"). Prints
# rank 0's tables of each; exits 1 if a rank's checks fail, 77 (skipped, saying why) where
# network namespaces cannot be made (not root, no CAP_NET_ADMIN).
#
#   bench/comm_netns.sh build --max-bytes 67108864 --collectives all_reduce,send_recv
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shift || true
bench="$build/bench/comm_bench"
[ -x "$bench" ] || { echo "no $bench: cmake --build $build --target comm_bench"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/comm-netns.XXXXXX") || exit 1
n0="baton-cb0-$$"
n1="baton-cb1-$$"
cleanup() {
  ip netns del "$n0" 2>/dev/null
  ip netns del "$n1" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Runs rank 1 in the background and rank 0 in the foreground, each through its own prefix
# (an `ip netns exec` or nothing); prints rank 0's output, then rank 1's verdict.
pair() {
  local name=$1 prefix0=$2 address0=$3 prefix1=$4 address1=$5
  shift 5
  local store="$work/$name"
  # shellcheck disable=SC2086 # the prefixes are words or empty
  $prefix1 "$bench" --ranks 2 --rank 1 --store "$store" --listen "$address1" "$@" \
    >"$work/$name.rank1" 2>&1 &
  local rank1=$!
  # shellcheck disable=SC2086
  $prefix0 "$bench" --ranks 2 --rank 0 --store "$store" --listen "$address0" "$@"
  local status0=$?
  wait "$rank1"
  local status1=$?
  tail -n 1 "$work/$name.rank1"
  [ "$status0" -eq 0 ] && [ "$status1" -eq 0 ]
}

echo "== two processes on one host (loopback: shared memory, then TCP)"
pair loopback "" 127.0.0.1 "" 127.0.0.1 "$@" || exit 1

# shellcheck source=tests/netns_pair.sh
source "$root/tests/netns_pair.sh"
why=$(netns_pair "$n0" "$n1" 10.232.0)
case $? in
  0) ;;
  77)
    echo "== two network namespaces: skipped: $why"
    exit 77
    ;;
  *)
    echo "== two network namespaces: $why"
    exit 1
    ;;
esac

echo
echo "== two network namespaces joined by a veth pair (Gloo over TCP, as across hosts)"
pair netns "ip netns exec $n0" 10.232.0.1 "ip netns exec $n1" 10.232.0.2 --transport tcp "$@" ||
  exit 1
