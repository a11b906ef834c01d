#!/usr/bin/env python3
"""How soon a job ends when a rank alone on its host stops while the world communicator is made,
for one or more builds side by side (alternated, so that the machine's load falls on each alike).

3 ranks under `tpf run -n 3`, each its own host (TPF_NODE_ID=h<rank>; loopback between them): rank
1 joins 2 s late, and rank 2 stops itself (SIGSTOP, from a timer) 1 s in, while it waits in the
creation for rank 1. The others then wait on rank 2. TPF_HOST_LOST_S=LOST, a setup deadline of
60 s (from_env(timeout=60)), --job-timeout 90. Reported: how long tpf run took, its exit code, and
the line in which tpf run says why it ended rank 2 (or the first rank's error).

  bench/launcher/creation_stop.py [--rounds 2] [--lost 2] BUILD [BUILD ...]

BUILD is a build directory (its tpf and its python/ for the tpfabric module).
"""
import argparse
import os
import subprocess
import time

PROGRAM = r"""
import os, signal, threading, time
import tpfabric as tpf
rank = int(os.environ["TPF_RANK"])
if rank == 1:
    time.sleep(2)
if rank == 2:
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
world = tpf.Communicator.from_env(timeout=60)
world.barrier()
"""


def run(build, lost):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), TPF_HOST_LOST_S=str(lost))
    cmd = [os.path.join(build, "tpf"), "run", "-n", "3", "--job-timeout", "90", "--", "sh", "-c",
           'TPF_NODE_ID=h$TPF_RANK exec /usr/bin/python3 -c "$0"', PROGRAM]
    start = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.monotonic() - start
    lines = (p.stdout + p.stderr).splitlines()
    why = next((l for l in lines if "found lost" in l), None) or next(
        (l for l in lines if "Error" in l or "error" in l), "")
    return took, p.returncode, why


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lost", type=float, default=2)
    parser.add_argument("builds", nargs="+")
    args = parser.parse_args()
    for r in range(args.rounds):
        for build in args.builds:
            took, code, why = run(build, args.lost)
            print(f"round {r + 1} {build}: {took:.2f} s, exit {code}: {why[:300]}", flush=True)


if __name__ == "__main__":
    main()
