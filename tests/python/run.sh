#!/usr/bin/env bash
# Runs a test of the Python package on several ranks, as users start them:
#   run.sh package TPF_BINARY   package_test.py under `tpf run -n 3`
#   run.sh failures TPF_BINARY  failure_test.py under `tpf run -n 3` (shrink, lost and stopped:
#                               --keep-going), a job per case
#   run.sh torch TPF_BINARY     torch_backend_test.py under a real torchrun (one node)
#   run.sh torch-exit TPF_BINARY  torch_exit_test.py's cases under a real torchrun, 2 ranks
# PYTHONPATH must hold the built package (build/python); PYTHON names the interpreter with torch
# and numpy (default /usr/bin/python3), which both tests use for their references. Exit 77 (a
# skip) when it has no torch, except under CI=true, where that fails.
set -euo pipefail

mode=${1:?usage: run.sh package|failures|torch|torch-exit TPF_BINARY}
tpf=${2:?usage: run.sh package|failures|torch|torch-exit TPF_BINARY}
python=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! "$python" -c 'import torch, numpy' 2>/dev/null; then
  echo "run.sh: $python cannot import torch and numpy (apt install python3-torch python3-numpy)"
  [[ "${CI:-}" == true ]] && exit 1
  exit 77
fi
# Debian's torchrun on Python 3.11 needs --redirects/--tee. Not --standalone: its rendezvous store
# sits on the fixed port 29400, which another torchrun job of the suite may hold (and take down
# with it); the static rendezvous on a free port is this job's alone. The bound keeps a wedged job
# finite; ctest's own timeout is larger.
torchrun() {  # RANKS SCRIPT [ARGS...]
  local ranks=$1
  shift
  local port
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  timeout 400 "$python" -m torch.distributed.run --redirects 1 --tee 1 --nnodes 1 \
    --nproc_per_node "$ranks" --master_addr 127.0.0.1 --master_port "$port" "$@"
}
passed_on_ranks_0_and_1() {  # CASE OUTPUT: both said failure_test.py's CASE passed
  grep -q "rank 0: tpfabric failures ($1): all checks passed" <<<"$2"
  grep -q "rank 1: tpfabric failures ($1): all checks passed" <<<"$2"
}
found_lost_and_ended() {  # CASE HOW: failure_test.py's CASE under --keep-going, HOW it was found
  echo "== $1"
  local status=0 out
  out=$(TPF_HOST_LOST_S=3 timeout 120 "$tpf" run --keep-going --job-timeout 90 -n 3 "$python" \
    "$here/failure_test.py" "$1" 2>&1) || status=$?
  echo "$out"
  [[ $status == 1 ]]
  grep -q "rank 2 was found lost by rank [01] (.*$2.*); ending it$" <<<"$out"
  grep -q "rank 2 was ended by SIGKILL.* (found lost)" <<<"$out"
  # The flight recorders' summary says so, not that the others may be waiting for it.
  grep -q "rank 2: no dump (found lost and ended)" <<<"$out"
  ! grep -q "no dump from rank 2" <<<"$out"
  passed_on_ranks_0_and_1 "$1" "$out"
}
case "$mode" in
  package) exec timeout 240 "$tpf" run -n 3 "$python" "$here/package_test.py" ;;
  failures)
    for case in mismatch abort death; do
      echo "== $case"
      timeout 120 "$tpf" run -n 3 "$python" "$here/failure_test.py" "$case"
    done
    # Rank 0 dies of an uncaught exception, so the job fails; ranks 1 and 2 say whether they
    # saw why (within the bound: the deadline is as long, so a rank still waiting for it fails).
    echo "== raise"
    out=$(timeout 120 "$tpf" run -n 3 "$python" "$here/failure_test.py" raise 2>&1) || true
    echo "$out"
    grep -q "rank 1: tpfabric failures (raise): all checks passed" <<<"$out"
    grep -q "rank 2: tpfabric failures (raise): all checks passed" <<<"$out"
    # Rank 2 is killed and the others go on without it: tpf run must not stop them, not even
    # with a grace of 1 ms, and still exits 1 (a rank failed).
    echo "== shrink"
    status=0
    out=$(TPF_RUN_GRACE_S=0.001 timeout 120 "$tpf" run --keep-going -n 3 "$python" \
      "$here/failure_test.py" shrink 2>&1) || status=$?
    echo "$out"
    [[ $status == 1 ]]
    grep -q "rank 2 was killed by signal SIGKILL" <<<"$out"
    grep -q "ranks 0,1 go on (--keep-going)" <<<"$out"
    passed_on_ranks_0_and_1 shrink "$out"
    # Rank 2 stops on a host of its own: the others find it lost (heartbeat) and go on without
    # it, and tpf run ends it instead of waiting for it (before, until --job-timeout).
    found_lost_and_ended lost "no heartbeat"
    # The same on one host, where no heartbeat runs: a rank waiting on rank 2 finds it stopped.
    found_lost_and_ended stopped "rank 2 (pid [0-9]*) has been stopped for " ;;
  torch) torchrun 3 "$here/torch_backend_test.py" ;;
  torch-exit)
    echo "== exit"
    torchrun 2 "$here/torch_exit_test.py" exit
    # Rank 0 dies of an uncaught exception, so the job fails; rank 1 says whether it saw why.
    echo "== raise"
    out=$(torchrun 2 "$here/torch_exit_test.py" raise 2>&1) || true
    echo "$out"
    grep -q "rank 1: the abort of the rank that raised reached this rank" <<<"$out"
    ! grep -q "FAILED:" <<<"$out" ;;
  *) echo "run.sh: unknown mode '$mode'" >&2; exit 2 ;;
esac
