#!/usr/bin/env bash
# The runs `tpf plan calibrate-network` fits the network link class to (coll/network_cost.h):
# all_reduce and broadcast across emulated hosts with one rank each
# (bench/net/emulated_hosts_bench.sh; needs root), each network algorithm forced in turn
# (TPF_NET_ALGO), alternated, ROUNDS times; one JSON file per run in OUT.
#
#   bench/net/network_calibration.sh OUT HOSTS ROUNDS     e.g. ... docs/results/calibration-network 2 3
#
# Two sweeps: latency (8 B .. 512 B, many iterations) and bandwidth (32 KiB .. 8 MiB, enough
# warm-up that each size runs in the links' steady state). Sizes in between are left out.
# broadcast on 3 or more hosts runs down the tree as well, and its links' token buckets hold
# 64 KB (TPF_EMULATED_BURST): a link that idles between a call's hops passes up to a bucket at
# full speed, so with the emulation's default 1 MB the chain's later hops looked free (with
# 64 KB they still do for chunks of up to 64 KiB; with 16 KB the chain fell to 0.6-0.8 of the
# link at 2-8 MiB). all_reduce keeps every link busy and keeps the default (with 64 KB, 3 and 4
# hosts reached 0.5-0.6 of the link; not traced). COLLECTIVES limits the collectives run
# (default: all_reduce broadcast).
set -euo pipefail
out=${1:?usage: $0 OUT HOSTS ROUNDS}
hosts=${2:?usage: $0 OUT HOSTS ROUNDS}
rounds=${3:-1}
rate=${RATE:-1gbit}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
for (( round = 1; round <= rounds; round++ )); do
  for coll in ${COLLECTIVES:-all_reduce broadcast}; do
    burst=1mb
    if [[ $coll == broadcast ]]; then burst=64kb; fi
    for sweep in latency bandwidth; do
      algos=(one_shot pipelined)
      if [[ $coll == broadcast ]] && (( hosts >= 3 )); then algos+=(tree); fi
      for algo in "${algos[@]}"; do
        file=$(realpath -m "$out/$coll-${hosts}x1-$rate-$sweep-$algo-r$round.json")
        if [[ $sweep == latency ]]; then
          sizes=(-b 8 -e 512 -f 4 -n 400 -w 100)
        else
          sizes=(-b 32K -e 8M -f 4 -n 20 -w 40)
        fi
        echo "# $file"
        TPF_EMULATED_BURST=$burst TPF_NET_ALGO=$algo "$here/emulated_hosts_bench.sh" -H "$hosts" -r 1 -R "$rate" -- \
          "$coll" "${sizes[@]}" --json "$file" | grep -v '^#'
      done
    done
  done
done
