#!/usr/bin/env python3
"""What `tpf run --hosts` does while its commands on other hosts wait, and how soon it ends a rank
stopped on another host once no rank runs to find it, for one or more tpf binaries side by side
(alternated, so that the machine's load falls on each alike).

Hosts are emulated by a fake remote shell that runs the command here, in a session of its own (as
sshd starts it), with TPF_NODE_ID set to the host's name.

- gap: one rank prints a line every 20 ms for 3 s through `--tag-output` (through tpf run's loop);
  1 s in, tpf run is sent SIGUSR2 (a flight-recorder summary), whose search for the job's
  processes on the host waits HOLD seconds there (a host slow to answer; tpf run's bound is 5 s).
  Reported: the longest gap between lines as they reach this script.
- stopped: 3 hosts of 1 rank; rank 1 stops itself (SIGSTOP), the others end at once;
  TPF_HOST_LOST_S=LOST and --job-timeout 30. Reported: how long tpf run took, and its exit code.
- plain: the same job with no rank stopped (`true`): what watching for stopped ranks costs a job
  whose ranks end together. Reported: how long tpf run took.

  bench/launcher/remote_waits.py [--rounds 3] [--hold 4] [--lost 2] TPF [TPF ...]
"""
import argparse
import os
import signal
import subprocess
import tempfile
import time


def fake_shell(directory, hold):
    path = os.path.join(directory, "rsh")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nhost=$1\nshift\n"
                # The first search for the job's processes of each tpf run (its pid: $PPID).
                f"if [ \"$2\" = /proc ] && mkdir {directory}/held-$PPID 2>/dev/null; then "
                f"sleep {hold}; fi\n"
                "exec setsid -w env AGENT_HOST=\"$host\" TPF_NODE_ID=\"$host\" \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def longest_gap(tpf, rsh):
    cmd = [tpf, "run", "--hosts", "a:1", "--rsh", rsh, "--store-bind", "127.0.0.1",
           "--tag-output", "--", "sh", "-c",
           "i=0; while [ $i -lt 150 ]; do echo tick $i; i=$((i+1)); sleep 0.02; done"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    start = time.monotonic()
    sent = False
    last = None
    gap = 0.0
    for line in p.stdout:
        now = time.monotonic()
        if "tick" not in line:
            continue
        if last is not None:
            gap = max(gap, now - last)
        last = now
        if not sent and now - start > 1.0:
            p.send_signal(signal.SIGUSR2)
            sent = True
    p.wait()
    return gap


def three_hosts(tpf, rsh, lost, script):
    cmd = [tpf, "run", "--hosts", "a:1,b:1,c:1", "--rsh", rsh, "--store-bind", "127.0.0.1",
           "--job-timeout", "30", "--", "sh", "-c", script]
    env = dict(os.environ, TPF_HOST_LOST_S=str(lost))
    start = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start, p.returncode


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=4.0)
    parser.add_argument("--lost", type=float, default=2.0)
    parser.add_argument("tpf", nargs="+")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        slow = fake_shell(directory, args.hold)
        quick = fake_shell(tempfile.mkdtemp(dir=directory), 0)
        for r in range(args.rounds):
            for tpf in args.tpf:
                gap = longest_gap(tpf, slow)
                seconds, code = three_hosts(tpf, quick, args.lost,
                                            "if [ $TPF_RANK = 1 ]; then kill -STOP $$; fi")
                plain, plain_code = three_hosts(tpf, quick, args.lost, "true")
                print(f"round {r} {tpf}: longest output gap {gap * 1000:.0f} ms "
                      f"(search held {args.hold:g} s); stopped rank: ended after {seconds:.2f} s, "
                      f"exit {code}; plain: {plain:.2f} s, exit {plain_code}", flush=True)


if __name__ == "__main__":
    main()
