#!/usr/bin/env bash
# Calibrates the shared-memory link class (coll::ShmLinkCost) on this machine: runs
# `tpf bench all_reduce` with one-shot and two-shot forced (TPF_ALLREDUCE_ALGO) at N = 2, 3, 4,
# 1 KiB .. 4 MiB (one-shot only up to one slot: above it the fabric runs two-shot anyway), then
# fits the constants on sizes <= 64 KiB at N = 2 and predicts the rest with `tpf plan calibrate`.
# Ranks beyond the cores make each step slower; the fit's step per excess rank is for them: a
# second calibration also trains on N = 3 (fitting that term) and holds out N = 4.
#
# usage: bench/plan/calibrate.sh [OUT_DIR]      (default build/calibration)
#   TPF=path/to/tpf      the binary (default: build/tpf, else build-rel/tpf)
#   ITERS=N WARMUP=N     timed and warm-up iterations per size (default 100, 10)
#   REPEATS=N            sweeps of every configuration, interleaved in time (default 5); the
#                        calibration takes the median of the runs of each point
#   QUIET_WAIT_S=S       before each run, wait until no other process is runnable for 1 s,
#                        S seconds in all at most (default 120); a rank that loses its core to
#                        a compiler makes a step cost a scheduler time slice, not microseconds
# Writes OUT_DIR/all_reduce_n<N>_<algorithm>_r<K>.json (tpf bench --json, which records what the
# calibration needs: "algorithm", "oversubscribed", "slot_bytes", "cpus", and "loadavg", the
# 1-minute load before the run) and OUT_DIR/calibrate.txt.
# Takes about a minute on a quiet 2-core VM, plus up to QUIET_WAIT_S of waiting.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/calibration}
iters=${ITERS:-100}
warmup=${WARMUP:-10}
repeats=${REPEATS:-5}
quiet_wait_s=${QUIET_WAIT_S:-120}
quiet_ticks_left=$((quiet_wait_s * 5))  # 0.2 s ticks of waiting left for the whole script

# Runnable tasks besides the awk that reads the count (instantaneous, unlike the load average).
others_running() { awk '/^procs_running/ { print $2 - 1 }' /proc/stat; }

wait_until_quiet() {
  local calm=0
  while ((calm < 5)); do
    if (($(others_running) <= 0)); then calm=$((calm + 1)); else calm=0; fi
    if ((quiet_ticks_left <= 0)); then
      echo "calibrate.sh: QUIET_WAIT_S=${quiet_wait_s} s of waiting spent; measuring anyway" >&2
      return
    fi
    quiet_ticks_left=$((quiet_ticks_left - 1))
    sleep 0.2
  done
}

tpf=${TPF:-}
if [[ -z $tpf ]]; then
  for candidate in "$root/build/tpf" "$root/build-rel/tpf"; do
    if [[ -x $candidate ]]; then
      tpf=$candidate
      break
    fi
  done
fi
if [[ -z $tpf || ! -x $tpf ]]; then
  echo "calibrate.sh: no tpf binary; build it (cmake --build build) or set TPF=path/to/tpf" >&2
  exit 1
fi

cpus=$(nproc)  # what tpf run reports to the ranks as TPF_CPUS (the affinity mask)
# One-shot runs stop at the staging slot, the largest message it takes (tpf bench --json records
# the slot the fabric used; here only its size bound is needed): plain byte counts only.
slot=${TPF_SHM_BUFFER_BYTES:-262144}
if [[ ! $slot =~ ^[0-9]+$ ]]; then
  echo "calibrate.sh: TPF_SHM_BUFFER_BYTES='$slot': give a plain byte count" >&2
  exit 1
fi

mkdir -p "$out"
files=()
for ((r = 1; r <= repeats; ++r)); do
  for n in 2 3 4; do
    oversubscribed=false
    ((n > cpus)) && oversubscribed=true
    for algorithm in one_shot two_shot; do
      max_bytes=4M
      [[ $algorithm == one_shot ]] && max_bytes=$slot
      file="$out/all_reduce_n${n}_${algorithm}_r${r}.json"
      wait_until_quiet
      load=$(cut -d ' ' -f 1 /proc/loadavg)
      echo "== N=$n $algorithm (oversubscribed: $oversubscribed, load $load) -> $file" >&2
      # tpf bench --json records the algorithm forced, the slot, the cores and the load itself.
      TPF_ALLREDUCE_ALGO=$algorithm "$tpf" run -n "$n" -- \
        "$tpf" bench all_reduce -b 1K -e "$max_bytes" -f 2 -n "$iters" -w "$warmup" -c 1 \
        --json "$file" >&2
      files+=(--bench "$file")
    done
  done
done

echo "== $tpf plan calibrate ${files[*]}" >&2
{
  list="\$(for f in $out/all_reduce_n*_r*.json; do echo --bench \$f; done)"
  echo "\$ tpf plan calibrate $list"
  "$tpf" plan calibrate "${files[@]}"
  echo
  echo "\$ tpf plan calibrate $list --train-ranks 2,3"
  "$tpf" plan calibrate "${files[@]}" --train-ranks 2,3
} | tee "$out/calibrate.txt"
