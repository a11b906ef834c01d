#!/usr/bin/env python3
"""Tokens/s and the step-time breakdown of `tpf train` at several layouts, side by side.

Each case is a layout with optional config overrides, LAYOUT[:key=value[,key=value]] (train keys
bare or as train.KEY, model keys as model.KEY), e.g.
  tp=2   pp=2   dp=2,zero1   tp=2:tp_comm_overlap=false   pp=4:model.layers=16
The cases run one after another, --repeat rounds (alternating, so that a slow spell of a shared
machine hits them alike); each run's rate is the tokens of its steps after the first over their
time, from log.jsonl, and the table shows the median over rounds and its ratio to the first case.
Breakdown columns are rank 0's shares of step time (see src/model/trainer.h).

With --plan, each run is followed by `tpf plan --cluster this-host` for the same model and layout
(this machine's rates measured anew each time, so both sides of a round see the same spell of the
shared machine); the table adds the planner's median tokens/s, its error against the measured
median, and its predicted bubble share.

Usage: bench/train/layouts.py --data TEXT [--tpf build/tpf] [--preset small] [--grad-accum 4]
         [--steps 12] [--repeat 3] [--threads 1] [--plan] CASE [CASE ...]
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
    result = {"tokens_per_s": tokens / seconds, "tp": share("tp_comm_seconds"),
              "pp": share("pp_wait_seconds"), "dp": share("dp_comm_seconds")}
    if args.plan:
        result.update(predict(args, layout, out, workdir, index))
    return result


def predict(args, layout, out, workdir, index):
    """The planner's tokens/s and bubble share for the run in `out` (its config.json)."""
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    model, train = config["model"], config["train"]
    model_file = os.path.join(workdir, f"model-{index}.yaml")
    with open(model_file, "w") as f:  # the trainer's GPT-2-style byte-level model
        f.write(f"name: tpf-train\nlayers: {model['layers']}\nhidden: {model['width']}\n"
                f"heads: {model['heads']}\nseq_len: {model['context']}\nvocab: {model['vocab']}\n"
                f"global_batch: {train['batch_size'] * train['grad_accum']}\nmlp: gelu\n"
                "norm: layernorm\nbiases: true\npositions: learned\ntied_embeddings: true\n")
    sizes = [part for part in layout.split(",") if "=" in part]
    overlap = ["dp_grads"] if train.get("dp_comm_overlap", True) else []
    if train.get("tp_comm_overlap", False):
        overlap.append("tp")
    plan_layout = ",".join(sizes + [
        f"mb={train['batch_size']}", f"gb={train['batch_size'] * train['grad_accum']}",
        "precision=fp32", "attention=materialized", "overlap=" + ("+".join(overlap) or "none"),
        f"zero={1 if 'zero1' in layout.split(',') else 0}"])
    text = subprocess.run([args.tpf, "plan", "--cluster", "this-host", "--model", model_file,
                           "--layout", plan_layout, "--json"],
                          check=True, capture_output=True, text=True).stdout
    estimate = json.loads(text)["estimate"]
    return {"planned_tokens_per_s": estimate["tokens_per_s"],
            "planned_bubble": estimate["breakdown"]["pp_bubble_s"] / estimate["step_s"]}


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
                        help="predict each run with tpf plan --cluster this-host")
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
