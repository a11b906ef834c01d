#!/usr/bin/env bash
# tpf bench across emulated hosts (scripts/emulated-hosts.sh; needs root and iproute2): HOSTS
# network namespaces with RANKS ranks each, links capped at RATE, every rank started in its host's
# namespace as a torchrun-style rank (rank 0 serves the store on 127.100.0.1). Prints rank 0's
# table and the fraction of the link cap each size reached:
#   per-link bandwidth = busbw / links per host (one here), against RATE.
#
#   bench/net/emulated_hosts_bench.sh [-H HOSTS] [-r RANKS] [-R RATE] [-N NICS] [-c] [-t TPF] -- BENCH_ARGS...
#   e.g. bench/net/emulated_hosts_bench.sh -H 2 -r 1 -R 1gbit -- all_reduce -b 1M -e 256M -f 4
#
# With -N NICS each host has NICS links, each capped at RATE (rails: the fraction is then of one
# link's cap, so a collective that uses every rail can reach NICS), and the rank of local rank l
# uses link l % NICS, as GPU servers pair each GPU with its nearest NIC.
# With -c the ranks are placed cyclically (rank r on host r % HOSTS, local rank r / HOSTS, as
# `mpirun --map-by node` places them), so no host's ranks are consecutive; by default in blocks
# (rank r on host r / RANKS).
#
# Where every rank can have a core, rank r runs on core r: the emulated hosts share this machine's
# cores, and ranks that sleep in their waits get woken onto one core by the kernel (wake-affine
# placement) for their first few hundred calls: measured on 2 x 1 ranks, an 8 B all_reduce at
# ~60 us unpinned against 12 us pinned. Separate machines do not share cores. With more ranks than
# cores the scheduler places them.
set -euo pipefail
hosts=2 ranks=1 rate=1gbit nics=1 tpf=build/tpf cyclic=0
while getopts "H:r:R:N:ct:" opt; do
  case $opt in
    H) hosts=$OPTARG ;; r) ranks=$OPTARG ;; R) rate=$OPTARG ;; N) nics=$OPTARG ;;
    c) cyclic=1 ;; t) tpf=$OPTARG ;;
    *) sed -n 2,18p "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ ${1:-} == -- ]] && shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tpf=$(realpath "$tpf")
name=tpfb$$
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
world=$((hosts * ranks))
pinned=0  # 1: every rank has a core of its own
(( world <= $(nproc) )) && pinned=1
# Rate in bits per second, for the fraction of the cap (tc's units: kbit, mbit, gbit).
rate_bps=$(awk -v r="$rate" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
  m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1; print n * m }')

"$root/scripts/emulated-hosts.sh" run "$name" "$hosts" "$rate" "$nics" -- bash -c '
  pids=()
  for (( r = 0; r < '"$world"'; r++ )); do
    if (( '"$cyclic"' )); then h=$(( r % '"$hosts"' )) l=$(( r / '"$hosts"' ))
    else h=$(( r / '"$ranks"' )) l=$(( r % '"$ranks"' )); fi
    pin=""
    (( '"$pinned"' )) && pin="taskset -c $r"
    ip netns exec '"$name"'-h$h env RANK=$r WORLD_SIZE='"$world"' LOCAL_RANK=$l \
      LOCAL_WORLD_SIZE='"$ranks"' MASTER_ADDR=127.100.0.1 MASTER_PORT=29655 \
      TPF_JOB_SECRET='"$secret"' UCX_NET_DEVICES=eth$(( l % '"$nics"' )) $pin '"$tpf"' bench "$@" > '"$out"'/rank$r.log 2>&1 &
    pids+=($!)
  done
  status=0
  for p in "${pids[@]}"; do wait "$p" || status=1; done
  exit $status' bench "$@" || { cat "$out"/rank*.log >&2; exit 1; }
echo "# $hosts hosts x $ranks ranks$( (( cyclic )) && echo ' placed cyclically'), $nics link(s) per" \
  "host capped at $rate each ($(hostname), $(nproc) cores)"
# Per link (NCCL's "per NIC" convention, counted against one link's cap even where a host has
# several, so that their use shows as more than 1): all_reduce moves 2(H-1)/H of the
# size through each host's link, the gathers and scatters (H-1)/H, broadcast and reduce all of it;
# all_to_all's size is one rank's buffer, so a host's link carries R(H-1)/H of it.
awk -v bps="$rate_bps" -v coll="${1:-all_reduce}" -v h="$hosts" -v r="$ranks" '
  BEGIN { f = (coll == "all_reduce") ? 2 * (h - 1) / h : \
              (coll == "all_to_all") ? r * (h - 1) / h : \
              (coll ~ /^(all_gather|reduce_scatter|gather|scatter)$/) ? (h - 1) / h : 1 }
  /^#/ { print; next }
  # A placement not measured (no in-place form; tpf bench --placement) shows N/A there.
  NF >= 9 && ($6 + 0 > 0 || $10 + 0 > 0) {
    printf "%s   per link:", $0
    if ($6 + 0 > 0) printf " %.3f of the cap (out of place)", $1 * f * 8e6 / ($6 * bps)
    if ($10 + 0 > 0) printf ($6 + 0 > 0) ? ", %.3f (in place)" : " %.3f of the cap (in place)", \
                            $1 * f * 8e6 / ($10 * bps)
    printf "\n"; next }
  { print }' "$out/rank0.log"
