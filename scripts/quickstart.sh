#!/usr/bin/env bash
# First contact, the project's main job: installs the build dependencies, builds tpfabric (Release,
# Ninja) into build/, trains the `small` GPT preset with tensor parallelism over 2 local ranks on
# English text from Debian's fortunes package (a few minutes on 2 cores), then samples from it.
# Outputs: build/runs/small/ (log.jsonl, loss.svg, config.json, checkpoints/).
# An existing build/ is reused as configured (its generator and build type are kept).
# TPF_JOBS=N limits the compile jobs (default: all cores); TPF_TP=T trains on T ranks (default 2);
# TPF_STEPS=N overrides the preset's step count.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly build_dir=build
readonly tp=${TPF_TP:-2}
readonly run_dir=$build_dir/runs/small
readonly text=$build_dir/data/fortunes.txt

scripts/install-deps.sh

if [[ -f "$build_dir/CMakeCache.txt" ]]; then
  echo "quickstart.sh: reusing the existing $build_dir/"
else
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build_dir" -j"${TPF_JOBS:-$(nproc)}"

scripts/training-text.sh "$text"
steps=()
if [[ -n "${TPF_STEPS:-}" ]]; then steps=(--steps "$TPF_STEPS"); fi

echo
echo "quickstart.sh: training: $build_dir/tpf run -n $tp -- $build_dir/tpf train --preset small" \
     "--data $text --out $run_dir ${steps[*]}"
"$build_dir/tpf" run -n "$tp" -- "$build_dir/tpf" train --preset small --data "$text" \
  --out "$run_dir" "${steps[@]}"

echo
echo "quickstart.sh: sampling: $build_dir/tpf run -n $tp -- $build_dir/tpf generate" \
     "--checkpoint $run_dir --prompt 'The meaning of life is' --tokens 400"
"$build_dir/tpf" run -n "$tp" -- "$build_dir/tpf" generate --checkpoint "$run_dir" \
  --prompt "The meaning of life is" --tokens 400

# What this machine cannot try: the planner's best layouts for GPT-3 175B on 1,024 H100s.
plan_svg="$(dirname "$run_dir")/plan-gpt-175b.svg"
echo
echo "quickstart.sh: planning: $build_dir/tpf plan --cluster dgx-h100 --gpus 1024" \
     "--model gpt-175b --search --top 5 --svg $plan_svg"
exec "$build_dir/tpf" plan --cluster dgx-h100 --gpus 1024 --model gpt-175b --search --top 5 \
  --svg "$plan_svg"
