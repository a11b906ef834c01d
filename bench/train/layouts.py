#!/usr/bin/env python3
"""Tokens/s and the step-time breakdown of `tpf train` at several layouts, side by side.

Each case is a layout with optional config overrides, LAYOUT[:key=value[,key=value]] (train keys
bare or as train.KEY, model keys as model.KEY), e.g.
  tp=2   pp=2   dp=2,zero1   tp=2:tp_comm_overlap=false   pp=4:model.layers=16
The cases run one after another, --repeat rounds (alternating, so that a slow spell of a shared
machine hits them alike); each run's rate is the tokens of its steps after the first over their
time, from log.jsonl, and the table shows the median over rounds and its ratio to the first case.
Breakdown columns are rank 0's shares of step time (see src/model/trainer.h).

Usage: bench/train/layouts.py --data TEXT [--tpf build/tpf] [--preset small] [--grad-accum 4]
         [--steps 12] [--repeat 3] [--threads 1] CASE [CASE ...]
"""
import argparse
import json
import math
import os
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
    ranks = math.prod(int(part.split("=")[1]) for part in layout.split(",") if "=" in part)
    return layout, sections, ranks


def run(args, case, workdir, index):
    layout, overrides, ranks = parse_case(case)
    train = {"grad_accum": args.grad_accum, "steps": args.steps, "log_every": 10**6}
    train.update(overrides["train"])
    config = os.path.join(workdir, f"config-{index}.json")
    with open(config, "w") as f:
        json.dump({"preset": args.preset, "model": overrides["model"], "train": train}, f)
    out = os.path.join(workdir, f"run-{index}")
    command = [args.tpf, "run", "-n", str(ranks), "--", args.tpf, "train", "--config", config,
               "--layout", layout, "--data", args.data, "--out", out, "--quiet",
               "--threads", str(args.threads)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "log.jsonl")) as f:
        records = [json.loads(line) for line in f][1:]  # the first step touches memory first
    seconds = sum(r["seconds"] for r in records)
    tokens = sum(r["tokens_per_s"] * r["seconds"] for r in records)
    share = lambda key: sum(r[key] for r in records) / seconds
    return {"tokens_per_s": tokens / seconds, "tp": share("tp_comm_seconds"),
            "pp": share("pp_wait_seconds"), "dp": share("dp_comm_seconds")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tpf", default="build/tpf")
    parser.add_argument("--data", required=True)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--grad-accum", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    results = {case: [] for case in args.cases}
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(args.repeat):
            for i, case in enumerate(args.cases):
                results[case].append(run(args, case, workdir, f"{round_}-{i}"))
    print(f"# {args.preset}, {args.grad_accum} micro-batches per step, {args.steps} steps, "
          f"median of {args.repeat}; {args.threads} BLAS thread(s) per rank, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"{'case':40} {'tokens/s':>9} {'ratio':>6} {'TP %':>6} {'PP wait %':>9} {'DP %':>6}  runs")
    base = statistics.median(r["tokens_per_s"] for r in results[args.cases[0]])
    for case in args.cases:
        runs = results[case]
        rate = statistics.median(r["tokens_per_s"] for r in runs)
        med = lambda key: 100 * statistics.median(r[key] for r in runs)
        print(f"{case:40} {rate:9.0f} {rate / base:6.2f} {med('tp'):6.1f} {med('pp'):9.1f} "
              f"{med('dp'):6.1f}  " + " ".join(f"{r['tokens_per_s']:.0f}" for r in runs))


if __name__ == "__main__":
    sys.exit(main())
