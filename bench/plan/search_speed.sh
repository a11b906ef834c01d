#!/usr/bin/env bash
# How long `tpf plan` takes: a single-layout prediction and a whole --search, on clusters of
# 1,024 to 100,000 GPUs (dgx-h100 preset). Each case runs --repeat times; the median is reported.
#
# Usage: bench/plan/search_speed.sh [TPF_BINARY] [--repeat N]
set -euo pipefail

tpf=${1:-build/tpf}
repeat=3
if [[ "${2:-}" == "--repeat" ]]; then repeat=${3:?--repeat needs a count}; fi
[[ -x "$tpf" ]] || { echo "search_speed.sh: no tpf binary at '$tpf'" >&2; exit 1; }

median_seconds() {  # runs "$@" $repeat times, prints the median wall time in seconds
  local times=()
  for ((i = 0; i < repeat; ++i)); do
    local start end
    start=$(date +%s.%N)
    "$@" > /dev/null
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc -l)")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk '{ a[NR] = $1 } END { printf "%.3f", a[int((NR + 1) / 2)] }'
}

printf '%-8s %-13s %-14s %12s %12s\n' gpus model global_batch "layout (s)" "search (s)"
for case in "1024 gpt-175b 1536 tp=8,pp=8,dp=16" \
            "16384 gpt-175b 16384 tp=8,pp=16,dp=128" \
            "100000 gpt-175b 25000 tp=8,pp=4,dp=3125" \
            "100000 gpt-1t 25000 tp=8,pp=4,dp=3125" \
            "100000 gpt-7b 100000 tp=1,pp=1,dp=100000" \
            "100000 mixtral-8x7b 25000 tp=8,pp=4,dp=3125,sp=1,ep=8,etp=1"; do
  read -r gpus model batch layout <<< "$case"
  if (( gpus != $(echo "$layout" | tr ',=' ' ' | awk '{ print $2 * $4 * $6 }') )); then
    layout_time="n/a"
  else
    layout_time=$(median_seconds "$tpf" plan --cluster dgx-h100 --gpus "$gpus" --model "$model" \
      --layout "$layout,gb=$batch")
  fi
  search_time=$(median_seconds "$tpf" plan --cluster dgx-h100 --gpus "$gpus" --model "$model" \
    --global-batch "$batch" --search)
  printf '%-8s %-13s %-14s %12s %12s\n' "$gpus" "$model" "$batch" "$layout_time" "$search_time"
done
