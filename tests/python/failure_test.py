"""Failures reach Python as exceptions naming their cause (run by run.sh under `tpf run -n 3`,
once per case, since the fabric ties a later failure to an earlier one in the same process):
  mismatch  ranks that call different collectives all get tpfabric.MismatchError naming both
  death     a rank that dies makes the survivors' next collective raise tpfabric.PeerDiedError
            naming it (the deadline is 120 s; the fabric's own detection must come first)
  shrink    rank 2 is killed; under `tpf run --keep-going` (run.sh) the others go on: they
            shrink the world to the two of them, and that communicator works
  abort     rank 1 aborts while the others wait in a collective: they get tpfabric.AbortedError
            naming rank 1, and rank 1's own next call fails too
  lost      each rank a host of its own (TPF_NODE_ID); rank 2 stops (SIGSTOP), the others'
            collective fails naming it found lost (its watcher's heartbeat, TPF_HOST_LOST_S), and
            they shrink and go on; under `tpf run --keep-going` (run.sh) tpf run ends rank 2
  stopped   as lost, on one host: a rank waiting on rank 2 finds it stopped (TPF_HOST_LOST_S)
  raise     rank 0 dies of an uncaught exception with a recv posted: its exit hook aborts the
            communicator, so the others' collective fails at once naming rank 0 (without it,
            rank 0's exit waited for the recv until the deadline, and they with it). The job
            fails by design: run.sh checks ranks 1 and 2 said they passed."""

import os
import signal
import sys

import numpy as np

import tpfabric as tpf

if sys.argv[1] == "lost":  # hosts of one rank each, over loopback
    os.environ["TPF_NODE_ID"] = "host-" + os.environ["TPF_RANK"]
world = tpf.Communicator.from_env(timeout=120)
rank = world.rank
assert world.size == 3, world.size


def expect(error_type, fn, *fragments):
    try:
        fn()
    except error_type as e:
        for fragment in fragments:
            if fragment not in str(e):
                sys.exit(f"rank {rank}: '{fragment}' not in {type(e).__name__}: {e}")
        return e
    except tpf.Error as e:
        sys.exit(f"rank {rank}: expected {error_type.__name__}, got {type(e).__name__}: {e}")
    sys.exit(f"rank {rank}: expected {error_type.__name__}, nothing was raised")


def go_on_without_rank_2():
    """Ranks 0 and 1 shrink the world to the two of them, and that communicator works."""
    live = world.shrink()
    assert (live.size, live.rank, live.name) == (2, rank, "world.live(0-1)"), live
    v = np.full(4, rank + 1, np.float32)
    live.all_reduce(v)
    assert (v == 3).all(), v
    print(f"rank {rank}: the shrunk communicator '{live.name}' works")
    print(f"rank {rank}: tpfabric failures ({case}): all checks passed")
    sys.exit(0)


case = sys.argv[1]
if case == "mismatch":  # rank 2 gathers while ranks 0 and 1 reduce
    if rank == 2:
        e = expect(tpf.MismatchError, lambda: world.all_gather(np.ones(4), np.ones(12)),
                   "all_reduce", "all_gather")
    else:
        e = expect(tpf.MismatchError, lambda: world.all_reduce(np.ones(4)), "all_reduce",
                   "all_gather")
    assert e.code == tpf.ErrorCode.mismatch, e.code
    print(f"rank {rank}: mismatch named: {e}")
    print(f"rank {rank}: tpfabric failures ({case}): all checks passed")
    sys.exit(0)
if case == "abort":
    world.barrier()
    if rank == 1:
        world.abort()
        e = expect(tpf.AbortedError, lambda: world.all_reduce(np.ones(4)), "aborted")
    else:
        e = expect(tpf.AbortedError, lambda: world.all_reduce(np.ones(4)), "rank 1 aborted the communicator")
    assert e.code == tpf.ErrorCode.aborted, e.code
    print(f"rank {rank}: abort named: {e}")
    print(f"rank {rank}: tpfabric failures ({case}): all checks passed")
    sys.exit(0)
if case == "raise":
    if rank == 0:
        pending = world.recv_async(np.zeros(4, np.float32), 1)  # rank 1 never sends
        raise RuntimeError("rank 0 fails on purpose with a recv posted")
    e = expect(tpf.AbortedError, lambda: world.all_reduce(np.ones(4)),
               "rank 0 aborted the communicator")
    print(f"rank {rank}: the abort of the rank that raised reached this rank: {e}")
    print(f"rank {rank}: tpfabric failures ({case}): all checks passed")
    sys.exit(0)
if case == "shrink":
    world.barrier()
    if rank == 2:
        sys.stdout.flush()
        os.kill(os.getpid(), 9)
    expect(tpf.PeerDiedError, lambda: world.all_reduce(np.ones(4, np.float32)), "rank 2")
    go_on_without_rank_2()
if case in ("lost", "stopped"):
    world.barrier()
    if rank == 2:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
        sys.exit(f"rank {rank}: resumed, where tpf run should have ended it")
    how = ("rank 2 (host 'host-2') has sent no heartbeat" if case == "lost" else
           "has been stopped for")
    expect(tpf.TimeoutError, lambda: world.all_reduce(np.ones(4, np.float32)), "rank 2", how)
    go_on_without_rank_2()
assert case == "death", case

# Rank 2 dies (without closing anything) once everyone holds the communicator.
doomed = world.split(0)
doomed.barrier()
if rank == 2:
    sys.stdout.flush()
    os._exit(0)
e = expect(tpf.PeerDiedError, lambda: doomed.all_reduce(np.ones(1 << 16, np.float32)), "rank 2")
assert e.code == tpf.ErrorCode.peer_died, e.code
print(f"rank {rank}: death named: {e}")
print(f"rank {rank}: tpfabric failures ({case}): all checks passed")
os._exit(0)  # the world communicator still counts rank 2: leave without its goodbye
