"""all_reduce through torch.distributed with the "tpf" backend against torch's gloo, side by side
in one job, and through the tpfabric package called directly (no torch layer), so that the cost
of each layer shows. Run under torchrun (bench/python/compare.py runs it beside `tpf bench`):

  PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 \\
      --standalone --nproc_per_node 2 bench/python/torch_backend_bench.py [--dtype bf16]

For each size the contenders run in alternation, --rounds times each; a run times a number of
calls after a barrier (enough for ~32 MiB of traffic, 5 to 200). Rank 0 prints the median time per
call and gloo / tpf (above 1: tpf faster). gloo refuses bfloat16 all_reduce in torch 1.13, so
with --dtype bf16 it is left out.
"""

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import tpfabric.torch  # noqa: F401  (registers "tpf")

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
          "f64": torch.float64}
parser = argparse.ArgumentParser()
parser.add_argument("--min-bytes", type=int, default=8)
parser.add_argument("--max-bytes", type=int, default=256 << 20)
parser.add_argument("--factor", type=int, default=4)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
parser.add_argument("--json", help="rank 0 writes the medians here")
args = parser.parse_args()
dtype = DTYPES[args.dtype]
ELEMENT_BYTES = torch.tensor([], dtype=dtype).element_size()

dist.init_process_group("tpf")
rank, size = dist.get_rank(), dist.get_world_size()
tpf_group = dist.group.WORLD
gloo_group = dist.new_group(backend="gloo")
comm = tpf_group.communicator  # the tpfabric.Communicator under the backend

# The package first: a run right after gloo's is slowed by gloo's threads winding down, which the
# barrier before each run (through tpf) leaves to gloo's own runs as far as it can.
contenders = ["package", "tpf"] + (["gloo"] if dtype != torch.bfloat16 else [])


def make_runner(name, nbytes):
    x = torch.ones(max(1, nbytes // ELEMENT_BYTES), dtype=dtype)
    if name == "package":
        return lambda: comm.all_reduce(x)
    group = tpf_group if name == "tpf" else gloo_group
    return lambda: dist.all_reduce(x, group=group)


def timed(run, iters):
    dist.barrier()  # through tpf: gloo's threads stay quiet before a run that is not gloo's
    start = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - start) / iters


rows = []
if rank == 0:
    print(f"# all_reduce, {args.dtype}, {size} ranks; median of {args.rounds} runs, us per call")
    print(f"{'bytes':>10} " + " ".join(f"{c:>10}" for c in contenders) +
          (f" {'gloo/tpf':>9}" if "gloo" in contenders else ""))
nbytes = args.min_bytes
while nbytes <= args.max_bytes:
    runners = {name: make_runner(name, nbytes) for name in contenders}
    iters = max(5, min(200, (32 << 20) // nbytes))
    for run in runners.values():  # warm-up: first touch, connections
        timed(run, 2)
    samples = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name in contenders:
            samples[name].append(timed(runners[name], iters))
    if rank == 0:
        med = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
        rows.append({"bytes": nbytes, **{f"{name}_us": t for name, t in med.items()}})
        line = f"{nbytes:>10} " + " ".join(f"{med[c]:>10.1f}" for c in contenders)
        if "gloo" in med:
            line += f" {med['gloo'] / med['tpf']:>9.2f}"
        print(line, flush=True)
    nbytes *= args.factor
if rank == 0 and args.json:
    with open(args.json, "w") as out:
        json.dump({"collective": "all_reduce", "dtype": args.dtype, "nranks": size,
                   "rounds": args.rounds, "rows": rows}, out, indent=1)
dist.destroy_process_group()
