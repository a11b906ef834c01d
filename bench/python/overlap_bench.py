"""How much of an asynchronous operation the caller's own work hides, from Python: the operation is
issued, the caller works for --compute-us microseconds (a sleep: its thread off the CPU, as while
a GPU computes), then waits. Rank 0 prints, per size, the slowest rank's mean time per call
outside the sleep (the part the work did not hide). Two forms:

  collective  tpfabric's own all_reduce_async(x).wait() (the package, no torch)
  torch_p2p   torch.distributed's irecv + isend through init_process_group("tpf"), then wait
              for both (their Works complete through the door's completer thread)

Run under torchrun (docs/results/overlap-waiters.txt has runs of both):

  PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 \\
      --standalone --nproc_per_node 2 bench/python/overlap_bench.py --form torch_p2p \\
      [--compute-us 1000] [--calls 200]
"""

import argparse
import time

import numpy as np

SIZES = (8, 1 << 20)  # bytes of f32


def timed_calls(one_call, calls, compute_s, barrier):
    for _ in range(20):
        one_call()
    barrier()
    start = time.perf_counter()
    for _ in range(calls):
        one_call()
    return (time.perf_counter() - start - calls * compute_s) / calls * 1e6


def collective(args):
    import tpfabric
    comm = tpfabric.Communicator.from_env()
    compute_s = args.compute_us / 1e6
    report = []
    for size in SIZES:
        x = np.full(size // 4, comm.rank, dtype=np.float32)

        def one_call():
            work = comm.all_reduce_async(x)
            if compute_s:
                time.sleep(compute_s)
            work.wait()

        mine = np.array([timed_calls(one_call, args.calls, compute_s, comm.barrier)])
        comm.all_reduce(mine, op="max")
        report.append(f"{size} B: {mine[0]:.1f} us")
    return comm.rank, report


def torch_p2p(args):
    import torch
    import torch.distributed as dist
    import tpfabric.torch  # noqa: F401  (registers "tpf")
    dist.init_process_group("tpf")
    rank = dist.get_rank()
    if dist.get_world_size() != 2:
        raise SystemExit("overlap_bench.py --form torch_p2p: run it on 2 ranks")
    peer = 1 - rank
    compute_s = args.compute_us / 1e6
    report = []
    for size in SIZES:
        out = torch.full((size // 4,), float(rank))
        into = torch.empty(size // 4)

        def one_call():
            requests = [dist.irecv(into, peer), dist.isend(out, peer)]
            if compute_s:
                time.sleep(compute_s)
            for request in requests:
                request.wait()

        mine = torch.tensor([timed_calls(one_call, args.calls, compute_s, dist.barrier)],
                            dtype=torch.float64)
        if into[0].item() != peer:
            raise SystemExit(f"rank {rank}: received {into[0].item()}, expected {peer}")
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        report.append(f"{size} B: {mine.item():.1f} us")
    dist.destroy_process_group()
    return rank, report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=("collective", "torch_p2p"), required=True)
    parser.add_argument("--compute-us", type=int, default=0)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    if args.compute_us < 0 or args.calls < 1:
        parser.error("--compute-us must be >= 0 and --calls >= 1")
    rank, report = (collective if args.form == "collective" else torch_p2p)(args)
    if rank == 0:
        print(f"{args.form}, compute {args.compute_us} us: " + "  ".join(report), flush=True)


if __name__ == "__main__":
    main()
