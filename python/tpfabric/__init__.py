"""tpfabric from Python: the communicator and its collectives, zero-copy on torch tensors,
numpy arrays and any buffer.

    import tpfabric, numpy as np
    comm = tpfabric.Communicator.from_env()      # under `tpf run -n 4`, torchrun, mpirun, srun
    x = np.full(1024, comm.rank, dtype=np.float32)
    comm.all_reduce(x)                           # in place; op="avg", out=... also work

`import tpfabric.torch` registers the torch.distributed backend "tpf" (needs PyTorch).
"""

import atexit as _atexit
import sys as _sys

try:
    from . import _tpfabric  # noqa: F401
except ImportError as _error:
    import glob as _glob
    import os as _os

    _built = [_os.path.basename(p) for p in
              _glob.glob(_os.path.join(_os.path.dirname(__file__), "_tpfabric*.so"))]
    raise ImportError(
        f"tpfabric: cannot load its extension module into Python "
        f"{_sys.version.split()[0]} ({_sys.executable}): {_error}. It was built as {_built}; "
        f"run the Python it was built for (Debian's /usr/bin/python3 by default, CMake's "
        f"Python_EXECUTABLE)") from _error

from ._tpfabric import (  # noqa: F401  (re-exported)
    AbortedError,
    BootstrapError,
    Communicator,
    DeviceMesh,
    DType,
    Error,
    ErrorCode,
    InternalError,
    InvalidArgumentError,
    MismatchError,
    PeerDiedError,
    ReduceOp,
    ResourceError,
    SystemCallError,
    TimeoutError,
    Work,
)


@_atexit.register
def _abort_unfinished_on_uncaught_exception():
    """At an exit on an uncaught exception, aborts every communicator with an operation not yet
    done (a pipeline stage dies with its next activation's recv posted). Its close at
    finalization would wait for those operations until their deadline, and the peers waiting for
    this rank with it; aborted, they fail at once, naming this rank. A normal exit or sys.exit()
    waits: a send_async never waited for should still arrive."""
    # Python sets sys.last_value where it printed an uncaught exception before exiting.
    if getattr(_sys, "last_value", None) is not None:
        _tpfabric._abort_unfinished()


__all__ = [
    "AbortedError", "BootstrapError", "Communicator", "DeviceMesh", "DType", "Error", "ErrorCode",
    "InternalError", "InvalidArgumentError", "MismatchError", "PeerDiedError", "ReduceOp",
    "ResourceError", "SystemCallError", "TimeoutError", "Work",
]
