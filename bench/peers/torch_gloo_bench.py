#!/usr/bin/env python3
"""PyTorch torch.distributed (gloo backend) baseline for `tpf bench`.

Same sweep and conventions as tpf bench and the C++ peers (apps/tpf/bench_spec.cc): f32, sum,
`bytes` is the largest buffer a rank touches, time = mean of ITERS calls after WARMUP calls and a
barrier, maximised over ranks; one JSON line per size on rank 0's stdout.

Let it spawn its own ranks with --nprocs N (torch.multiprocessing, file:// rendezvous), or start
one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (env:// rendezvous),
e.g. under torchrun. Note: Debian 12's torchrun (torch 1.13 on Python 3.11) dies in its elastic
agent ("'NoneType' object has no attribute 'get'") before starting any rank, so use --nprocs.

PyTorch 1.13's gloo backend has no reduce_scatter ("ProcessGroupGloo does not support
reduce_scatter"); for that collective this script prints nothing and says so on stderr.
"""
import argparse
import json
import os
import sys
import tempfile
import time


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    suffix = t[-1] if t and t[-1] in "KMG" else ""
    number = t[: len(t) - len(suffix)]
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"expected a size like 8, 64K, 1M, got {text!r}")
    return int(number) * units[suffix]


def sweep(min_bytes, max_bytes, factor):
    sizes = [min_bytes]
    while sizes[-1] <= max_bytes // factor:
        sizes.append(sizes[-1] * factor)
    return sizes


def shape(collective, nbytes, nranks, elem=4):
    """(count, bytes) as in bench_spec.cc; None if a rank would get no element."""
    total = nbytes // elem
    if collective in ("all_reduce", "broadcast"):
        return (total, total * elem) if total else None
    count = total // nranks
    return (count, count * nranks * elem) if count else None


def bus_factor(collective, n):
    return {"all_reduce": 2.0 * (n - 1) / n, "broadcast": 1.0}.get(collective, (n - 1) / n)


def fill(torch, rank, numel):
    # Same values as peer_fill() in peer_common.cc.
    idx = torch.arange(numel, dtype=torch.int64)
    return ((rank * 7 + idx * 3) % 5 - 2).to(torch.float32)


def run_rank(rank, nranks, args, init_method):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=nranks)
    torch.set_num_threads(1)  # one core per rank, like the other implementations
    try:
        for coll in args.collectives:
            if coll == "reduce_scatter":
                if rank == 0:
                    print("torch_gloo_bench: torch %s gloo has no reduce_scatter; skipped"
                          % torch.__version__, file=sys.stderr)
                continue
            for nbytes in sweep(args.min_bytes, args.max_bytes, args.factor):
                sh = shape(coll, nbytes, nranks)
                if sh is None:
                    continue
                count, rbytes = sh
                send = fill(torch, rank, count)
                if coll == "all_reduce":
                    # all_reduce is in place in torch; copying into the output first is what an
                    # out-of-place user pays, so it is part of the time.
                    out = torch.empty_like(send)

                    def op():
                        out.copy_(send)
                        dist.all_reduce(out)
                    check = lambda: out
                elif coll == "all_gather":
                    outs = [torch.empty(count) for _ in range(nranks)]

                    def op():
                        dist.all_gather(outs, send)
                    check = lambda: torch.cat(outs)
                else:  # broadcast
                    buf = send.clone() if rank == 0 else torch.empty(count)

                    def op():
                        dist.broadcast(buf, 0)
                    check = lambda: buf
                for _ in range(args.warmup):
                    op()
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    op()
                mine = (time.perf_counter() - t0) / args.iters * 1e6
                t = torch.tensor([mine], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                time_us = t.item()

                if coll == "broadcast" and rank != 0:
                    buf.fill_(-1e30)
                op()
                got = check()
                if coll == "all_reduce":
                    want = sum(fill(torch, r, count) for r in range(nranks))
                elif coll == "all_gather":
                    want = torch.cat([fill(torch, r, count) for r in range(nranks)])
                else:
                    want = fill(torch, 0, count)
                wrong = torch.tensor([int((got != want).sum().item())], dtype=torch.int64)
                dist.all_reduce(wrong)
                if rank == 0:
                    algbw = rbytes / time_us / 1e3 if time_us > 0 else 0.0
                    print(json.dumps({
                        "impl": "torch", "collective": coll, "nranks": nranks, "dtype": "f32",
                        "bytes": rbytes, "count": rbytes // 4, "time_us": time_us,
                        "algbw": algbw, "busbw": algbw * bus_factor(coll, nranks),
                        "wrong": int(wrong.item())}), flush=True)
    finally:
        dist.destroy_process_group()


def spawned(rank, nranks, args, init_method):
    run_rank(rank, nranks, args, init_method)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-c", dest="collectives", default=",".join(COLLECTIVES),
                   help="comma-separated list of " + ",".join(COLLECTIVES))
    p.add_argument("-b", dest="min_bytes", type=parse_size, default=8)
    p.add_argument("-e", dest="max_bytes", type=parse_size, default=32 << 20)
    p.add_argument("-f", dest="factor", type=int, default=2)
    p.add_argument("-n", dest="iters", type=int, default=20)
    p.add_argument("-w", dest="warmup", type=int, default=5)
    p.add_argument("--nprocs", type=int, default=0,
                   help="spawn this many ranks (default: read RANK/WORLD_SIZE from torchrun)")
    args = p.parse_args()
    args.collectives = [c for c in args.collectives.split(",") if c]
    bad = [c for c in args.collectives if c not in COLLECTIVES]
    if bad or args.factor < 2 or args.iters < 1 or args.warmup < 0 or args.min_bytes > args.max_bytes:
        p.error("bad arguments: collectives must be among %s, -f >= 2, -n >= 1, -w >= 0, -b <= -e"
                % ",".join(COLLECTIVES))

    if args.nprocs > 0:
        import torch.multiprocessing as mp
        with tempfile.TemporaryDirectory(prefix="torch_gloo_bench.") as d:
            init = "file://" + os.path.join(d, "rendezvous")
            mp.spawn(spawned, args=(args.nprocs, args, init), nprocs=args.nprocs, join=True)
        return
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        p.error("start under torchrun, or pass --nprocs N")
    run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args, "env://")


if __name__ == "__main__":
    main()
