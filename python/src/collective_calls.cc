#include "collective_calls.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "tpf/error.h"

namespace tpf::python {
namespace {

[[noreturn]] void refuse(const char* op, const std::string& why) {
  throw Error(ErrorCode::invalid_argument, std::string("tpfabric ") + op + ": " + why);
}

std::optional<DType> dtype_arg(py::handle dtype) {
  if (dtype.is_none()) return std::nullopt;
  if (py::isinstance<DType>(dtype)) return dtype.cast<DType>();
  if (py::isinstance<py::str>(dtype)) {
    const std::string name = dtype.cast<std::string>();
    if (auto parsed = parse_dtype(name)) return parsed;
    throw Error(ErrorCode::invalid_argument,
                "tpfabric: unknown dtype '" + name + "' (f32, f64, f16, bf16, i8, u8, i32, i64)");
  }
  throw Error(ErrorCode::invalid_argument, "tpfabric: dtype must be a tpfabric.DType or its name");
}

ReduceOp op_arg(py::handle op) {
  if (py::isinstance<ReduceOp>(op)) return op.cast<ReduceOp>();
  if (py::isinstance<py::str>(op)) {
    const std::string name = op.cast<std::string>();
    if (auto parsed = parse_reduce_op(name)) return *parsed;
    throw Error(ErrorCode::invalid_argument,
                "tpfabric: unknown reduction '" + name + "' (sum, prod, min, max, avg)");
  }
  throw Error(ErrorCode::invalid_argument, "tpfabric: op must be a tpfabric.ReduceOp or its name");
}

std::string elements(size_t count, DType dtype) {
  return std::to_string(count) + " " + dtype_name(dtype) + " elements";
}

// The views of one call and the leases that keep them valid.
class Operands {
 public:
  Operands(const char* op, py::handle dtype) : op_(op), dtype_(dtype_arg(dtype)) {}

  BufferView view(py::handle object, const std::string& role, Access access) {
    BufferView view = view_buffer(object, role, access, dtype_);
    if (first_ && view.dtype != first_->dtype) {
      refuse(op_, "'" + role + "' holds " + dtype_name(view.dtype) + " but '" + first_role_ +
                      "' holds " + dtype_name(first_->dtype) + "; both must have one dtype");
    }
    if (!first_) {
      first_ = view;
      first_role_ = role;
    }
    // The lambdas copy views, so the leases live in the call alone (released with the GIL held).
    call.leases.push_back(std::move(view.lease));
    return view;
  }
  // all_reduce, reduce, broadcast: `buf` in place, or read from `buf` and written to `out`.
  std::pair<BufferView, BufferView> in_place_or_out(py::handle buf, py::handle out) {
    if (out.is_none()) {
      call.result = py::reinterpret_borrow<py::object>(buf);
      const BufferView both = view(buf, "buf", Access::write);
      return {both, both};
    }
    const BufferView send = view(buf, "buf", Access::read);
    const BufferView recv = view(out, "out", Access::write);
    require_count(recv, "out", send.count, " (as many as 'buf')");
    call.result = py::reinterpret_borrow<py::object>(out);
    return {send, recv};
  }

  void require_count(const BufferView& view, const std::string& role, size_t expected,
                     const std::string& because) {
    if (view.count != expected) {
      refuse(op_, "'" + role + "' holds " + elements(view.count, view.dtype) + " but must hold " +
                      std::to_string(expected) + because);
    }
  }

  PreparedCall call;

 private:
  const char* op_;
  std::optional<DType> dtype_;
  std::optional<BufferView> first_;
  std::string first_role_;
};

std::string times_size(const Communicator& comm, const std::string& what) {
  return " (" + std::to_string(comm.size()) + " ranks x " + what + ")";
}

void require_rank(const Communicator& comm, const char* op, const char* what, int rank) {
  if (rank < 0 || rank >= comm.size()) {
    refuse(op, std::string(what) + " " + std::to_string(rank) + " is outside [0, " +
                   std::to_string(comm.size()) + ")");
  }
}

std::vector<size_t> counts_arg(const Communicator& comm, const char* op, const char* role,
                               py::handle object) {
  std::vector<int64_t> values;
  try {
    values = object.cast<std::vector<int64_t>>();
  } catch (const py::cast_error&) {
    refuse(op, std::string("'") + role + "' must be a sequence of integers");
  }
  if (values.size() != static_cast<size_t>(comm.size())) {
    refuse(op, std::string("'") + role + "' has " + std::to_string(values.size()) +
                   " entries; it needs one per rank (" + std::to_string(comm.size()) + ")");
  }
  std::vector<size_t> counts;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0) {
      refuse(op, std::string("'") + role + "'[" + std::to_string(i) + "] is negative (" +
                     std::to_string(values[i]) + ")");
    }
    counts.push_back(static_cast<size_t>(values[i]));
  }
  return counts;
}

std::vector<size_t> packed_displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size());
  size_t offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = offset;
    offset += counts[i];
  }
  return displs;
}

void require_blocks_inside(const char* op, const char* role, const BufferView& view,
                           const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0 && (displs[i] > view.count || counts[i] > view.count - displs[i])) {
      refuse(op, std::string("block ") + std::to_string(i) + " of '" + role + "' (" +
                     std::to_string(counts[i]) + " elements at " + std::to_string(displs[i]) +
                     ") ends past its " + elements(view.count, view.dtype));
    }
  }
}

}  // namespace

PreparedCall prepare_all_reduce(Communicator&, py::object buf, py::object op, py::object out,
                                py::object dtype) {
  Operands args("all_reduce", dtype);
  const ReduceOp reduce_op = op_arg(op);
  const auto [send, recv] = args.in_place_or_out(buf, out);
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.all_reduce(send.data, recv.data, send.count, send.dtype, reduce_op, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.all_reduce_async(send.data, recv.data, send.count, send.dtype, reduce_op, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_reduce(Communicator& comm, py::object buf, int root, py::object op,
                            py::object out, py::object dtype) {
  Operands args("reduce", dtype);
  require_rank(comm, "reduce", "root", root);
  const ReduceOp reduce_op = op_arg(op);
  const auto [send, recv] = args.in_place_or_out(buf, out);
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.reduce(send.data, recv.data, send.count, send.dtype, reduce_op, root, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.reduce_async(send.data, recv.data, send.count, send.dtype, reduce_op, root, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_broadcast(Communicator& comm, py::object buf, int root, py::object out,
                               py::object dtype) {
  Operands args("broadcast", dtype);
  require_rank(comm, "broadcast", "root", root);
  const auto [send, recv] = args.in_place_or_out(buf, out);
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.broadcast(send.data, recv.data, recv.count, recv.dtype, root, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.broadcast_async(send.data, recv.data, recv.count, recv.dtype, root, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_all_gather(Communicator& comm, py::object send_obj, py::object recv_obj,
                                py::object dtype) {
  Operands args("all_gather", dtype);
  const BufferView send = args.view(send_obj, "send", Access::read);
  const BufferView recv = args.view(recv_obj, "recv", Access::write);
  args.require_count(recv, "recv", comm.size() * send.count, times_size(comm, "'send'"));
  args.call.result = recv_obj;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.all_gather(send.data, recv.data, send.count, send.dtype, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.all_gather_async(send.data, recv.data, send.count, send.dtype, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_reduce_scatter(Communicator& comm, py::object send_obj, py::object recv_obj,
                                    py::object op, py::object dtype) {
  Operands args("reduce_scatter", dtype);
  const ReduceOp reduce_op = op_arg(op);
  const BufferView send = args.view(send_obj, "send", Access::read);
  const BufferView recv = args.view(recv_obj, "recv", Access::write);
  args.require_count(send, "send", comm.size() * recv.count, times_size(comm, "'recv'"));
  args.call.result = recv_obj;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.reduce_scatter(send.data, recv.data, recv.count, recv.dtype, reduce_op, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.reduce_scatter_async(send.data, recv.data, recv.count, recv.dtype, reduce_op, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_all_to_all(Communicator& comm, py::object send_obj, py::object recv_obj,
                                py::object dtype) {
  Operands args("all_to_all", dtype);
  const BufferView send = args.view(send_obj, "send", Access::read);
  const BufferView recv = args.view(recv_obj, "recv", Access::write);
  const size_t n = static_cast<size_t>(comm.size());
  if (send.count % n != 0) {
    refuse("all_to_all", "'send' holds " + elements(send.count, send.dtype) +
                             ", not a multiple of the " + std::to_string(n) + " ranks");
  }
  args.require_count(recv, "recv", send.count, " (as many as 'send')");
  const size_t block = send.count / n;
  args.call.result = recv_obj;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.all_to_all(send.data, recv.data, block, send.dtype, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.all_to_all_async(send.data, recv.data, block, send.dtype, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_all_to_allv(Communicator& comm, py::object send_obj,
                                 py::object send_counts_obj, py::object recv_obj,
                                 py::object recv_counts_obj, py::object send_displs_obj,
                                 py::object recv_displs_obj, py::object dtype) {
  const char* op = "all_to_allv";
  Operands args(op, dtype);
  const BufferView send = args.view(send_obj, "send", Access::read);
  const BufferView recv = args.view(recv_obj, "recv", Access::write);
  const auto send_counts = counts_arg(comm, op, "send_counts", send_counts_obj);
  const auto recv_counts = counts_arg(comm, op, "recv_counts", recv_counts_obj);
  const auto send_displs = send_displs_obj.is_none()
                               ? packed_displacements(send_counts)
                               : counts_arg(comm, op, "send_displs", send_displs_obj);
  const auto recv_displs = recv_displs_obj.is_none()
                               ? packed_displacements(recv_counts)
                               : counts_arg(comm, op, "recv_displs", recv_displs_obj);
  require_blocks_inside(op, "send", send, send_counts, send_displs);
  require_blocks_inside(op, "recv", recv, recv_counts, recv_displs);
  args.call.result = recv_obj;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.all_to_allv(send.data, send_counts, send_displs, recv.data, recv_counts, recv_displs,
                  send.dtype, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.all_to_allv_async(send.data, send_counts, send_displs, recv.data, recv_counts,
                               recv_displs, send.dtype, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_gather(Communicator& comm, py::object send_obj, py::object recv_obj, int root,
                            py::object dtype) {
  Operands args("gather", dtype);
  require_rank(comm, "gather", "root", root);
  const BufferView send = args.view(send_obj, "send", Access::read);
  BufferView recv;
  if (comm.rank() == root) {
    if (recv_obj.is_none()) refuse("gather", "the root needs a 'recv' buffer");
    recv = args.view(recv_obj, "recv", Access::write);
    args.require_count(recv, "recv", comm.size() * send.count, times_size(comm, "'send'"));
  }
  args.call.result = recv_obj;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.gather(send.data, recv.data, send.count, send.dtype, root, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.gather_async(send.data, recv.data, send.count, send.dtype, root, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_scatter(Communicator& comm, py::object send_obj, py::object recv_obj, int root,
                             py::object dtype) {
  Operands args("scatter", dtype);
  require_rank(comm, "scatter", "root", root);
  const BufferView recv = args.view(recv_obj, "recv", Access::write);
  BufferView send;
  if (comm.rank() == root) {
    if (send_obj.is_none()) refuse("scatter", "the root needs a 'send' buffer");
    send = args.view(send_obj, "send", Access::read);
    args.require_count(send, "send", comm.size() * recv.count, times_size(comm, "'recv'"));
  }
  args.call.result = recv_obj;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.scatter(send.data, recv.data, recv.count, recv.dtype, root, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.scatter_async(send.data, recv.data, recv.count, recv.dtype, root, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_send(Communicator& comm, py::object buf, int peer, py::object dtype) {
  Operands args("send", dtype);
  require_rank(comm, "send", "peer", peer);
  const BufferView view = args.view(buf, "buf", Access::read);
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.send(view.data, view.count, view.dtype, peer, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.send_async(view.data, view.count, view.dtype, peer, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_recv(Communicator& comm, py::object buf, int peer, py::object dtype) {
  Operands args("recv", dtype);
  require_rank(comm, "recv", "peer", peer);
  const BufferView view = args.view(buf, "buf", Access::write);
  args.call.result = buf;
  args.call.blocking = [=](Communicator& c, const CallOptions& o) {
    c.recv(view.data, view.count, view.dtype, peer, o);
  };
  args.call.async = [=](Communicator& c, const CallOptions& o) {
    return c.recv_async(view.data, view.count, view.dtype, peer, o);
  };
  return std::move(args.call);
}

PreparedCall prepare_barrier(Communicator&) {
  PreparedCall call;
  call.blocking = [](Communicator& c, const CallOptions& o) { c.barrier(o); };
  call.async = [](Communicator& c, const CallOptions& o) { return c.barrier_async(o); };
  return call;
}

}  // namespace tpf::python
