#!/usr/bin/env python3
"""Training throughput of the GEMM-bound benchmark model (preset gpt-6x768: 6 layers, width 768,
12 heads, context 256, batch 8) in alternation, several rounds, medians:
  tpf T=1 with 1 and with 2 BLAS threads, tpf T=2 (1 thread per rank), PyTorch with 1 and 2 threads.
Every run is pinned (taskset) to as many cores as it has threads, and OMP/OpenBLAS are told the
same count, so "1 thread" means one core for every implementation.
Prints a markdown table and writes the raw runs as JSON.

Usage: bench/gpt/compare.py [--build build-rel] [--data FILE] [--rounds 3] [--steps 6]
                            [--json docs/results/gpt-6x768.json]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARY = re.compile(r"tpf train: \d+ steps, loss [\d.]+ -> [\d.]+, ([\d.]+) tokens/s at TP=(\d+) .*?OpenBLAS (\S+) kernels\), ([\d.]+)% of step time")


def default_data():
    """Concatenated fortunes (Debian's `fortunes` package) if present."""
    path = os.path.join(tempfile.gettempdir(), "tpf-bench-text.txt")
    if not os.path.exists(path):
        root = "/usr/share/games/fortunes"
        with open(path, "wb") as out:
            for name in sorted(os.listdir(root)):
                full = os.path.join(root, name)
                if "." not in name and os.path.isfile(full):
                    out.write(open(full, "rb").read())
    return path


def python_with_torch():
    for py in ("/usr/bin/python3", sys.executable, "python3"):
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


def pinned(cores, threads):
    """Runs on exactly `cores` cores (taskset) with every threading library told `threads`:
    Debian's torch does not pass set_num_threads() on to OpenBLAS, so without both the
    "1 thread" PyTorch run used two cores."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    return ["taskset", "-c", ",".join(str(c) for c in range(cores))], env


def run_tpf(build, data, steps, ranks, threads):
    tpf = os.path.join(build, "tpf")
    prefix, env = pinned(ranks * threads, threads)
    cmd = prefix + [tpf, "run", "-n", str(ranks), "--", tpf, "train", "--preset", "gpt-6x768",
                    "--data", data, "--steps", str(steps), "--threads", str(threads), "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    m = SUMMARY.search(out)
    if not m:
        raise RuntimeError("no summary line in:\n" + out)
    return {"tokens_per_s": float(m.group(1)), "comm_share": float(m.group(4)) / 100, "blas_kernels": m.group(3)}


def run_torch(python, data, steps, threads):
    prefix, env = pinned(threads, threads)
    cmd = prefix + [python, os.path.join(HERE, "torch_train.py"), "--data", data, "--steps",
                    str(steps), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--data", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    data = a.data or default_data()
    python = python_with_torch()
    configs = [("tpf T=1, 1 thread", lambda: run_tpf(a.build, data, a.steps, 1, 1)),
               ("tpf T=1, 2 threads", lambda: run_tpf(a.build, data, a.steps, 1, 2)),
               ("tpf T=2, 1 thread/rank", lambda: run_tpf(a.build, data, a.steps, 2, 1))]
    if python:
        configs += [("PyTorch, 1 thread", lambda: run_torch(python, data, a.steps, 1)),
                    ("PyTorch, 2 threads", lambda: run_torch(python, data, a.steps, 2))]
    else:
        print("python3-torch not found: PyTorch rows skipped", file=sys.stderr)
    runs = {name: [] for name, _ in configs}
    for r in range(a.rounds):
        for name, fn in configs:
            result = fn()
            runs[name].append(result)
            print(f"round {r + 1}: {name}: {result['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    med = {name: statistics.median(x["tokens_per_s"] for x in rs) for name, rs in runs.items()}
    base = med["tpf T=1, 1 thread"]
    print(f"| configuration | tokens/s (median of {a.rounds}) | vs tpf T=1, 1 thread | comm share |")
    print("|---|---:|---:|---:|")
    for name in med:
        comm = runs[name][0].get("comm_share")
        comm_text = f"{100 * statistics.median(x['comm_share'] for x in runs[name]):.1f} %" if comm is not None else "-"
        print(f"| {name} | {med[name]:.0f} | {med[name] / base:.2f} | {comm_text} |")
    kernels = runs["tpf T=1, 1 thread"][0]["blas_kernels"]
    print(f"\nOpenBLAS kernels: {kernels} (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": "gpt-6x768", "steps": a.steps, "rounds": a.rounds, "runs": runs,
                       "openblas_kernels": kernels,
                       "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
                       "pinning": "taskset to as many cores as threads; OMP_NUM_THREADS and "
                                  "OPENBLAS_NUM_THREADS set to the thread count",
                       "median_tokens_per_s": med}, f, indent=1)


if __name__ == "__main__":
    main()
