"""torch.distributed with backend "tpf" (tpfabric.torch) on 3 ranks under torchrun: every
collective torch 1.13 exposes on CPU tensors, against values computed here from the same
deterministic inputs (small integers: exact in every dtype, so results must match exactly), a
subgroup, the *_object variants, DDP against one process on the full batch and against DDP over
gloo, and a Megatron-style tensor-parallel MLP (autograd Functions over the backend) against the
unsharded module. Exits non-zero with a message naming the first failed check."""

import sys
import warnings

import torch
import torch.distributed as dist

import tpfabric
import tpfabric.torch  # noqa: F401  (registers the backend)

dist.init_process_group("tpf")
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 3, f"run on 3 ranks, not {size}"
assert dist.get_backend() == "tpf", dist.get_backend()
N = 11


def data(r, dtype=torch.float32, n=N, top=5):
    return ((torch.arange(n) * 7 + r * 3) % top + 1).to(dtype)


def check(what, got, expected):
    if got.dtype != expected.dtype or not torch.equal(got, expected):
        sys.exit(f"rank {rank}: {what}: got {got}, expected {expected}")


def reference(op, dtype, top):
    inputs = torch.stack([data(r, torch.float64, top=top) for r in range(size)])
    if op == dist.ReduceOp.SUM:
        out = inputs.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        out = inputs.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = inputs.min(0).values
    elif op == dist.ReduceOp.MAX:
        out = inputs.max(0).values
    else:
        out = inputs.sum(0) / size
    return out.to(dtype)


OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
for dtype in [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
              torch.int64, torch.int8, torch.uint8]:
    for op in OPS + ([dist.ReduceOp.AVG] if dtype.is_floating_point else []):
        top = 3 if op == dist.ReduceOp.PRODUCT else 5
        t = data(rank, dtype, top=top)
        dist.all_reduce(t, op)
        check(f"all_reduce {dtype} {op}", t, reference(op, dtype, top))

# bfloat16 all_reduce, which gloo refuses in torch 1.13.
t = torch.full((1000,), 0.5 * (rank + 1), dtype=torch.bfloat16)
dist.all_reduce(t)
check("all_reduce bf16 1000", t, torch.full((1000,), 3.0, dtype=torch.bfloat16))

tensors = [data(rank), data(rank, n=3)]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "will be deprecated"
    dist.all_reduce_coalesced(tensors)
check("all_reduce_coalesced [0]", tensors[0], reference(dist.ReduceOp.SUM, torch.float32, 5))
check("all_reduce_coalesced [1]", tensors[1], reference(dist.ReduceOp.SUM, torch.float32, 5)[:3])

work = dist.all_reduce(data(rank), async_op=True)
work.wait()
fut = dist.all_reduce(t2 := data(rank), async_op=True).get_future()
check("async all_reduce future", fut.wait()[0], reference(dist.ReduceOp.SUM, torch.float32, 5))

try:
    dist.all_reduce(data(rank), dist.ReduceOp.BAND)
    sys.exit(f"rank {rank}: BAND did not fail")
except tpfabric.InvalidArgumentError as e:
    assert "BAND is not supported" in str(e), e

t = data(rank)
dist.reduce(t, dst=1)
if rank == 1:
    check("reduce", t, reference(dist.ReduceOp.SUM, torch.float32, 5))
t = data(rank, torch.float64)
dist.broadcast(t, src=2)
check("broadcast", t, data(2, torch.float64))

# -- all_gather / reduce_scatter, the list and the tensor forms -----------------------------
outs = [torch.empty(2, N) for _ in range(size)]
dist.all_gather(outs, data(rank, n=2 * N).reshape(2, N))
for r in range(size):
    check(f"all_gather[{r}]", outs[r], data(r, n=2 * N).reshape(2, N))
big = torch.empty(size * N, dtype=torch.bfloat16)
dist.all_gather_into_tensor(big, data(rank, torch.bfloat16))
check("all_gather_into_tensor", big, torch.cat([data(r, torch.bfloat16) for r in range(size)]))

out = torch.empty(N)
dist.reduce_scatter(out, [data(rank + k) for k in range(size)])
check("reduce_scatter", out, sum(data(r + rank, torch.float64) for r in range(size)).float())
out = torch.empty(N, dtype=torch.int32)
dist.reduce_scatter_tensor(out, torch.cat([data(rank + k, torch.int32) for k in range(size)]),
                           op=dist.ReduceOp.MAX)
check("reduce_scatter_tensor", out,
      torch.stack([data(r + rank, torch.int32) for r in range(size)]).max(0).values)

# -- all_to_all: even, uneven splits (rows of a 2-d tensor), lists of uneven tensors --------
out = torch.empty(size * 2)
dist.all_to_all_single(out, torch.arange(size * 2.0) + 100 * rank)
check("all_to_all_single", out,
      torch.cat([torch.arange(rank * 2.0, rank * 2 + 2) + 100 * s for s in range(size)]))
in_splits = [rank + j + 1 for j in range(size)]  # rows to rank j
out_splits = [i + rank + 1 for i in range(size)]
inp = torch.cat([torch.full((c, 3), 10.0 * rank + j) for j, c in enumerate(in_splits)])
out = torch.empty(sum(out_splits), 3)
dist.all_to_all_single(out, inp, out_splits, in_splits)
check("all_to_all_single uneven", out,
      torch.cat([torch.full((c, 3), 10.0 * i + rank) for i, c in enumerate(out_splits)]))
outs = [torch.empty(i + rank + 1, dtype=torch.int64) for i in range(size)]
dist.all_to_all(outs, [torch.full((rank + j + 1,), 10 * rank + j) for j in range(size)])
for i in range(size):
    check(f"all_to_all[{i}]", outs[i], torch.full((i + rank + 1,), 10 * i + rank))

# -- gather / scatter -----------------------------------------------------------------------
gathered = [torch.empty(N) for _ in range(size)] if rank == 0 else None
dist.gather(data(rank), gathered, dst=0)
if rank == 0:
    for r in range(size):
        check(f"gather[{r}]", gathered[r], data(r))
out = torch.empty(N, dtype=torch.float16)
dist.scatter(out, [data(r, torch.float16) for r in range(size)] if rank == 1 else None, src=1)
check("scatter", out, data(rank, torch.float16))

# -- point to point: a ring, blocking pairs, batch_isend_irecv ------------------------------
nxt, prv = (rank + 1) % size, (rank - 1) % size
recv = torch.empty(1 << 15)
ops = [dist.P2POp(dist.isend, torch.full((1 << 15,), float(rank)), nxt),
       dist.P2POp(dist.irecv, recv, prv)]
for req in dist.batch_isend_irecv(ops):
    req.wait()
check("batch_isend_irecv ring", recv, torch.full((1 << 15,), float(prv)))
if rank == 0:
    dist.send(torch.arange(5.0), dst=2, tag=7)
elif rank == 2:
    got = torch.empty(5)
    dist.recv(got, src=0, tag=7)
    check("send/recv", got, torch.arange(5.0))
dist.barrier()

# -- the object variants (pickles through all_gather / broadcast / gather / scatter) --------
objects = [None] * size
dist.all_gather_object(objects, {"rank": rank, "text": "x" * rank})
assert objects == [{"rank": r, "text": "x" * r} for r in range(size)], objects
box = [("from", 1)] if rank == 1 else [None]
dist.broadcast_object_list(box, src=1)
assert box == [("from", 1)], box
got = [None] * size if rank == 2 else None
dist.gather_object(rank * 10, got, dst=2)
if rank == 2:
    assert got == [0, 10, 20], got
mine = [None]
dist.scatter_object_list(mine, [f"obj{r}" for r in range(size)] if rank == 0 else None, src=0)
assert mine == [f"obj{rank}"], mine

# -- a subgroup: created on member ranks only, with a communicator of its own ---------------
sub = dist.new_group([0, 2])
if rank in (0, 2):
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, group=sub)
    check("new_group([0, 2]) all_reduce", t, torch.tensor([4.0]))

# -- DDP against a serial reference and against gloo -----------------------------------------
def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def train(module, step_fn, steps=3):
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1234)
    for _ in range(steps):
        batches = [torch.randn(5, 8, generator=gen) for _ in range(size)]
        opt.zero_grad()
        step_fn(batches).backward()
        opt.step()


gloo = dist.new_group(backend="gloo")
# Small buckets: several all_reduce calls per step, from DDP's C++ reducer.
ddp = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.001)
train(ddp, lambda batches: ddp(batches[rank]).square().mean())
ddp_gloo = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.001,
                                                     process_group=gloo)
train(ddp_gloo, lambda batches: ddp_gloo(batches[rank]).square().mean())
# One process on the full batch: DDP averages the ranks' gradients, so the mean of the losses.
serial = make_model()
train(serial, lambda batches: sum(serial(b).square().mean() for b in batches) / size)
for (name, p), q, g in zip(ddp.module.named_parameters(), serial.parameters(),
                           ddp_gloo.module.parameters()):
    # float32: the ranks' gradient sum and the serial sum round differently (a few ulps).
    for other, label in [(q, "one process on the full batch"), (g, "DDP over gloo")]:
        if not torch.allclose(p, other, rtol=1e-5, atol=1e-6):
            sys.exit(f"rank {rank}: DDP parameter {name} differs from {label} by "
                     f"{(p - other).abs().max().item()}")
    copies = [torch.empty_like(p) for _ in range(size)]
    dist.all_gather(copies, p.detach())
    if not all(torch.equal(c, copies[0]) for c in copies):
        sys.exit(f"rank {rank}: DDP parameter {name} differs between ranks")


# -- a Megatron-style tensor-parallel MLP in plain PyTorch, against the unsharded module --------
class CopyToTensorParallel(torch.autograd.Function):
    """Identity forward; the input's gradient is summed over the ranks backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromTensorParallel(torch.autograd.Function):
    """The ranks' partial outputs summed forward; identity backward."""

    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


torch.manual_seed(7)
hidden = 4 * size
w1, b1 = torch.randn(hidden, 6, dtype=torch.float64), torch.randn(hidden, dtype=torch.float64)
w2, b2 = torch.randn(5, hidden, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
x = torch.randn(3, 6, dtype=torch.float64)
rows = slice(rank * hidden // size, (rank + 1) * hidden // size)
# Column-parallel first layer (rows of w1), row-parallel second (columns of w2).
shard = [t.clone().requires_grad_() for t in (w1[rows], b1[rows], w2[:, rows], b2)]
x_tp = x.clone().requires_grad_()
h = torch.nn.functional.gelu(torch.nn.functional.linear(CopyToTensorParallel.apply(x_tp),
                                                        shard[0], shard[1]))
y_tp = ReduceFromTensorParallel.apply(torch.nn.functional.linear(h, shard[2])) + shard[3]
y_tp.square().sum().backward()
full = [t.clone().requires_grad_() for t in (w1, b1, w2, b2)]
x_full = x.clone().requires_grad_()
y = torch.nn.functional.linear(torch.nn.functional.gelu(
    torch.nn.functional.linear(x_full, full[0], full[1])), full[2], full[3])
y.square().sum().backward()
# float64: the sharded sums differ from the unsharded ones by rounding only (~1e-16 relative).
for label, got, expected in [("output", y_tp, y), ("input grad", x_tp.grad, x_full.grad),
                             ("w1 grad", shard[0].grad, full[0].grad[rows]),
                             ("b1 grad", shard[1].grad, full[1].grad[rows]),
                             ("w2 grad", shard[2].grad, full[2].grad[:, rows]),
                             ("b2 grad", shard[3].grad, full[3].grad)]:
    if not torch.allclose(got, expected, rtol=1e-12, atol=1e-12):
        sys.exit(f"rank {rank}: tensor-parallel MLP {label} differs from the unsharded module by "
                 f"{(got - expected).abs().max().item()}")

dist.destroy_process_group()
print(f"rank {rank}: tpf torch backend: all checks passed")
