"""DDP training steps through torch.distributed with the "tpf" backend against "gloo", side by
side in one job: two copies of the same model, each wrapped by DDP over one of the backends, take
steps in alternation on the same batches. Rank 0 prints the median step time of each and
gloo / tpf (above 1: tpf faster). Run under torchrun, e.g.

  PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 \\
      --standalone --nproc_per_node 2 bench/python/ddp_bench.py [--width 1024] [--steps 30]
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import tpfabric.torch  # noqa: F401  (registers "tpf")

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=1024, help="hidden width of the 4-layer MLP")
parser.add_argument("--batch", type=int, default=32, help="rows per rank and step")
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()

dist.init_process_group("tpf")
rank = dist.get_rank()
gloo = dist.new_group(backend="gloo")


def model():
    torch.manual_seed(0)
    w = args.width
    return torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.GELU(), torch.nn.Linear(w, w),
                               torch.nn.GELU(), torch.nn.Linear(w, w), torch.nn.GELU(),
                               torch.nn.Linear(w, w))


runs = {"tpf": torch.nn.parallel.DistributedDataParallel(model()),
        "gloo": torch.nn.parallel.DistributedDataParallel(model(), process_group=gloo)}
optimizers = {name: torch.optim.SGD(m.parameters(), lr=1e-3) for name, m in runs.items()}
params = sum(p.numel() for p in runs["tpf"].parameters())
gen = torch.Generator().manual_seed(rank)
times = {name: [] for name in runs}
for step in range(args.steps + 3):  # 3 warm-up steps
    batch = torch.randn(args.batch, args.width, generator=gen)
    for name, ddp in runs.items():
        dist.barrier()
        start = time.perf_counter()
        optimizers[name].zero_grad()
        ddp(batch).square().mean().backward()
        optimizers[name].step()
        if step >= 3:
            times[name].append(time.perf_counter() - start)
if rank == 0:
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"# DDP, {dist.get_world_size()} ranks, {params / 1e6:.1f} M parameters "
          f"({params * 4 / 2**20:.0f} MiB of f32 gradients), batch {args.batch} per rank, "
          f"median of {args.steps} steps")
    print(f"tpf {med['tpf']:.1f} ms  gloo {med['gloo']:.1f} ms  gloo/tpf {med['gloo'] / med['tpf']:.2f}")
dist.destroy_process_group()
