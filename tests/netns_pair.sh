# shellcheck shell=bash
# Sourced by the scripts that need two "nodes" on one machine: two Linux network namespaces
# joined by a veth pair (tests/multinode_netns.sh, bench/comm_netns.sh).
#
#   netns_pair NS0 NS1 SUBNET
#     makes namespaces NS0 and NS1 and a veth pair between them, SUBNET.1/24 in NS0 and
#     SUBNET.2/24 in NS1 (SUBNET: three octets, e.g. 10.231.0), loopback and veth up. Returns 0;
#     77 where namespaces cannot be made here (not root, no CAP_NET_ADMIN, no iproute2) and 1
#     when a later step fails, printing why. The caller removes both namespaces (`ip netns del`),
#     which removes the pair with them.
netns_pair() {
  local ns0=$1 ns1=$2 subnet=$3 error
  local veth0="nv0-$$" veth1="nv1-$$"
  command -v ip >/dev/null || { echo "no ip command (iproute2)"; return 77; }
  [ "$(id -u)" = 0 ] || { echo "network namespaces need root"; return 77; }
  error=$(ip netns add "$ns0" 2>&1) || { echo "cannot make a network namespace: $error"; return 77; }
  ip netns add "$ns1" || { echo "cannot make a second network namespace"; return 77; }
  error=$(ip link add "$veth0" type veth peer name "$veth1" 2>&1) ||
    { echo "cannot make a veth pair: $error"; return 77; }
  ip link set "$veth0" netns "$ns0" || { echo "moving a veth end into $ns0"; return 1; }
  ip link set "$veth1" netns "$ns1" || { echo "moving a veth end into $ns1"; return 1; }
  ip -n "$ns0" addr add "$subnet.1/24" dev "$veth0" || { echo "addressing $ns0"; return 1; }
  ip -n "$ns1" addr add "$subnet.2/24" dev "$veth1" || { echo "addressing $ns1"; return 1; }
  local ns
  for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up || { echo "lo up in $ns"; return 1; }; done
  ip -n "$ns0" link set "$veth0" up || { echo "$ns0's veth up"; return 1; }
  ip -n "$ns1" link set "$veth1" up || { echo "$ns1's veth up"; return 1; }
}
