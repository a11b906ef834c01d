"""The torch.distributed backend "tpf": `import tpfabric.torch`, then
`torch.distributed.init_process_group("tpf")` (CPU tensors).

The backend is a Python subclass of torch's ProcessGroup (torch 1.13 dispatches its C++ calls,
DDP's included, to Python overrides) over a tpfabric.Communicator created through the store torch
hands the backend: no second store, no second port. Subgroups (`new_group`) get a communicator of
their own over the group's store. Collectives run at once and return completed works with completed
futures; send and recv run asynchronously (a ring exchange through batch_isend_irecv cannot
deadlock). Messages between a pair match in issue order: tags are accepted and not used to match.
"""

import atexit
import datetime
import queue
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

import tpfabric as _tpf

BACKEND_NAME = "tpf"

_RedOp = dist.ReduceOp.RedOpType
_REDUCE_OPS = {
    _RedOp.SUM: "sum",
    _RedOp.PRODUCT: "prod",
    _RedOp.MIN: "min",
    _RedOp.MAX: "max",
    _RedOp.AVG: "avg",
}


def _reduce_op(options):
    if options is None:
        return "sum"
    red_op = options.reduceOp.op
    try:
        return _REDUCE_OPS[red_op]
    except KeyError:
        raise _tpf.InvalidArgumentError(
            f"tpfabric.torch: reduction {red_op.name} is not supported "
            f"(supported: {', '.join(op.name for op in _REDUCE_OPS)})") from None


def _seconds(timeout):
    """A c10d options timeout in seconds, or None where torch left it unset (negative)."""
    if timeout is None or timeout < datetime.timedelta(0):
        return None
    return timeout.total_seconds()


def _timeout(options):
    """The seconds an options object's timeout allows; None for torch's "unset" (negative) or no
    options (torch's Python layer calls some methods without them)."""
    return _seconds(getattr(options, "timeout", None))


def _root(options):
    return getattr(options, "rootRank", 0)


def _flat(tensor, what):
    """The tensor as tpfabric sees it: detached (DLPack refuses tensors that require grad),
    in CPU memory and contiguous."""
    if tensor.device.type != "cpu":
        raise _tpf.InvalidArgumentError(
            f"tpfabric.torch: {what} is on {tensor.device}; the tpf backend takes CPU tensors")
    if not tensor.is_contiguous():
        raise _tpf.InvalidArgumentError(
            f"tpfabric.torch: {what} is not contiguous; pass tensor.contiguous()")
    return tensor.detach()


def _one(tensors, what):
    if len(tensors) != 1:
        raise _tpf.InvalidArgumentError(
            f"tpfabric.torch: {what} takes one tensor per rank, got {len(tensors)}")
    return tensors[0]


def _pack(tensors):
    """The tensors of a list one after another in one flat tensor (what tpfabric sends)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _unpack(flat, outputs):
    """Copies consecutive pieces of `flat` into the tensors of a list, in order."""
    offset = 0
    for out in outputs:
        out.copy_(flat[offset:offset + out.numel()].view_as(out))
        offset += out.numel()


def _done(result):
    """A work that completed when it was made (the collectives run at once). It is torch's own
    future-backed work: C++ callers (DDP) wait on C++ works, which a Python subclass cannot
    complete in torch 1.13."""
    future = Future()
    future.set_result(result)
    return _create_work_from_future(future)


class _Completer:
    """Completes the futures of asynchronous tpfabric operations (send, recv) as they finish,
    whether or not anybody waits: one daemon thread per process group, waiting with the GIL
    released (tpfabric.Work.wait releases it).

    The thread must not be inside tpfabric or torch with the GIL released when the interpreter
    finalizes: a thread that asks for the GIL back then is ended by pthread_exit, whose unwinding
    through pybind11's GIL guard (a noexcept destructor) aborts the process ("terminate called
    without an active exception"). So an atexit hook, which runs before finalization, closes
    every completer and joins its thread: the works handed to it end first, each bounded by its
    deadline, as the communicator's own close at exit would wait for them anyway (on an uncaught
    exception, the package's exit hook has aborted the communicator first: they end at once)."""

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._closed = False
        self._lock = threading.Lock()
        _completers.add(self)

    def work(self, start, result):
        """A torch work for the operation `start()` issues (a tpfabric Work), completed with
        `result`."""
        future = Future()
        with self._lock:
            if self._closed:
                raise _tpf.InvalidArgumentError(
                    "tpfabric.torch: send and recv cannot start once the interpreter's exit "
                    "hooks have closed the backend's completer thread")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tpfabric-completer",
                                                daemon=True)
                self._thread.start()
            self._queue.put((start(), future, result))
        return _create_work_from_future(future)

    def close(self):
        """Ends the thread once it has completed the works handed to it so far; nothing can be
        handed to it after this."""
        with self._lock:  # after any work() under way: nothing is queued behind the end
            self._closed = True
            self._queue.put(None)
            return self._thread

    def close_and_join(self):
        thread = self.close()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            tpf_work, future, result = item
            try:
                tpf_work.wait()
            except Exception as error:  # noqa: BLE001  (handed to whoever waits)
                future.set_exception(error)
            else:
                future.set_result(result)


# Every completer not yet collected, for the exit hook below.
_completers = weakref.WeakSet()


@atexit.register
def _close_completers():
    # Registered after the package's own exit hook, so it runs first: the abort must come before
    # the joins, which would otherwise wait for the unfinished works.
    _tpf._abort_unfinished_on_uncaught_exception()
    for completer in list(_completers):
        completer.close_and_join()


class ProcessGroupTpf(dist.ProcessGroup):
    """torch.distributed.ProcessGroup over a tpfabric.Communicator."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._comm = _tpf.Communicator.create(rank, size, store, name="tpf",
                                              timeout=_seconds(timeout))
        self._completer = _Completer()
        # A destroyed group (destroy_process_group) takes its thread with it.
        weakref.finalize(self, self._completer.close)

    @property
    def communicator(self):
        return self._comm

    def getBackendName(self):
        return BACKEND_NAME

    # -- reductions ------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = _reduce_op(opts)
        for i, tensor in enumerate(tensors):
            self._comm.all_reduce(_flat(tensor, f"tensor {i}"), op, timeout=_timeout(opts))
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=None):
        tensor = _one(tensors, "reduce")
        self._comm.reduce(_flat(tensor, "tensor"), _root(opts), _reduce_op(opts),
                          timeout=_timeout(opts))
        return _done(tensors)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        output = _one(output_tensors, "reduce_scatter")
        inputs = _one(input_tensors, "reduce_scatter")
        self._check_list(inputs, output, "reduce_scatter's input list")
        send = _pack(inputs)
        self._comm.reduce_scatter(send, _flat(output, "output"), _reduce_op(opts),
                                  timeout=_timeout(opts))
        return _done(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        self._comm.reduce_scatter(_flat(input, "input"), _flat(output, "output"),
                                  _reduce_op(opts), timeout=_timeout(opts))
        return _done([output])

    # -- data movement ---------------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        for i, tensor in enumerate(tensors):
            self._comm.broadcast(_flat(tensor, f"tensor {i}"), _root(opts),
                                 timeout=_timeout(opts))
        return _done(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        outputs = _one(output_tensors, "allgather")
        input = _flat(_one(input_tensors, "allgather"), "input")
        self._check_list(outputs, input, "allgather's output list")
        gathered = torch.empty(self.size() * input.numel(), dtype=input.dtype)
        self._comm.all_gather(input, gathered, timeout=_timeout(opts))
        _unpack(gathered, outputs)
        return _done(output_tensors)

    def _allgather_base(self, output, input, opts=None):
        self._comm.all_gather(_flat(input, "input"), _flat(output, "output"),
                              timeout=_timeout(opts))
        return _done([output])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        for outputs, input in zip(output_lists, input_list):
            self.allgather([outputs], [input], opts)
        return _done(output_lists)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        output, input = _flat(output, "output"), _flat(input, "input")
        if not output_split_sizes and not input_split_sizes:
            self._comm.all_to_all(input, output, timeout=_timeout(opts))
            return _done([output])
        # Splits count rows of dimension 0; tpfabric counts elements.
        in_row = input[0].numel() if input.dim() > 0 and input.size(0) else 1
        out_row = output[0].numel() if output.dim() > 0 and output.size(0) else 1
        send_counts = self._splits(input_split_sizes, input, in_row)
        recv_counts = self._splits(output_split_sizes, output, out_row)
        self._comm.all_to_allv(input, send_counts, output, recv_counts,
                               timeout=_timeout(opts))
        return _done([output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise _tpf.InvalidArgumentError(
                f"tpfabric.torch: alltoall takes {self.size()} input and output tensors, got "
                f"{len(input_tensors)} and {len(output_tensors)}")
        send = _pack(input_tensors)
        recv = torch.empty(sum(t.numel() for t in output_tensors), dtype=send.dtype)
        self._comm.all_to_allv(send, [t.numel() for t in input_tensors], recv,
                               [t.numel() for t in output_tensors],
                               timeout=_timeout(opts))
        _unpack(recv, output_tensors)
        return _done(output_tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        input = _flat(_one(input_tensors, "gather"), "input")
        root = _root(opts)
        gathered = None
        if self.rank() == root:
            outputs = _one(output_tensors, "gather")
            self._check_list(outputs, input, "gather's output list")
            gathered = torch.empty(self.size() * input.numel(), dtype=input.dtype)
        self._comm.gather(input, gathered, root, timeout=_timeout(opts))
        if gathered is not None:
            _unpack(gathered, outputs)
        return _done(output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        output = _flat(_one(output_tensors, "scatter"), "output")
        root = _root(opts)
        send = None
        if self.rank() == root:
            inputs = _one(input_tensors, "scatter")
            self._check_list(inputs, output, "scatter's input list")
            send = _pack(inputs)
        self._comm.scatter(send, output, root, timeout=_timeout(opts))
        return _done(output_tensors)

    def barrier(self, opts=None):
        self._comm.barrier(timeout=_timeout(opts))
        return _done([])

    # -- point to point (asynchronous: isend/irecv must not deadlock) ---------------------
    def send(self, tensors, dst_rank, tag=0):
        tensor = _flat(_one(tensors, "send"), "tensor")
        return self._completer.work(lambda: self._comm.send_async(tensor, dst_rank), tensors)

    def recv(self, tensors, src_rank, tag=0):
        tensor = _flat(_one(tensors, "recv"), "tensor")
        return self._completer.work(lambda: self._comm.recv_async(tensor, src_rank), tensors)

    def recv_anysource(self, tensors, tag=0):
        raise _tpf.InvalidArgumentError(
            "tpfabric.torch: recv without a source rank is not supported; name the source")

    # batch_isend_irecv brackets its operations with these; send and recv are asynchronous
    # already, so there is nothing to coalesce.
    def _start_coalescing(self):
        pass

    def _end_coalescing(self, reqs):
        pass

    # -- helpers ---------------------------------------------------------------------------
    def _check_list(self, tensors, like, what):
        if len(tensors) != self.size():
            raise _tpf.InvalidArgumentError(
                f"tpfabric.torch: {what} has {len(tensors)} tensors; it needs {self.size()}")
        for rank, tensor in enumerate(tensors):
            if tensor.numel() != like.numel() or tensor.dtype != like.dtype:
                raise _tpf.InvalidArgumentError(
                    f"tpfabric.torch: {what}[{rank}] is {tensor.dtype} x {tensor.numel()}, "
                    f"expected {like.dtype} x {like.numel()}")

    def _splits(self, sizes, tensor, row):
        if not sizes:  # even split of dimension 0
            if tensor.numel() % self.size():
                raise _tpf.InvalidArgumentError(
                    f"tpfabric.torch: all_to_all_single: {tensor.numel()} elements do not split "
                    f"evenly over {self.size()} ranks")
            return [tensor.numel() // self.size()] * self.size()
        return [int(s) * row for s in sizes]


def _create(store, rank, size, timeout):
    return ProcessGroupTpf(store, rank, size, timeout)


# register_backend refuses a second registration; importing this module twice must not fail.
if not hasattr(dist.Backend, BACKEND_NAME.upper()):
    dist.Backend.register_backend(BACKEND_NAME, _create)
