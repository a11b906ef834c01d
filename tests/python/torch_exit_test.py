"""The torch backend "tpf"'s completer threads (they complete send/recv Works) at the ends of their
process groups, on 2 ranks under torchrun. Case `exit` (the default):
- a group taken down with destroy_process_group takes its thread with it (five groups, each with a
  send/recv exchange; the old threads ran until the process ended);
- at exit, the world group's thread has ended before the interpreter finalizes (the old thread,
  a daemon, could be inside its wait then and abort the process when its operation completed:
  "terminate called without an active exception"), after completing an isend never waited for:
  the peer posts the matching recv only once this process has begun to exit, and gets the data;
- an isend from an exit hook that runs after the backend's is refused, naming why.
Case `raise`: rank 0 dies of an uncaught exception with an irecv posted while rank 1 waits for it
in an all_reduce; rank 1's all_reduce fails on rank 0's abort (not at its deadline, as before)
and rank 1 prints "rank 1: the abort of the rank that raised reached this rank" (rank 0's own exit
status is the exception's: tests/python/run.sh looks for that line).
Exits non-zero, or prints "FAILED:", naming the check, where one fails."""

import atexit
import datetime
import gc
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

_store = None
_world_thread = None


def _fail_at_exit(what):
    # A failure in an exit hook does not change the exit status: leave at once with one.
    print(f"rank {rank}: FAILED: {what}", flush=True)
    os._exit(1)


def _after_the_backends_hook():
    # The interpreter finalizes next: the completer thread must have ended.
    if _world_thread is not None and _world_thread.is_alive():
        _fail_at_exit("the world group's completer thread still runs at exit")
    try:
        dist.isend(torch.zeros(1), peer)
    except tpfabric.InvalidArgumentError as error:
        if "exit hooks" not in str(error):
            _fail_at_exit(f"an isend after the backend's exit hook failed otherwise: {error}")
    else:
        _fail_at_exit("an isend after the backend's exit hook was not refused")


def _before_the_backends_hook():
    _store.set(f"rank {rank} exiting", "1")


# atexit runs hooks last-registered first: this one, registered before tpfabric.torch is
# imported, runs after the backend's; the other, registered after, runs before it.
atexit.register(_after_the_backends_hook)

import tpfabric  # noqa: E402
import tpfabric.torch  # noqa: E402,F401  (registers the backend)

dist.init_process_group("tpf", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 2, f"run on 2 ranks, not {size}"
peer = 1 - rank
_store = dist.distributed_c10d._get_default_store()
atexit.register(_before_the_backends_hook)

if sys.argv[1:] == ["raise"]:
    if rank == 0:
        dist.irecv(torch.empty(4), 1)
        _world_thread = dist.group.WORLD._completer._thread
        raise RuntimeError("rank 0 fails on purpose with an irecv posted")
    try:
        dist.all_reduce(torch.ones(4))
    except Exception as error:  # noqa: BLE001  (the message says whose failure it is)
        if "rank 0 aborted the communicator" not in str(error):
            sys.exit(f"rank 1: FAILED: the all_reduce failed otherwise: {error}")
        print("rank 1: the abort of the rank that raised reached this rank", flush=True)
        sys.exit(0)
    sys.exit("rank 1: FAILED: the all_reduce with a rank that raised succeeded")


def exchange(group=None):
    got = torch.empty(4)
    ops = [dist.P2POp(dist.isend, torch.full((4,), float(rank)), peer, group),
           dist.P2POp(dist.irecv, got, peer, group)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    assert torch.equal(got, torch.full((4,), float(peer))), f"exchange got {got}"


exchange()
_world_thread = dist.group.WORLD._completer._thread
others = []
for _ in range(5):
    group = dist.new_group([0, 1])
    exchange(group)
    others.append(group._completer._thread)
    dist.destroy_process_group(group)
    del group
gc.collect()
# The destroyed groups' threads end once they take the close from their queues: join them (the
# bound only keeps a regression finite; it is not a measure of time).
deadline = time.monotonic() + 60
for thread in others:
    thread.join(timeout=max(0.0, deadline - time.monotonic()))
alive = sum(thread.is_alive() for thread in others)
assert alive == 0, f"{alive} of 5 destroyed groups' completer threads still run"
assert _world_thread.is_alive(), "the world group's completer thread ended"

x = torch.arange(1 << 20, dtype=torch.float32)
if rank == 0:
    dist.isend(x, 1)  # never waited for; rank 1 receives it while this process exits
else:
    _store.wait(["rank 0 exiting"], datetime.timedelta(seconds=60))
    got = torch.empty_like(x)
    dist.recv(got, 0)
    assert torch.equal(got, x), "the send rank 0 did not wait for arrived wrong"
print(f"rank {rank}: completer threads end with their groups and at exit", flush=True)
