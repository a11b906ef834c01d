#!/usr/bin/env bash
# First contact: installs the build dependencies, builds tpfabric (Release, Ninja) into build/ and
# runs the demo job: 4 ranks run a few collectives, check the results and print bandwidth.
# An existing build/ is reused as configured (its generator and build type are kept).
# TPF_JOBS=N limits the compile jobs (default: all cores).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
readonly build_dir=build

scripts/install-deps.sh

if [[ -f "$build_dir/CMakeCache.txt" ]]; then
  echo "quickstart.sh: reusing the existing $build_dir/"
else
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build_dir" -j"${TPF_JOBS:-$(nproc)}"

echo
echo "quickstart.sh: running $build_dir/tpf run -n 4 -- $build_dir/tpf demo"
exec "$build_dir/tpf" run -n 4 -- "$build_dir/tpf" demo
