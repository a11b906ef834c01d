"""How long making and destroying a communicator takes: every rank of the world times
world.split(0) (all ranks, so a communicator of the world's layout) and then its close(), `ROUNDS`
times after one warm-up, a barrier before each. Rank 0 prints one JSON line: the medians and the
ranges over the rounds of the slowest rank's split and close, in ms.

  PYTHONPATH=build/python build/tpf run -n 4 /usr/bin/python3 bench/python/split_bench.py [ROUNDS]
  # on forced hosts of two ranks each (loopback between them):
  PYTHONPATH=build/python build/tpf run -n 4 sh -c \\
      'TPF_NODE_ID=h$((TPF_RANK / 2)) exec /usr/bin/python3 bench/python/split_bench.py'
"""

import json
import statistics
import sys
import time

import numpy as np

import tpfabric as tpf


def slowest_ms(comm, seconds):
    v = np.array([seconds * 1e3], np.float64)
    comm.all_reduce(v, op="max")
    return float(v[0])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    world = tpf.Communicator.from_env(timeout=60)
    splits, closes = [], []
    for i in range(rounds + 1):
        world.barrier()
        start = time.perf_counter()
        part = world.split(0)
        made = time.perf_counter()
        part.close()
        closed = time.perf_counter()
        split_ms = slowest_ms(world, made - start)
        close_ms = slowest_ms(world, closed - made)
        if i > 0:  # the first round warms up
            splits.append(split_ms)
            closes.append(close_ms)
    if world.rank == 0:
        print(json.dumps({
            "ranks": world.size, "rounds": rounds,
            "split_ms": round(statistics.median(splits), 2),
            "split_range_ms": [round(min(splits), 2), round(max(splits), 2)],
            "close_ms": round(statistics.median(closes), 2),
            "close_range_ms": [round(min(closes), 2), round(max(closes), 2)],
        }))


if __name__ == "__main__":
    main()
