#!/usr/bin/env bash
# tpf's ranks started by a real torchrun (Debian's python3-torch), the ways users start them:
#  1. one host, static rendezvous: torchrun's agent serves its own store on MASTER_PORT, which tpf
#     must leave alone (it used to bind it: "Address already in use");
#  2. one host, --standalone, each worker a Python program that calls
#     torch.distributed.init_process_group first (worker rank 0's store then holds MASTER_PORT)
#     and runs `tpf demo` inside the same job;
#  3. two torchrun agents as two hosts (--nnodes 2, TPF_NODE_ID per agent, loopback addresses):
#     rank 0 serves the tpf store on a free port and announces it through the agent's store;
#  4. the same with the c10d rendezvous, which has no agent store: rank 0 binds MASTER_PORT, which
#     torchrun keeps for worker rank 0's store;
#  5. a rank on another host told a bad port, or none, by torch's store: a clear error in time.
# Cases 1-4 run `tpf demo`, which checks every element of five collectives on every rank.
# Usage: torchrun_test.sh TPF_BINARY. PYTHON names the interpreter with torch (default
# /usr/bin/python3). Exit 77 (a skip) when it has no torch, except under CI=true, where that fails.
set -euo pipefail

tpf=${1:?usage: torchrun_test.sh TPF_BINARY}
python=${PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import torch.distributed.run' 2>/dev/null; then
  echo "torchrun_test: $python cannot import torch.distributed.run (apt install python3-torch)"
  [[ "${CI:-}" == true ]] && exit 1
  exit 77
fi

work=$(mktemp -d /tmp/tpf-torchrun-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Debian's torchrun on Python 3.11 needs --redirects/--tee; the bound keeps a wedged job finite.
torchrun() {
  timeout 180 "$python" -m torch.distributed.run --redirects 1 --tee 1 "$@"
}
failed=0
expect_demo() {  # LOG HOSTS: the demo verified everything, on that many hosts
  if ! grep -q "tpf demo: all results verified on every rank" "$1" ||
     ! grep -q "ranks on $2 host" "$1"; then
    echo "FAILED: $1 (expected every result verified on $2 host(s)):"
    tail -40 "$1"
    failed=1
  fi
}

echo "== 1. one host, the agent's store on MASTER_PORT"
port=$(free_port)
torchrun --nnodes 1 --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" \
  --no_python "$tpf" demo > "$work/agent.log" 2>&1 || echo "torchrun exited $?" >> "$work/agent.log"
expect_demo "$work/agent.log" 1

echo "== 2. one host, --standalone, torch.distributed initialized first in every worker"
cat > "$work/worker.py" <<'PY'
import subprocess, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo")  # worker rank 0 now serves torch's store on MASTER_PORT
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size(), t
code = subprocess.run([sys.argv[1], "demo"]).returncode
sys.exit(code)
PY
torchrun --standalone --nproc_per_node 2 "$work/worker.py" "$tpf" > "$work/standalone.log" 2>&1 ||
  echo "torchrun exited $?" >> "$work/standalone.log"
expect_demo "$work/standalone.log" 1

echo "== 3. two agents as two hosts, the port announced through the agent's store"
port=$(free_port)
export TPF_JOB_SECRET="torchrun-test-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
pids=()
for node in 0 1; do
  TPF_NODE_ID="torchrun-test-node$node" torchrun --nnodes 2 --node_rank "$node" \
    --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" --no_python "$tpf" demo \
    > "$work/node$node.log" 2>&1 &
  pids+=($!)
done
for node in 0 1; do
  wait "${pids[$node]}" || echo "torchrun exited $?" >> "$work/node$node.log"
done
expect_demo "$work/node0.log" 2
if grep -q "torchrun exited" "$work/node1.log"; then
  echo "FAILED: the second agent's workers:"; tail -40 "$work/node1.log"; failed=1
fi

echo "== 4. two agents as two hosts, c10d rendezvous (no agent store): rank 0 binds MASTER_PORT"
port=$(free_port)
pids=()
for node in 0 1; do
  TPF_NODE_ID="torchrun-test-node$node" torchrun --nnodes 2 --nproc_per_node 2 \
    --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --rdzv_id "tpf-test-$port" \
    --no_python "$tpf" demo > "$work/c10d$node.log" 2>&1 &
  pids+=($!)
done
for node in 0 1; do
  wait "${pids[$node]}" || echo "torchrun exited $?" >> "$work/c10d$node.log"
done
# Which agent's workers hold rank 0 is the rendezvous' choice: one log has the table.
cat "$work/c10d0.log" "$work/c10d1.log" > "$work/c10d.log"
expect_demo "$work/c10d.log" 2
if grep -q "torchrun exited" "$work/c10d.log"; then
  echo "FAILED: an agent's workers failed:"; tail -40 "$work/c10d.log"; failed=1
fi

echo "== 5. a rank on another host, torch's store holding a bad port or none"
# torch.distributed.TCPStore in Python plays the agent's store; a key it sets as "k" is "/k" on the
# wire, which is also what tpf's announcement is read back as.
store_port=$(free_port)
cat > "$work/store.py" <<'PY'
import datetime, sys, time
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, datetime.timedelta(seconds=60),
                      wait_for_workers=False)
store.set("tpf/torchrun-badport/attempt_0/store_port", "not-a-port")
print("serving", flush=True)
time.sleep(120)
PY
mkfifo "$work/store.out"
"$python" "$work/store.py" "$store_port" > "$work/store.out" &
store_pid=$!
exec 3< "$work/store.out"
read -r -t 60 -u 3 ready || { echo "FAILED: torch's TCPStore did not start"; exit 1; }
other_host_rank() {  # RUN_ID LOG: rank 1 of 2, one per host, as torchrun's agent would start it
  RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1     MASTER_PORT=$store_port TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID=$1     TPF_TIMEOUT=3 timeout 60 "$tpf" demo > "$2" 2>&1
}
expect_refusal() {  # LOG TEXT: the rank failed, saying TEXT
  if ! grep -q "$2" "$1"; then
    echo "FAILED: $1 should say '$2':"; tail -20 "$1"; failed=1
  fi
}
if other_host_rank badport "$work/badport.log"; then echo "exit 0" >> "$work/badport.log"; fi
expect_refusal "$work/badport.log" "holds 'not-a-port', not rank 0's store port"
if other_host_rank nobody "$work/nobody.log"; then echo "exit 0" >> "$work/nobody.log"; fi
expect_refusal "$work/nobody.log" "wait for '/tpf/torchrun-nobody/attempt_0/store_port'.*did not answer in time"
kill "$store_pid" 2>/dev/null || true
wait "$store_pid" 2>/dev/null || true
exec 3<&-

[[ $failed == 0 ]] && echo "torchrun_test: all cases passed"
exit $failed
