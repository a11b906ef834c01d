#!/usr/bin/env bash
# The runs `tpf plan calibrate-network` fits the network link class to (coll/network_cost.h):
# all_reduce and broadcast across emulated hosts with one rank each
# (bench/net/emulated_hosts_bench.sh; needs root), each network algorithm forced in turn
# (TPF_NET_ALGO), alternated, ROUNDS times; one JSON file per run in OUT.
#
#   bench/net/network_calibration.sh OUT HOSTS ROUNDS     e.g. ... docs/results/calibration-network 2 3
#
# Two sweeps: latency (8 B .. 512 B, many iterations) and bandwidth (32 KiB .. 8 MiB, enough
# warm-up that each size runs in the links' steady state). Sizes in between are left out: the
# emulated links' token buckets (tbf burst 1 MB) pass their warm-up and timed iterations at full
# speed, so they would measure the bucket, not the link.
set -euo pipefail
out=${1:?usage: $0 OUT HOSTS ROUNDS}
hosts=${2:?usage: $0 OUT HOSTS ROUNDS}
rounds=${3:-1}
rate=${RATE:-1gbit}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
for (( round = 1; round <= rounds; round++ )); do
  for coll in all_reduce broadcast; do
    for sweep in latency bandwidth; do
      for algo in one_shot pipelined; do
        file=$(realpath -m "$out/$coll-${hosts}x1-$rate-$sweep-$algo-r$round.json")
        if [[ $sweep == latency ]]; then
          sizes=(-b 8 -e 512 -f 4 -n 400 -w 100)
        else
          sizes=(-b 32K -e 8M -f 4 -n 20 -w 40)
        fi
        echo "# $file"
        TPF_NET_ALGO=$algo "$here/emulated_hosts_bench.sh" -H "$hosts" -r 1 -R "$rate" -- \
          "$coll" "${sizes[@]}" --json "$file" | grep -v '^#'
      done
    done
  done
done
