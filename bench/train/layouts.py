#!/usr/bin/env python3
"""Tokens/s and the step-time breakdown of `tpf train` at several layouts, side by side.

Each case is a layout with optional config overrides, LAYOUT[:key=value[,key=value]] (train keys
bare or as train.KEY, model keys as model.KEY), e.g.
  tp=2   pp=2   dp=2,zero1   pp=2,vp=2   tp=2:tp_comm_overlap=false   pp=4:model.layers=16
The cases run one after another, --repeat rounds (alternating, so that a slow spell of a shared
machine hits them alike); each run's rate is the tokens of its steps after the first over their
time, from log.jsonl, and the table shows the median over rounds and its ratio to the first case.
Breakdown columns are rank 0's shares of step time (see src/model/trainer.h).

With --plan, each run starts with `tpf train --predict`: the planner's prediction of the run's
model and layout on `--cluster this-host` (this machine's rates measured anew each time, so both
sides of a round see the same spell of the shared machine; across hosts, this-host as H hosts);
the table adds the planner's median tokens/s, its error against the measured median, and its
predicted bubble share.

With --hosts H (root, iproute2), every run spans H emulated hosts (scripts/emulated-hosts.sh:
network namespaces joined by links capped at --rate, made before the first run and removed after
the last), each case's ranks split evenly over them and started by `tpf run --hosts` with
`ip netns exec` as the remote shell; rank r is on host r / (ranks / H), so TP (innermost) stays
inside a host when T divides the ranks per host. The runs are told the links' rate
(TPF_NET_GBPS, for the fabric's cost model and the planner), as `emulated-hosts.sh run` tells.

Usage: bench/train/layouts.py --data TEXT [--tpf build/tpf] [--preset small] [--grad-accum 4]
         [--steps 12] [--repeat 3] [--threads 1] [--plan] [--hosts H [--rate 1gbit]]
         CASE [CASE ...]
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile


def parse_case(text):
    layout, _, overrides = text.partition(":")
    sections = {"model": {}, "train": {}}
    for item in filter(None, overrides.split(",")):
        key, _, value = item.partition("=")
        section, _, name = key.rpartition(".")
        sections[section or "train"][name] = json.loads(value)
    ranks = math.prod(int(part.split("=")[1]) for part in layout.split(",")
                      if part.split("=")[0] in ("tp", "pp", "dp"))
    return layout, sections, ranks


def run(args, case, workdir, index):
    layout, overrides, ranks = parse_case(case)
    train = {"grad_accum": args.grad_accum, "steps": args.steps, "log_every": 10**6}
    train.update(overrides["train"])
    config = os.path.join(workdir, f"config-{index}.json")
    with open(config, "w") as f:
        json.dump({"preset": args.preset, "model": overrides["model"], "train": train}, f)
    out = os.path.join(workdir, f"run-{index}")
    train_command = [os.path.abspath(args.tpf), "train", "--config", config, "--layout", layout,
                     "--data", os.path.abspath(args.data), "--out", out, "--quiet",
                     "--threads", str(args.threads)]
    command = [args.tpf, "run", "-n", str(ranks), "--"] + train_command
    if args.hosts > 1:
        if ranks % args.hosts:
            sys.exit(f"{case}: {ranks} ranks do not split evenly over {args.hosts} hosts")
        slots = ",".join(f"{args.cluster}-h{h}:{ranks // args.hosts}" for h in range(args.hosts))
        command = ["ip", "netns", "exec", f"{args.cluster}-h0", "env", "UCX_NET_DEVICES=eth0",
                   f"TPF_NET_GBPS={link_gbps(args.rate)}", args.tpf, "run", "--hosts", slots,
                   "--rsh", "ip netns exec", "--store-bind", "127.100.0.1", "--"] + train_command
    if args.plan:
        command.append("--predict")
    stdout = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    with open(os.path.join(out, "log.jsonl")) as f:
        records = [json.loads(line) for line in f][1:]  # the first step touches memory first
    seconds = sum(r["seconds"] for r in records)
    tokens = sum(r["tokens_per_s"] * r["seconds"] for r in records)
    share = lambda key: sum(r[key] for r in records) / seconds
    result = {"tokens_per_s": tokens / seconds, "tp": share("tp_comm_seconds"),
              "pp": share("pp_wait_seconds"), "dp": share("dp_comm_seconds")}
    if args.plan:
        result.update(prediction(stdout))
    return result


def link_gbps(rate):
    """A tc rate ("1gbit", "100mbit", "500kbit") in GB/s, as TPF_NET_GBPS takes it."""
    number = re.fullmatch(r"([0-9.]+)(k|m|g)bit", rate)
    if not number:
        sys.exit(f"--rate {rate}: expected a number with kbit, mbit or gbit, e.g. 1gbit")
    return float(number.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[number.group(2)] / 8e9


def prediction(stdout):
    """The planner's tokens/s and bubble share from `tpf train --predict`'s line."""
    line = re.search(r"the planner predicts (\d+) tokens/s at \S+ on this-host[^(]* \((.*)\)",
                     stdout)
    if not line:
        sys.exit("tpf train --predict printed no prediction:\n" + stdout)
    bubble = re.search(r"PP bubble (\d+)%", line.group(2))
    return {"planned_tokens_per_s": float(line.group(1)),
            "planned_bubble": float(bubble.group(1)) / 100 if bubble else 0.0}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpf", default="build/tpf")
    parser.add_argument("--data", required=True)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--grad-accum", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--plan", action="store_true",
                        help="the planner's prediction of each run (tpf train --predict)")
    parser.add_argument("--hosts", type=int, default=1,
                        help="run across this many emulated hosts (root)")
    parser.add_argument("--rate", default="1gbit", help="the emulated links' cap (tc units)")
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    if args.hosts > 1:
        link_gbps(args.rate)  # a bad rate stops here, before any namespace is made
    args.tpf = os.path.abspath(args.tpf)
    args.cluster = f"tpfl{os.getpid()}"
    hosts_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "scripts", "emulated-hosts.sh")
    results = {case: [] for case in args.cases}
    with tempfile.TemporaryDirectory() as workdir:
        if args.hosts > 1:
            subprocess.run([hosts_script, "up", args.cluster, str(args.hosts), args.rate],
                           check=True)
        try:
            for round_ in range(args.repeat):
                for i, case in enumerate(args.cases):
                    results[case].append(run(args, case, workdir, f"{round_}-{i}"))
        finally:
            if args.hosts > 1:
                subprocess.run([hosts_script, "down", args.cluster], check=True)
    where = f"{args.hosts} emulated hosts, links capped at {args.rate}; " if args.hosts > 1 else ""
    print(f"# {args.preset}, {args.grad_accum} micro-batches per step, {args.steps} steps, "
          f"median of {args.repeat}; {where}{args.threads} BLAS thread(s) per rank, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    planned = " planned  error bubble %" if args.plan else ""
    print(f"{'case':40} {'tokens/s':>9} {'ratio':>6} {'TP %':>6} {'PP wait %':>9} {'DP %':>6}"
          f"{planned}  runs")
    base = statistics.median(r["tokens_per_s"] for r in results[args.cases[0]])
    errors = []
    for case in args.cases:
        runs = results[case]
        rate = statistics.median(r["tokens_per_s"] for r in runs)
        med = lambda key: statistics.median(r[key] for r in runs)
        row = (f"{case:40} {rate:9.0f} {rate / base:6.2f} {100 * med('tp'):6.1f} "
               f"{100 * med('pp'):9.1f} {100 * med('dp'):6.1f}")
        if args.plan:
            plan_rate = med("planned_tokens_per_s")
            errors.append(plan_rate / rate - 1)
            row += f" {plan_rate:8.0f} {100 * errors[-1]:+5.1f}% {100 * med('planned_bubble'):8.1f}"
        print(row + "  " + " ".join(f"{r['tokens_per_s']:.0f}" for r in runs))
    if errors:
        print(f"# planner error (planned / measured tokens/s - 1): mean |error| "
              f"{100 * statistics.mean(abs(e) for e in errors):.1f}%, max "
              f"{100 * max(abs(e) for e in errors):.1f}%")


if __name__ == "__main__":
    sys.exit(main())
