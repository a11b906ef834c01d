"""How long the ranks that go on take to make their communicator after a death (shrink), against a
split of the same ranks made in the same job just before. The last rank leaves the job without a
goodbye (os._exit after a barrier, as a crash would); the others time their failing all_reduce
(the death reaching them) and then world.shrink(), then check an all_reduce on the result. Rank 0
prints one JSON line, times in ms: split_ms, failure_ms, shrink_ms (the slowest survivor's),
recovery_ms (the slowest survivor's failure + shrink: from its failing call to a communicator it
can use), and shrink_last_ms, the fastest survivor's shrink: that of the last to see the failure,
which finds the others waiting, so what making the communicator costs once everyone is there
(the slowest shrink also waits for the last to arrive); shrink_last_over_split compares that with
the split, whose ranks a barrier lined up.

  PYTHONPATH=build/python build/tpf run --keep-going -n 4 /usr/bin/python3 \\
      bench/python/shrink_bench.py
  # across emulated hosts (scripts/emulated-hosts.sh up demo 2):
  PYTHONPATH=$PWD/build/python UCX_NET_DEVICES=eth0 ip netns exec demo-h0 build/tpf run \\
      --keep-going --hosts demo-h0:2,demo-h1:2 --rsh 'ip netns exec' --store-bind 127.100.0.1 \\
      -- /usr/bin/python3 $PWD/bench/python/shrink_bench.py

The exit status is 1 by design (a rank died); the job's line is what counts.
"""

import json
import os
import sys
import time

import numpy as np

import tpfabric as tpf


def over_ranks(comm, seconds, op):
    """op ("max" or "min") of every rank's `seconds`, in ms."""
    v = np.array([seconds * 1e3], np.float64)
    comm.all_reduce(v, op=op)
    return float(v[0])


def main():
    world = tpf.Communicator.from_env(timeout=60)
    rank, size = world.rank, world.size
    if size < 2:
        sys.exit("shrink_bench.py: needs at least 2 ranks")
    last = size - 1
    world.barrier()
    start = time.perf_counter()
    part = world.split(-1 if rank == last else 0)  # the ranks that will go on
    split_s = time.perf_counter() - start
    world.barrier()
    if rank == last:
        sys.stdout.flush()
        os._exit(0)  # no goodbye: the store takes it for dead, as a crash
    start = time.perf_counter()
    try:
        world.all_reduce(np.ones(4, np.float32))
        sys.exit(f"rank {rank}: the all_reduce after the death succeeded")
    except tpf.PeerDiedError:
        pass
    failure_s = time.perf_counter() - start
    start = time.perf_counter()
    live = world.shrink()
    shrink_s = time.perf_counter() - start
    v = np.ones(4, np.float32)
    live.all_reduce(v)
    assert (v == size - 1).all(), v
    times = {name: over_ranks(live, s, "max") for name, s in
             (("split_ms", split_s), ("failure_ms", failure_s), ("shrink_ms", shrink_s),
              ("recovery_ms", failure_s + shrink_s))}
    times["shrink_last_ms"] = over_ranks(live, shrink_s, "min")
    if live.rank == 0:
        line = {"ranks": size, "hosts": live.host_count}
        line.update({name: round(ms, 2) for name, ms in times.items()})
        line["shrink_last_over_split"] = round(times["shrink_last_ms"] / times["split_ms"], 2)
        print(json.dumps(line), flush=True)
    part.close()
    live.close()
    os._exit(0)  # the world still counts the dead rank: leave without its goodbye


if __name__ == "__main__":
    main()
