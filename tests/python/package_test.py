"""The tpfabric Python package on 3 ranks (run by tests/python/run_package_test.sh under
`tpf run -n 3`): every collective and dtype against a numpy reference computed here from the
same deterministic inputs, the async forms, buffers of every protocol, a torch store, split and
mesh, and the errors. Inputs are small integers, exact in every dtype, so results must match
exactly. Exits non-zero with a message naming the first failed check."""

import array
import os
import sys
import tempfile
import threading

import numpy as np
import torch
import torch.distributed as dist

import tpfabric as tpf

comm = tpf.Communicator.from_env(timeout=120)
rank, size = comm.rank, comm.size
assert size == 3, f"run on 3 ranks, not {size}"

NUMPY_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64]
N = 37  # not a multiple of anything the fabric chunks by


def data(r, n=N, dtype=np.float32, top=5):
    """Rank r's input: small integers 1..top, different on every rank."""
    return ((np.arange(n) * 7 + r * 3) % top + 1).astype(dtype)


def check(what, got, expected):
    got = np.asarray(got)
    if got.shape != np.shape(expected) or not np.array_equal(got, expected):
        sys.exit(f"rank {rank}: {what}: got {got!r}, expected {np.asarray(expected)!r}")


def reference(op, dtype):
    inputs = [data(r, dtype=np.float64, top=3 if op == "prod" else 5) for r in range(size)]
    if op == "sum":
        out = sum(inputs)
    elif op == "prod":
        out = np.prod(inputs, axis=0)
    elif op == "min":
        out = np.min(inputs, axis=0)
    elif op == "max":
        out = np.max(inputs, axis=0)
    else:  # avg; integer types truncate toward zero
        out = sum(inputs) / size
        if not np.issubdtype(dtype, np.floating):
            out = np.trunc(out)
    return out.astype(dtype)


# -- reductions over every numpy dtype and op, in place and into `out`, blocking and async ----
for dtype in NUMPY_DTYPES:
    for op in ["sum", "prod", "min", "max", "avg"]:
        if op == "avg" and dtype == np.float16:
            expected = (reference("sum", np.float64) / size).astype(np.float16)
        else:
            expected = reference(op, dtype)
        top = 3 if op == "prod" else 5
        x = data(rank, dtype=dtype, top=top)
        assert comm.all_reduce(x, op) is x
        check(f"all_reduce {dtype.__name__} {op}", x, expected)
        out = np.zeros(N, dtype)
        work = comm.all_reduce_async(data(rank, dtype=dtype, top=top), op=tpf.ReduceOp.__members__[op.upper()], out=out)
        assert work.wait() is out
        check(f"all_reduce_async {dtype.__name__} {op}", out, expected)
        y = data(rank, dtype=dtype, top=top)
        comm.reduce(y, root=1, op=op)
        if rank == 1:
            check(f"reduce {dtype.__name__} {op}", y, expected)

# bfloat16 has no numpy type: torch tensors through DLPack.
t = torch.from_numpy(data(rank)).to(torch.bfloat16)
comm.all_reduce(t, "sum")
check("all_reduce bf16 (torch)", t.float().numpy(), reference("sum", np.float32))
t = torch.from_numpy(data(rank, dtype=np.int64)).reshape(37, 1)
comm.all_reduce(t, "max")
check("all_reduce i64 (torch, 2-d)", t.reshape(-1).numpy(), reference("max", np.int64))

# -- data movement ----------------------------------------------------------------------------
b = data(rank) if rank == 2 else np.zeros(N, np.float32)
comm.broadcast(b, root=2)
check("broadcast", b, data(2))

g = np.zeros(size * N, np.int32)
comm.all_gather(data(rank, dtype=np.int32), g)
check("all_gather", g, np.concatenate([data(r, dtype=np.int32) for r in range(size)]))

rs = np.zeros(N, np.float64)
comm.reduce_scatter(np.concatenate([data(rank + k, dtype=np.float64) for k in range(size)]), rs)
check("reduce_scatter", rs, sum(data(r + rank, dtype=np.float64) for r in range(size)))

a2a = np.zeros(size * 4, np.int64)
comm.all_to_all(np.arange(size * 4, dtype=np.int64) + 100 * rank, a2a)
check("all_to_all", a2a,
      np.concatenate([np.arange(rank * 4, rank * 4 + 4) + 100 * src for src in range(size)]))

# all_to_allv: rank i sends i + j + 1 elements of value 10 i + j to rank j.
send_counts = [rank + j + 1 for j in range(size)]
recv_counts = [i + rank + 1 for i in range(size)]
send = np.concatenate([np.full(c, 10 * rank + j, np.float32) for j, c in enumerate(send_counts)])
recv = np.full(sum(recv_counts), -1, np.float32)
comm.all_to_allv(send, send_counts, recv, recv_counts)
expected = np.concatenate([np.full(c, 10 * i + rank, np.float32) for i, c in enumerate(recv_counts)])
check("all_to_allv", recv, expected)
recv_async = np.full(sum(recv_counts), -1, np.float32)
assert comm.all_to_allv_async(send, send_counts, recv_async, recv_counts).wait() is recv_async
check("all_to_allv_async", recv_async, expected)

gathered = np.zeros(size * N, np.uint8) if rank == 0 else None
comm.gather(data(rank, dtype=np.uint8), gathered, root=0)
if rank == 0:
    check("gather", gathered, np.concatenate([data(r, dtype=np.uint8) for r in range(size)]))
part = np.zeros(N, np.int8)
comm.scatter(np.concatenate([data(r, dtype=np.int8) for r in range(size)]) if rank == 1 else None,
             part, root=1)
check("scatter", part, data(rank, dtype=np.int8))

# Point to point, a ring: every rank posts its send before its receive (async: no deadlock).
ring = np.zeros(1 << 16, np.float32)
sent = comm.send_async(np.full(1 << 16, rank, np.float32), (rank + 1) % size)
comm.recv(ring, (rank - 1) % size)
sent.wait()
check("send/recv ring", ring, np.full(1 << 16, (rank - 1) % size, np.float32))
comm.barrier()
# Work.ended: a receive posted before any rank sends (the sends come after the barrier) has not
# ended; once waited for it has.
early = np.zeros(4, np.float32)
posted = comm.recv_async(early, (rank - 1) % size)
check("recv_async .ended before its send", posted.ended, False)
comm.barrier()
comm.send(np.full(4, rank, np.float32), (rank + 1) % size)
posted.wait()
check("recv_async .ended after wait", posted.ended, True)
check("recv_async after barrier", early, np.full(4, (rank - 1) % size, np.float32))

# -- the buffer protocol and reinterpretation -------------------------------------------------
ba = bytearray([rank + 1] * 5)
comm.all_reduce(ba, "max")
check("all_reduce bytearray", list(ba), [size] * 5)
arr = array.array("i", [rank] * 4)
comm.all_reduce(arr)
check("all_reduce array('i')", list(arr), [sum(range(size))] * 4)
bits = torch.full((4,), float(rank + 1), dtype=torch.bfloat16).view(torch.int16).numpy()
comm.all_reduce(bits, dtype="bf16")  # numpy uint16/int16 holding bfloat16 bits
check("all_reduce dtype='bf16' on int16 bits",
      torch.from_numpy(bits).view(torch.bfloat16).float().numpy(), np.full(4, 6.0, np.float32))

# A Work dropped unwaited, on an array nothing else holds: the communicator keeps the array alive
# until the operation completes (freed early, the sanitizer run in docs/python.md would show it).
comm.all_reduce_async(np.ones(1 << 16, np.float32))
comm.barrier_async().wait()

# -- communicators: split, mesh, over a torch store -------------------------------------------
half = comm.split(rank % 2, key=-rank)
v = np.array([rank], np.int64)
half.all_reduce(v)
check("split all_reduce", v, [sum(r for r in range(size) if r % 2 == rank % 2)])
assert half.rank == sorted([r for r in range(size) if r % 2 == rank % 2], reverse=True).index(rank)
assert [half.job_rank(i) for i in range(half.size)] == \
    sorted([r for r in range(size) if r % 2 == rank % 2], reverse=True)
assert comm.split(-1) is None
mesh = tpf.DeviceMesh(comm, [("dp", 1), ("tp", size)])
assert mesh.coords == [0, rank] and mesh.coord("tp") == rank
w = np.array([1.0])
mesh.group("tp").all_reduce(w)
check("mesh tp all_reduce", w, [float(size)])

if rank == 0:
    path = np.frombuffer(tempfile.mktemp(prefix="tpf-store-").encode().ljust(64), np.uint8).copy()
else:
    path = np.zeros(64, np.uint8)
comm.broadcast(path, root=0)
store_path = bytes(path).decode().strip()
store = dist.FileStore(store_path, size)
with tpf.Communicator.create(rank, size, store, name="over-torch-store") as other:
    assert other.size == size and other.rank == rank
    z = np.array([rank + 1.0])
    other.all_reduce(z, "prod")
    check("communicator over torch's FileStore", z, [6.0])
assert other.closed
comm.barrier()
if rank == 0:
    os.remove(store_path)

# -- the GIL is released while a call blocks ---------------------------------------------------
# Rank 0's main thread waits in recv from rank 1, which sends only once it has received what a
# Python thread of rank 0 sends over a second communicator after main is on its way into recv. A
# recv that held the GIL would keep that thread from running: a deadlock, ended by the timeout.
side = comm.split(0)
if rank == 0:
    entering = threading.Event()

    def release_rank1():
        entering.wait()
        side.send(np.ones(1), 1)

    helper = threading.Thread(target=release_rank1)
    helper.start()
    got = np.zeros(1)
    entering.set()
    comm.recv(got, 1, timeout=60)
    helper.join()
    check("recv with the GIL released", got, [7.0])
elif rank == 1:
    side.recv(np.zeros(1), 0)
    comm.send(np.full(1, 7.0), 0)
side.close()

# -- errors -----------------------------------------------------------------------------------
def expect(error_type, code, fn, fragment):
    try:
        fn()
    except error_type as e:
        assert e.code == code, f"{e!r} has code {e.code}, expected {code}"
        assert fragment in str(e), f"'{fragment}' not in '{e}'"
        return
    sys.exit(f"rank {rank}: expected {error_type.__name__} ({fragment})")


expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_gather(np.ones(3, np.float32), np.ones(3, np.float32)),
       "'recv' holds 3 f32 elements but must hold 9")
expect(ValueError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(np.ones(3, np.float32), out=np.ones(3, np.float64)),
       "both must have one dtype")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(torch.ones(3, 4)[:, 1]), "not contiguous")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(np.ones(4)[::2]), "not C-contiguous")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(np.ones(3), "median"), "unknown reduction 'median'")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(b"abc"), "cannot be written in place")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(np.ones(2, np.complex64)), "no tpfabric dtype")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(torch.ones(2, dtype=torch.complex64)), "no tpfabric dtype")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.broadcast(np.ones(2), root=size), "root 3 is outside [0, 3)")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_to_allv(np.ones(3), [1, 1], np.ones(3), [1, 1, 1]),
       "'send_counts' has 2 entries")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_to_allv(np.ones(3), [1, 1, 2], np.ones(3), [1, 1, 1]),
       "block 2 of 'send'")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: comm.all_reduce(None), "is None")
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument,
       lambda: tpf.Communicator.create(0, 1, object()), "no method 'set'")
comm.barrier()  # every rank still in step after its local refusals

comm.close()
expect(tpf.InvalidArgumentError, tpf.ErrorCode.invalid_argument, lambda: comm.rank, "closed")
print(f"rank {rank}: tpfabric package: all checks passed")
