#!/usr/bin/env python3
"""all_reduce from Python against the C++ fabric and torch's gloo, on this machine:
for each rank count and dtype, `tpf bench` (C++, in place) and torch_backend_bench.py (tpf through
torch.distributed, the tpfabric package directly, gloo) run in alternation, --rounds times each;
the table gives the medians of their medians and the ratios

  gloo/tpf     torch.distributed with gloo over with tpf (above 1: tpf faster)
  torch/bench  tpf through torch.distributed over `tpf bench` (the cost of Python and torch)
  pkg/bench    the package directly over `tpf bench` (the cost of Python alone)

Usage: /usr/bin/python3 bench/python/compare.py [--nprocs 2 4] [--dtypes f32 bf16]
       [--max-bytes N] [--rounds R] [--json FILE]      (from the repository root, after a build)
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
parser = argparse.ArgumentParser()
parser.add_argument("--build", default=os.path.join(ROOT, "build"))
parser.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
parser.add_argument("--dtypes", nargs="+", default=["f32", "bf16"])
parser.add_argument("--max-bytes", type=int, default=256 << 20)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--json", help="write every median here")
args = parser.parse_args()
tpf = os.path.join(args.build, "tpf")
env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))


def run(cmd):
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"compare.py: {' '.join(cmd)} failed ({result.returncode}):\n"
                 f"{result.stdout[-3000:]}{result.stderr[-3000:]}")


def tpf_bench(n, dtype, path):
    # One process per size: within one sweep, `tpf bench`'s times at 2 MiB and above come out
    # either all fast or all 2-4x slower, process by process (cause not found, docs/python.md);
    # a job per size keeps one slow process from setting a whole column.
    times = {}
    nbytes = 8
    while nbytes <= args.max_bytes:
        run([tpf, "run", "-n", str(n), "--", tpf, "bench", "all_reduce", "-b", str(nbytes),
             "-e", str(nbytes), "-c", "0", "-d", dtype, "--json", path])
        with open(path) as f:
            times.update({row["bytes"]: row["ip"]["time_us"] for row in json.load(f)["rows"]})
        nbytes *= 4
    return times


def torch_bench(n, dtype, path):
    with socket.socket() as probe:  # a free port: --standalone's fixed 29400 may be taken
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run([sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
         "--nnodes", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
         "--nproc_per_node", str(n),
         os.path.join(ROOT, "bench", "python", "torch_backend_bench.py"), "--dtype", dtype,
         "--max-bytes", str(args.max_bytes), "--json", path])
    with open(path) as f:
        return {row["bytes"]: row for row in json.load(f)["rows"]}


results = []
with tempfile.TemporaryDirectory() as work:
    for n in args.nprocs:
        for dtype in args.dtypes:
            bench_runs, torch_runs = [], []
            for r in range(args.rounds):
                order = [0, 1] if r % 2 == 0 else [1, 0]
                for which in order:
                    if which == 0:
                        bench_runs.append(tpf_bench(n, dtype, os.path.join(work, "b.json")))
                    else:
                        torch_runs.append(torch_bench(n, dtype, os.path.join(work, "t.json")))
            print(f"\n# all_reduce {dtype}, {n} ranks: medians of {args.rounds} alternated runs, us")
            print(f"{'bytes':>10} {'tpf bench':>10} {'package':>10} {'torch tpf':>10} "
                  f"{'torch gloo':>10} {'gloo/tpf':>9} {'torch/bench':>11} {'pkg/bench':>9}")
            for nbytes in sorted(torch_runs[0]):
                if nbytes not in bench_runs[0]:
                    continue
                med = lambda key: statistics.median(t[nbytes][key] for t in torch_runs)  # noqa
                row = {"nranks": n, "dtype": dtype, "bytes": nbytes,
                       "tpf_bench_us": statistics.median(b[nbytes] for b in bench_runs),
                       "package_us": med("package_us"), "torch_tpf_us": med("tpf_us"),
                       "torch_gloo_us": med("gloo_us") if "gloo_us" in torch_runs[0][nbytes]
                       else None}
                results.append(row)
                gloo = row["torch_gloo_us"]
                gloo_text = f"{gloo:.1f}" if gloo else "-"
                ratio_text = f"{gloo / row['torch_tpf_us']:.2f}" if gloo else "-"
                print(f"{nbytes:>10} {row['tpf_bench_us']:>10.1f} {row['package_us']:>10.1f} "
                      f"{row['torch_tpf_us']:>10.1f} {gloo_text:>10} {ratio_text:>9} "
                      f"{row['torch_tpf_us'] / row['tpf_bench_us']:>11.2f} "
                      f"{row['package_us'] / row['tpf_bench_us']:>9.2f}", flush=True)
if args.json:
    with open(args.json, "w") as out:
        json.dump(results, out, indent=1)
