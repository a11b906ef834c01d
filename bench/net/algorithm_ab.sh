#!/usr/bin/env bash
# Two network algorithms side by side on emulated hosts (needs root and iproute2): runs
# bench/net/emulated_hosts_bench.sh with TPF_NET_ALGO=A and TPF_NET_ALGO=B alternated, ROUNDS
# rounds, and prints each size's times (us, out of place / in place) and the ratio A / B
# (> 1: B faster). "automatic" leaves TPF_NET_ALGO unset: the library's own choice.
#
#   bench/net/algorithm_ab.sh [-n ROUNDS] A B [emulated_hosts_bench.sh options] -- BENCH_ARGS...
#   e.g. bench/net/algorithm_ab.sh pipelined per_rail -H 2 -r 2 -R 500mbit -N 2 -c -- \
#          all_gather -b 4M -e 64M -f 4 -n 5 -w 1
set -euo pipefail
rounds=2
if [[ ${1:-} == -n ]]; then rounds=$2; shift 2; fi
(( $# >= 3 )) || { sed -n 2,9p "$0" >&2; exit 2; }
first=$1 second=$2
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for (( round = 1; round <= rounds; round++ )); do
  for algo in "$first" "$second"; do
    if [[ $algo == automatic ]]; then setting=(-u TPF_NET_ALGO); else setting=("TPF_NET_ALGO=$algo"); fi
    env "${setting[@]}" "$here/emulated_hosts_bench.sh" "$@" > "$out/$round-$algo.txt"
    [[ $round == 1 && $algo == "$first" ]] && grep -m1 '^# .*hosts x' "$out/$round-$algo.txt"
  done
done
echo "# ratio = $first time / $second time (> 1: $second faster); us, out of place / in place"
printf '%-6s %12s %23s %23s %15s\n' round bytes "$first" "$second" ratio
for (( round = 1; round <= rounds; round++ )); do
  # The size rows of tpf bench: size in column 1, out-of-place time in 6, in-place time in 10
  # (N/A where that placement was not measured).
  rows='!/^#/ && NF >= 9 && ($6 + 0 > 0 || $10 + 0 > 0) { print $1, $6, $10 }'
  join <(awk "$rows" "$out/$round-$first.txt") <(awk "$rows" "$out/$round-$second.txt") |
    awk -v r="$round" '
      function ratio(a, b) { return (a + 0 > 0 && b + 0 > 0) ? sprintf("%.2f", a / b) : "N/A" }
      { printf "%-6s %12s %11s/%11s %11s/%11s %7s/%7s\n", r, $1, $2, $3, $4, $5, ratio($2, $4),
               ratio($3, $5) }'
done
