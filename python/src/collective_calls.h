// Each collective's Python arguments checked against one another and turned into a PreparedCall:
// element types must agree, and every buffer must hold exactly what the collective reads or
// writes, so a wrong size is a clear error rather than memory overrun.
#pragma once

#include <pybind11/pybind11.h>

#include "python_communicator.h"

namespace tpf::python {

namespace py = pybind11;

// `op` is a tpfabric.ReduceOp or its name ("sum", "avg", ...); `dtype` None, a tpfabric.DType or
// its name; `out` None for in place.
PreparedCall prepare_all_reduce(Communicator& comm, py::object buf, py::object op, py::object out,
                                py::object dtype);
PreparedCall prepare_reduce(Communicator& comm, py::object buf, int root, py::object op,
                            py::object out, py::object dtype);
PreparedCall prepare_broadcast(Communicator& comm, py::object buf, int root, py::object out,
                               py::object dtype);
PreparedCall prepare_all_gather(Communicator& comm, py::object send, py::object recv,
                                py::object dtype);
PreparedCall prepare_reduce_scatter(Communicator& comm, py::object send, py::object recv,
                                    py::object op, py::object dtype);
PreparedCall prepare_all_to_all(Communicator& comm, py::object send, py::object recv,
                                py::object dtype);
// Displacements default to the counts' running sums (blocks packed in rank order).
PreparedCall prepare_all_to_allv(Communicator& comm, py::object send, py::object send_counts,
                                 py::object recv, py::object recv_counts, py::object send_displs,
                                 py::object recv_displs, py::object dtype);
PreparedCall prepare_gather(Communicator& comm, py::object send, py::object recv, int root,
                            py::object dtype);
PreparedCall prepare_scatter(Communicator& comm, py::object send, py::object recv, int root,
                             py::object dtype);
PreparedCall prepare_send(Communicator& comm, py::object buf, int peer, py::object dtype);
PreparedCall prepare_recv(Communicator& comm, py::object buf, int peer, py::object dtype);
PreparedCall prepare_barrier(Communicator& comm);

}  // namespace tpf::python
