#!/usr/bin/env python3
"""Compare tpfabric's collectives with Open MPI, Gloo and PyTorch (gloo backend) on this machine.

For every rank count N and collective, the implementations run in ALTERNATION (tpf, mpi, gloo,
torch, then again, ROUNDS times, each round starting one implementation later), so that a noisy
neighbour, a frequency change or the run before hurts all of them alike. Each run sweeps the same sizes with the same definitions (apps/tpf/bench_spec.cc): bytes =
the largest buffer a rank touches, time = mean per call over ITERS calls after WARMUP calls,
maximised over ranks; the report takes the median over rounds.

Output: a table per (N, collective) on stdout with the ratio tpf time / best peer time (< 1: tpf
is faster), bench/results/peers-<stamp>.json with every sample, and bench/results/peers-<stamp>.svg,
bus bandwidth against message size, one panel per (collective, N).

  bench/peers/compare.py                       # N = 2 4 8, 8 B .. 256 MiB, factor 4, 3 rounds
  bench/peers/compare.py --quick               # CI smoke: N = 2, up to 1 MiB, 1 round
  bench/peers/compare.py --nranks 2 --collectives all_reduce --rounds 5
  bench/peers/compare.py --hosts 2 --rate 1gbit --nranks 2   # across 2 emulated hosts (root;
                                               # bench/peers/emulated.py): adds Open MPI's UCX path
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

import emulated

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
IMPLS = ("tpf", "mpi", "mpiucx", "gloo", "torch")  # mpiucx: across emulated hosts only
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather",
               "scatter", "all_to_all")
# Measured by tpf and Open MPI only (mpi_bench); Gloo's and torch's benches do the first four.
MPI_ONLY = ("reduce", "gather", "scatter", "all_to_all")
BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}
COLORS = {"tpf": "#d62728", "mpi": "#1f77b4", "mpiucx": "#9467bd", "gloo": "#2ca02c",
          "torch": "#ff7f0e"}


def human(nbytes):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return "%d%s" % (nbytes >> shift, unit)
    return str(nbytes)


def find_python_with_torch():
    for exe in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if exe and subprocess.run([exe, "-c", "import torch.distributed"],
                                  capture_output=True).returncode == 0:
            return exe
    return None


class Runner:
    """Builds the command line of each implementation and parses what it prints."""

    def __init__(self, args):
        self.args = args
        b = args.build
        self.tpf = os.path.join(b, "tpf")
        self.mpi_bench = os.path.join(b, "bench", "mpi_bench")
        self.gloo_bench = os.path.join(b, "bench", "gloo_bench")
        self.python = find_python_with_torch()
        self.mpirun = shutil.which("mpirun")
        self.launch = None  # set by main() across emulated hosts
        self.available = {}
        self.why_not = {}
        for impl in args.impls:
            ok, why = self._check(impl)
            self.available[impl] = ok
            if not ok:
                self.why_not[impl] = why
                print("compare.py: skipping %s: %s" % (impl, why), file=sys.stderr)

    def _check(self, impl):
        if impl == "tpf":
            return os.access(self.tpf, os.X_OK), "no %s (build the tpf target)" % self.tpf
        if impl == "mpiucx" and not self.args.hosts:
            return False, "Open MPI's UCX path is compared across emulated hosts only (--hosts)"
        if impl in ("mpi", "mpiucx"):
            return (os.access(self.mpi_bench, os.X_OK) and self.mpirun is not None,
                    "no %s or no mpirun (install openmpi-bin, libopenmpi-dev)" % self.mpi_bench)
        if impl == "gloo":
            return os.access(self.gloo_bench, os.X_OK), "no %s (install libgloo-dev)" % self.gloo_bench
        if impl == "torch":
            return self.python is not None, "no python with torch.distributed (python3-torch)"
        return False, "unknown implementation"

    def sweep_flags(self):
        a = self.args
        return ["-b", str(a.min_bytes), "-e", str(a.max_bytes), "-f", str(a.factor),
                "-n", str(a.iters), "-w", str(a.warmup)]

    def tpf_bench_args(self, coll):
        """`tpf bench`'s arguments: the sweep, checked, measuring only the compared placement so
        that it sends what the peers send (across emulated hosts the other placement's bytes
        would drain the links' token buckets, tc tbf's burst, before the compared one ran, which
        the peers' runs never do)."""
        return ["bench", coll, *self.sweep_flags(), "--placement", tpf_placement(coll), "-c", "1"]

    def run(self, impl, coll, n):
        """Returns {bytes: (time_us, wrong)} or None if this implementation cannot do it."""
        if impl == "torch" and coll == "reduce_scatter":
            return None  # PyTorch 1.13's gloo backend has no reduce_scatter
        if impl in ("gloo", "torch") and coll in MPI_ONLY:
            return None  # not in gloo_bench / torch_gloo_bench.py
        if self.launch is not None:  # across emulated hosts
            return rows_of(impl, coll, self.launch.run(impl, coll, n))
        if impl == "tpf":
            with tempfile.TemporaryDirectory(prefix="compare.") as d:
                out = os.path.join(d, "tpf.json")
                cmd = [self.tpf, "run", "-n", str(n), "--", self.tpf, *self.tpf_bench_args(coll),
                       "--json", out]
                self._exec(cmd)
                with open(out) as f:
                    return rows_of(impl, coll, f.read())
        if impl == "mpi":
            cmd = [self.mpirun, "--oversubscribe", "--allow-run-as-root", "--mca", "btl",
                   "self,vader", "-np", str(n)]
            if n > (os.cpu_count() or 1):
                cmd += ["--bind-to", "none"]  # binding more ranks than cores serialises them
            cmd += [self.mpi_bench, "-c", coll, *self.sweep_flags()]
        elif impl == "gloo":
            cmd = [self.gloo_bench, "-np", str(n), "-c", coll, *self.sweep_flags()]
        else:
            cmd = [self.python, os.path.join(HERE, "torch_gloo_bench.py"), "--nprocs", str(n),
                   "-c", coll, *self.sweep_flags()]
        return rows_of(impl, coll, self._exec(cmd))

    def _exec(self, cmd):
        if self.args.verbose:
            print("+ " + " ".join(cmd), file=sys.stderr)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.args.timeout)
        if p.returncode != 0:
            raise RuntimeError("%s exited with %d:\n%s" % (" ".join(cmd), p.returncode,
                                                          p.stderr[-2000:]))
        return p.stdout


def tpf_placement(coll):
    """The placement tpf is compared in: like for like, MPI_Bcast and torch's broadcast have a
    single buffer, so tpf's broadcast is compared in place; every other collective out of place."""
    return "ip" if coll == "broadcast" else "oop"


def rows_of(impl, coll, text):
    """{bytes: (time_us, wrong)} from tpf's --json document or a peer's JSON lines."""
    if impl == "tpf":
        doc = json.loads(text)
        mode = tpf_placement(coll)
        return {r["bytes"]: (r[mode]["time_us"], r[mode]["wrong"] or 0) for r in doc["rows"]}
    rows = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["bytes"]] = (r["time_us"], r.get("wrong") or 0)
    return rows


def median_table(samples):
    """samples[(coll, n, impl)][bytes] = [time_us, ...] -> same keys with the median."""
    return {k: {b: statistics.median(ts) for b, ts in v.items()} for k, v in samples.items()}


def print_tables(args, med, wrong):
    ratios = {}
    for n in args.nranks:
        for coll in args.collectives:
            sizes = sorted({b for impl in IMPLS for b in med.get((coll, n, impl), {})})
            if not sizes:
                continue
            where = (" across %d emulated hosts, links capped at %s" % (args.hosts, args.rate)
                     if args.hosts else "")
            print("\n## %s, N = %d%s (median of %d rounds; time per call in us)" %
                  (coll, n, where, args.rounds))
            impls = [i for i in IMPLS if i in args.impls]
            print(" | ".join(["%10s" % "size"] + ["%10s" % (i + " us") for i in impls] +
                             ["tpf/best-peer"]))
            for b in sizes:
                cells = []
                for impl in impls:
                    t = med.get((coll, n, impl), {}).get(b)
                    cells.append("%10.2f" % t if t is not None else "%10s" % "-")
                tpf = med.get((coll, n, "tpf"), {}).get(b)
                peers = [med[(coll, n, p)][b] for p in impls if p != "tpf"
                         if b in med.get((coll, n, p), {})]
                ratio = tpf / min(peers) if tpf is not None and peers else None
                ratios[(coll, n, b)] = ratio
                print("%10s | %s | %s" % (human(b), " | ".join(cells),
                                          "%.3f" % ratio if ratio is not None else "-"))
    bad = {k: v for k, v in wrong.items() if v}
    if bad:
        print("\nWRONG RESULTS:", bad)
    return ratios


def svg_chart(args, med):
    """Bus bandwidth (GB/s) against size (log2 x), one panel per (collective, N)."""
    import math
    panels = [(c, n) for c in args.collectives for n in args.nranks]
    pw, ph, cols = 360, 240, len(args.nranks)
    rows = (len(panels) + cols - 1) // cols
    W, H = max(cols * pw + 20, 520), rows * ph + 60
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="10">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="18" font-size="14">Bus bandwidth vs message size '
           '(median of %d rounds, higher is better)</text>' % args.rounds]
    for i, impl in enumerate([i for i in IMPLS if i in args.impls]):  # legend
        out.append('<rect x="%d" y="28" width="12" height="4" fill="%s"/>' % (10 + 80 * i, COLORS[impl]))
        out.append('<text x="%d" y="34">%s</text>' % (26 + 80 * i, impl))
    for k, (coll, n) in enumerate(panels):
        x0, y0 = 20 + (k % cols) * pw, 50 + (k // cols) * ph
        left, top, w, h = x0 + 40, y0 + 18, pw - 60, ph - 50
        series = {}
        for impl in IMPLS:
            pts = med.get((coll, n, impl), {})
            series[impl] = [(b, b / t / 1e3 * BUS_FACTOR[coll](n)) for b, t in sorted(pts.items()) if t > 0]
        allpts = [p for s in series.values() for p in s]
        out.append('<text x="%d" y="%d" font-size="12">%s, N=%d</text>' % (left, y0 + 12, coll, n))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' %
                   (left, top, w, h))
        if not allpts:
            continue
        lx0 = math.log2(min(b for b, _ in allpts))
        lx1 = max(math.log2(max(b for b, _ in allpts)), lx0 + 1)
        ymax = max(bw for _, bw in allpts) * 1.1 or 1.0
        X = lambda b: left + (math.log2(b) - lx0) / (lx1 - lx0) * w
        Y = lambda bw: top + h - bw / ymax * h
        for j in range(5):  # y grid
            v = ymax * j / 4
            out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (left, left + w, Y(v), Y(v)))
            out.append('<text x="%d" y="%.1f" text-anchor="end">%.2g</text>' % (left - 3, Y(v) + 3, v))
        step = max(1, int((lx1 - lx0) // 6))
        e = int(math.ceil(lx0))
        while e <= lx1:  # x ticks at powers of two
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (X(2 ** e), top + h + 12, human(2 ** e)))
            e += step
        out.append('<text x="%d" y="%d" text-anchor="middle">bytes</text>' % (left + w / 2, top + h + 24))
        out.append('<text x="%d" y="%d" transform="rotate(-90 %d %d)" text-anchor="middle">GB/s</text>' %
                   (x0 + 8, top + h / 2, x0 + 8, top + h / 2))
        for impl, pts in series.items():
            if pts:
                path = " ".join("%.1f,%.1f" % (X(b), Y(bw)) for b, bw in pts)
                out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (COLORS[impl], path))
    out.append("</svg>")
    return "\n".join(out)


def parse_size(text):
    t = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t[:-1] if mult > 1 else t) * mult


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--nranks", type=int, nargs="+", default=None, help="default 2 4 8")
    p.add_argument("--collectives", nargs="+", choices=COLLECTIVES, default=list(COLLECTIVES))
    p.add_argument("--impls", nargs="+", choices=IMPLS, default=None,
                   help="default: all (mpiucx across emulated hosts only)")
    p.add_argument("--rounds", type=int, default=None, help="default 3")
    p.add_argument("-b", dest="min_bytes", type=parse_size, default=8)
    p.add_argument("-e", dest="max_bytes", type=parse_size, default=None, help="default 256M")
    p.add_argument("-f", dest="factor", type=int, default=4)
    p.add_argument("-n", dest="iters", type=int, default=None, help="default 10")
    p.add_argument("-w", dest="warmup", type=int, default=None, help="default 2")
    p.add_argument("--quick", action="store_true",
                   help="CI smoke: N=2, up to 1 MiB, 1 round, 5 iterations")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="CMake build directory")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    p.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    p.add_argument("--hosts", type=int, default=0,
                   help="run across this many emulated hosts (root; N ranks placed host by host)")
    p.add_argument("--rate", default="1gbit", help="link cap across emulated hosts (tc tbf rate)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args()
    # A SIGTERM (timeout, a job's end) unwinds like an error, so the emulated cluster's `with`
    # removes its namespaces instead of leaving them behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    q = a.quick
    a.nranks = a.nranks or ([2] if q else [2, 4, 8])
    a.rounds = a.rounds or (1 if q else 3)
    a.max_bytes = a.max_bytes or ((1 << 20) if q else (256 << 20))
    a.iters = a.iters or (5 if q else 10)
    a.warmup = a.warmup if a.warmup is not None else (1 if q else 2)
    if a.factor < 2 or a.rounds < 1 or a.min_bytes > a.max_bytes or min(a.nranks) < 1:
        p.error("need -f >= 2, --rounds >= 1, -b <= -e and rank counts >= 1")
    a.impls = a.impls or [i for i in IMPLS if a.hosts or i != "mpiucx"]
    if a.hosts and any(n % a.hosts for n in a.nranks):
        p.error("across %d hosts every rank count must be a multiple of it" % a.hosts)
    if not a.hosts:
        return compare(a)
    with emulated.Cluster(a.hosts, a.rate) as cluster:
        return compare(a, cluster)


def compare(a, cluster=None):

    runner = Runner(a)
    if cluster is not None:
        runner.launch = emulated.Launch(runner, cluster, port=29400 + os.getpid() % 500)
    samples, wrong, failures = {}, {}, []
    for n in a.nranks:
        for coll in a.collectives:
            for rnd in range(a.rounds):
                # The alternation: one run of each, then the next round, each round starting one
                # implementation later, so that no implementation always runs right after the
                # same other one (a run after Open MPI's measured slower at its first size).
                shift = rnd % len(a.impls)
                for impl in a.impls[shift:] + a.impls[:shift]:
                    if not runner.available[impl]:
                        continue
                    try:
                        rows = runner.run(impl, coll, n)
                    except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as e:
                        failures.append("%s %s N=%d round %d: %s" % (impl, coll, n, rnd, e))
                        print("compare.py: " + failures[-1], file=sys.stderr)
                        continue
                    if rows is None:
                        continue
                    for b, (t, w) in rows.items():
                        samples.setdefault((coll, n, impl), {}).setdefault(b, []).append(t)
                        wrong[(coll, n, impl)] = wrong.get((coll, n, impl), 0) + w
                    print("compare.py: %s %s N=%d round %d/%d done" % (impl, coll, n, rnd + 1, a.rounds),
                          file=sys.stderr)

    med = median_table(samples)
    ratios = print_tables(a, med, wrong)
    os.makedirs(a.out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    doc = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "processor": platform.processor()},
        "config": {k: v for k, v in vars(a).items() if k not in ("build", "out")},
        # The emulated links' token bucket (scripts/emulated-hosts.sh): sizes whose bytes fit it
        # pass faster than the link for whoever runs first, so the results depend on it.
        "emulated_burst": (os.environ.get("TPF_EMULATED_BURST", "1mb") if a.hosts else None),
        "skipped": runner.why_not,
        "failures": failures,
        "results": [
            {"collective": c, "nranks": n, "impl": i, "bytes": b, "times_us": ts,
             "median_us": med[(c, n, i)][b],
             "busbw": b / med[(c, n, i)][b] / 1e3 * BUS_FACTOR[c](n) if med[(c, n, i)][b] > 0 else 0,
             "ratio_tpf_best_peer": ratios.get((c, n, b)) if i == "tpf" else None,
             "wrong": wrong.get((c, n, i), 0)}
            for (c, n, i), per in sorted(samples.items()) for b, ts in sorted(per.items())],
    }
    if a.hosts:
        stamp = "hosts%d-%s-%s" % (a.hosts, a.rate, stamp)
    json_path = os.path.join(a.out, "peers-%s.json" % stamp)
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
    svg_path = os.path.join(a.out, "peers-%s.svg" % stamp)
    with open(svg_path, "w") as f:
        f.write(svg_chart(a, med))
    print("\nwrote %s and %s" % (os.path.relpath(json_path), os.path.relpath(svg_path)))
    return 1 if failures or any(wrong.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
