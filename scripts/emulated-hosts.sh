#!/usr/bin/env bash
# An emulated cluster on one machine (needs root and iproute2): HOSTS network namespaces NAME-h0 ..
# NAME-h<HOSTS-1>, each with one link `eth0` to a bridge in a switch namespace NAME-sw, addressed
# 127.100.0.<h+1>/16 (loopback range only, routed with route_localnet), MTU 9000 (92 % of a 1 Gb/s
# cap against 79 % at 1500, as measured when issue 10 was filed), optionally capped with tc tbf at
# RATE (e.g. 1gbit) each way. With NICS > 1 (at most 8) each host has NICS links, eth0 ..
# eth<NICS-1>, link n on a bridge of its own (rail n, as in rail-optimized GPU clusters, where NIC n
# of every server goes to switch n) and addressed 127.<100+n>.0.<h+1>/16, each capped at RATE.
# Nothing is created in the machine's own namespace. tbf's token bucket holds TPF_EMULATED_BURST
# bytes (tc units, default 1mb): a link idle long enough to fill it passes that much at memory
# speed, which a real link does not (a 1 MiB message after a pause, for one); a burst of a few
# jumbo frames (e.g. 64kb) gives a link that never exceeds its rate.
#
#   scripts/emulated-hosts.sh up NAME HOSTS [RATE [NICS]]
#   scripts/emulated-hosts.sh down NAME        removes every namespace NAME-* it made
#   scripts/emulated-hosts.sh run NAME HOSTS [RATE [NICS]] -- COMMAND...
#                                              up, COMMAND (with NAME, HOSTS and NICS exported as
#                                              TPF_EMULATED_NAME / _HOSTS / _NICS, and the cap as
#                                              TPF_NET_GBPS for the cost model unless set), then
#                                              down, whatever COMMAND does
#   scripts/emulated-hosts.sh gbps RATE        prints the TPF_NET_GBPS that `run` sets for RATE
#
# A rank enters host h with `ip netns exec NAME-h<h> ...` (or setns on /run/netns/NAME-h<h>).
# tpfabric tells the hosts apart by their network namespaces (src/topo/hosts.h) and crosses the
# links over UCX; set UCX_NET_DEVICES=eth0 (with several NICS, eth<n> for a rank on rail n) so UCX
# uses a link and not the loopback device.
set -euo pipefail

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

up() {
  local name=$1 hosts=$2 rate=${3:-} nics=${4:-1} burst=${TPF_EMULATED_BURST:-1mb}
  [[ $hosts =~ ^[0-9]+$ ]] && (( hosts >= 1 && hosts <= 250 )) ||
    { echo "emulated-hosts: HOSTS must be 1..250, not '$hosts'" >&2; exit 2; }
  [[ $nics =~ ^[0-9]+$ ]] && (( nics >= 1 && nics <= 8 )) ||
    { echo "emulated-hosts: NICS must be 1..8, not '$nics'" >&2; exit 2; }
  [[ $name =~ ^[A-Za-z0-9_.]{1,40}$ ]] ||
    { echo "emulated-hosts: NAME must be 1..40 letters, digits, '_' or '.', not '$name'" >&2; exit 2; }
  trap 'down "$name"' ERR
  ip netns add "$name-sw"
  local n
  for (( n = 0; n < nics; n++ )); do
    ip -n "$name-sw" link add "br$n" type bridge
    ip -n "$name-sw" link set "br$n" up
  done
  for (( h = 0; h < hosts; h++ )); do
    local ns="$name-h$h"
    ip netns add "$ns"
    # Loopback keeps 127.0.0.1 only, so the rest of 127/8 can be routed over the links.
    ip -n "$ns" link set lo up
    ip -n "$ns" addr del 127.0.0.1/8 dev lo
    ip -n "$ns" addr add 127.0.0.1/32 dev lo
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.route_localnet=1
    for (( n = 0; n < nics; n++ )); do
      local port="p$h-$n"
      ip link add "eth$n" netns "$ns" mtu 9000 type veth peer name "$port" netns "$name-sw" mtu 9000
      ip -n "$name-sw" link set "$port" master "br$n" up
      ip netns exec "$ns" sysctl -qw "net.ipv4.conf.eth$n.route_localnet=1"
      ip -n "$ns" addr add "127.$(( 100 + n )).0.$(( h + 1 ))/16" dev "eth$n"
      ip -n "$ns" link set "eth$n" up
      if [[ -n $rate ]]; then
        # Both directions: the host's egress, and the switch port's egress towards the host.
        tc -n "$ns" qdisc add dev "eth$n" root tbf rate "$rate" burst "$burst" latency 100ms
        tc -n "$name-sw" qdisc add dev "$port" root tbf rate "$rate" burst "$burst" latency 100ms
      fi
    done
  done
  trap - ERR
}

down() {
  local name=$1 ns
  for ns in $(ip netns list | awk '{print $1}'); do
    if [[ $ns == "$name-sw" || $ns =~ ^"$name"-h[0-9]+$ ]]; then ip netns del "$ns" || true; fi
  done
}

# The cost model's link rate in GB/s (coll/network_cost.h) for tc's RATE (kbit, mbit, gbit);
# nothing for another form.
gbps_of() {
  [[ $1 =~ ^([0-9.]+)(k|m|g)bit$ ]] || return 0
  awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[2]}" \
    'BEGIN { print n * (u == "k" ? 1e3 : u == "m" ? 1e6 : 1e9) / 8e9 }'
}

case "${1:-}" in
  gbps) (( $# == 2 )) || usage; gbps_of "$2" ;;
  up) (( $# >= 3 && $# <= 5 )) || usage; up "$2" "$3" "${4:-}" "${5:-1}" ;;
  down) (( $# == 2 )) || usage; down "$2" ;;
  run)
    (( $# >= 5 )) || usage
    name=$2 hosts=$3 rate= nics=1
    shift 3
    if [[ $1 != -- ]]; then rate=$1; shift; fi
    if [[ ${1:-} != -- && -n $rate ]]; then nics=$1; shift; fi
    [[ ${1:-} == -- ]] || usage
    shift
    trap 'down "$name"' EXIT INT TERM
    up "$name" "$hosts" "$rate" "$nics"
    if [[ -z ${TPF_NET_GBPS:-} ]]; then
      TPF_NET_GBPS=$(gbps_of "$rate")
      [[ -n $TPF_NET_GBPS ]] && export TPF_NET_GBPS || unset TPF_NET_GBPS
    fi
    TPF_EMULATED_NAME=$name TPF_EMULATED_HOSTS=$hosts TPF_EMULATED_NICS=$nics "$@"
    ;;
  *) usage ;;
esac
