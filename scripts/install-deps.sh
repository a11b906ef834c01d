#!/usr/bin/env bash
# Installs the Debian 12 packages tpfabric needs to build, test and benchmark.
# Idempotent: asks apt only for the packages that are missing, so a second run touches nothing
# (and needs neither network nor root).
#
# Usage: scripts/install-deps.sh [--with-tests] [--with-peers] [--dry-run]
#   --with-tests  also install what the whole test suite needs beyond the build: PyTorch + NumPy
#                 for the independent float64 reference (tests/reference/) and the Python
#                 package's tests (tests/python/), iproute2 for the
#                 emulated hosts; scripts/test.sh, the CI command, passes it
#   --with-peers  also install the peers the benchmark comparisons run against
#                 (Open MPI, Gloo, PyTorch + NumPy)
#   --dry-run     only print what would be installed
set -euo pipefail

readonly kBasePackages=(
  cmake ninja-build g++ pkg-config   # toolchain
  libhwloc-dev                       # topology discovery (library dependency)
  libucx-dev                         # the network between hosts (UCX: RDMA or TCP; library dependency)
  libopenblas-dev                    # GEMMs of the tensor-parallel model
  libyaml-cpp-dev                    # cluster, model and layout files of the planner
  nlohmann-json3-dev                 # JSON parsing and writing (src/formats/json)
  libcli11-dev                       # the `tpf` command line (CLI11, header-only)
  libsimgrid-dev                     # independent flow-level reference the planner is tested against
  fortunes                           # English text the training demo learns from
  python3-dev pybind11-dev libdlpack-dev  # the Python package (python/; pybind11, DLPack)
  libgtest-dev libgmock-dev          # tests
  libbenchmark-dev                   # kernel benchmarks
)
# Debian's python3-torch installs into /usr/bin/python3, the interpreter the reference tests use.
readonly kTestPackages=(
  python3-torch python3-numpy        # float64 GPT-2 reference (tests/reference/gpt_reference.py);
                                     # tests of the Python package and its torch backend
  iproute2                           # emulated hosts: network namespaces (scripts/emulated-hosts.sh)
  procps                             # kill: what tpf run --hosts runs through the tests' fake
                                     # remote shell (not in Debian's minimal images)
)
readonly kPeerPackages=(
  libopenmpi-dev openmpi-bin         # MPI_Allreduce baseline
  libgloo-dev                        # Gloo baseline
  python3-torch python3-numpy        # torch.distributed (gloo backend) baseline
)

usage() {
  # The header comment above is the help text.
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

with_tests=0
with_peers=0
dry_run=0
for arg in "$@"; do
  case "$arg" in
    --with-tests) with_tests=1 ;;
    --with-peers) with_peers=1 ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps.sh: dpkg-query/apt-get not found; this script supports Debian 12 (bookworm)." >&2
  echo "  Install by hand: ${kBasePackages[*]}" >&2
  exit 1
fi

wanted=("${kBasePackages[@]}")
if (( with_tests )); then
  wanted+=("${kTestPackages[@]}")
fi
if (( with_peers )); then
  wanted+=("${kPeerPackages[@]}")
fi
# Each package once (--with-tests and --with-peers share PyTorch + NumPy).
mapfile -t wanted < <(printf '%s\n' "${wanted[@]}" | awk '!seen[$0]++')

# A package counts as present only when dpkg reports it fully installed (not e.g. half-configured).
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if (( ${#missing[@]} == 0 )); then
  echo "install-deps.sh: all ${#wanted[@]} packages already installed; nothing to do."
  exit 0
fi

echo "install-deps.sh: missing packages: ${missing[*]}"
if (( dry_run )); then
  exit 0
fi

# Root runs apt directly; anyone else goes through sudo (which may prompt for a password once).
sudo_cmd=()
if (( EUID != 0 )); then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps.sh: not root and sudo is not installed; run as root or install: ${missing[*]}" >&2
    exit 1
  fi
  sudo_cmd=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps.sh: installed ${missing[*]}"
