// The extension module tpfabric._tpfabric; python/tpfabric/__init__.py re-exports it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collective_calls.h"
#include "errors.h"
#include "python_communicator.h"
#include "python_store.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/mesh.h"

namespace tpf::python {
namespace {

using namespace pybind11::literals;

CommOptions comm_options(std::optional<double> timeout_seconds,
                         std::optional<size_t> buffer_bytes) {
  CommOptions options;
  options.timeout = call_options(timeout_seconds).timeout;
  options.buffer_bytes = buffer_bytes;
  return options;
}

// Binds NAME (blocking: returns the output buffer) and NAME_async (returns a Work) from one
// prepare function; `extra` are the pybind11 argument descriptions after `self`.
template <class... Params, class... Extra>
void def_collective(py::class_<PythonCommunicator>& cls, const std::string& name,
                    PreparedCall (*prepare)(Communicator&, Params...), const char* doc,
                    const Extra&... extra) {
  cls.def(
      name.c_str(),
      [prepare](PythonCommunicator& self, Params... params, std::optional<double> timeout) {
        return self.run(prepare(self.comm(), std::move(params)...), timeout);
      },
      extra..., "timeout"_a = py::none(), doc);
  const std::string async_doc = "Starts " + name + " and returns a Work; wait() returns what " +
                                name + " returns. The buffers must stay untouched until then.";
  cls.def((name + "_async").c_str(),
          [prepare](PythonCommunicator& self, Params... params, std::optional<double> timeout) {
            return self.start(prepare(self.comm(), std::move(params)...), timeout);
          },
          extra..., "timeout"_a = py::none(), async_doc.c_str());
}

void bind_enums(py::module_& m) {
  py::enum_<DType>(m, "DType", "Element types of the collectives.")
      .value("f32", DType::f32)
      .value("f64", DType::f64)
      .value("f16", DType::f16)
      .value("bf16", DType::bf16)
      .value("i8", DType::i8)
      .value("u8", DType::u8)
      .value("i32", DType::i32)
      .value("i64", DType::i64);
  py::enum_<ReduceOp>(m, "ReduceOp", "Reductions; avg divides the sum by the number of ranks.")
      .value("SUM", ReduceOp::sum)
      .value("PROD", ReduceOp::prod)
      .value("MIN", ReduceOp::min)
      .value("MAX", ReduceOp::max)
      .value("AVG", ReduceOp::avg);
}

void bind_work(py::module_& m) {
  py::class_<PythonWork>(m, "Work", "An operation started by a *_async call.")
      .def("wait", &PythonWork::wait, "timeout"_a = py::none(),
           "Blocks until done (at most `timeout` seconds) and returns the operation's output "
           "buffer; None if the timeout passed first. Raises the operation's error.")
      .def("is_completed", &PythonWork::is_completed,
           "True once done; never blocks. Raises the operation's error if it failed.")
      .def_property_readonly("ended", &PythonWork::ended,
                             "True once the operation has ended, successfully or not (wait() "
                             "then says which); never blocks, never moves it, never raises.")
      .def_property_readonly("result", &PythonWork::result,
                             "The output buffer (valid once the operation completed).");
}

void bind_communicator(py::module_& m) {
  py::class_<PythonCommunicator> cls(m, "Communicator", R"(A group of ranks running collectives.

Every rank must issue the same collectives in the same order. Buffers are anything with
__dlpack__ (torch tensors of every dtype, numpy arrays) or the buffer protocol (numpy, array,
bytearray), contiguous and in CPU memory; they are used in place, never copied in Python.)");
  cls.def_static(
         "from_env",
         [](std::optional<double> timeout, std::optional<size_t> buffer_bytes) {
           CommOptions options = comm_options(timeout, buffer_bytes);
           py::gil_scoped_release nogil;
           return PythonCommunicator::owning(Communicator::from_env(options));
         },
         py::kw_only(), "timeout"_a = py::none(), "buffer_bytes"_a = py::none(),
         "From a launcher's environment: tpf run, torchrun, mpirun, srun.")
      .def_static(
          "create",
          [](int rank, int size, py::object store, std::string secret, std::string name,
             std::optional<double> timeout, std::optional<size_t> buffer_bytes) {
            CommOptions options = comm_options(timeout, buffer_bytes);
            if (py::isinstance<py::str>(store)) {
              std::string address = store.cast<std::string>();
              py::gil_scoped_release nogil;
              return PythonCommunicator::owning(
                  Communicator::create(rank, size, address, secret, options));
            }
            auto python_store = std::make_shared<PythonStore>(store);
            py::gil_scoped_release nogil;
            return PythonCommunicator::owning(
                Communicator::create(rank, size, std::move(python_store), name, options));
          },
          "rank"_a, "size"_a, "store"_a, py::kw_only(), "secret"_a = "", "name"_a = "world",
          "timeout"_a = py::none(), "buffer_bytes"_a = py::none(),
          "`store` is the tpf store's address \"host:port\" (with its `secret`), or a store "
          "object with torch.distributed.Store's methods (torch's TCPStore, FileStore, ...), "
          "where `name` keeps several communicators apart.")
      .def_property_readonly("rank", [](PythonCommunicator& self) { return self.comm().rank(); })
      .def_property_readonly("size", [](PythonCommunicator& self) { return self.comm().size(); })
      .def_property_readonly("name", [](PythonCommunicator& self) { return self.comm().name(); })
      .def_property_readonly("host_count",
                             [](PythonCommunicator& self) { return self.comm().host_count(); })
      .def(
          "job_rank", [](PythonCommunicator& self, int rank) { return self.comm().job_rank(rank); },
          "rank"_a,
          "`rank`'s rank in the job: in the communicator this one was split from, and so on up "
          "(torch's get_global_rank).")
      .def_property_readonly("next_sequence",
                             [](PythonCommunicator& self) { return self.comm().next_sequence(); })
      .def_property_readonly("closed", &PythonCommunicator::closed)
      .def(
          "split",
          [](PythonCommunicator& self, int color, std::optional<int> key) -> py::object {
            Communicator& comm = self.comm();
            Communicator part;
            {
              py::gil_scoped_release nogil;
              part = comm.split(color, key.value_or(comm.rank()));
            }
            if (!part.valid()) return py::none();
            return py::cast(PythonCommunicator::owning(std::move(part)));
          },
          "color"_a, "key"_a = py::none(),
          "Collective: ranks with the same color form a new communicator, ordered by key (default: "
          "rank). A negative color returns None.")
      .def(
          "shrink",
          [](PythonCommunicator& self) {
            Communicator& comm = self.comm();
            Communicator live;
            {
              py::gil_scoped_release nogil;
              live = comm.shrink();
            }
            return PythonCommunicator::owning(std::move(live));
          },
          "After ranks died or were found lost (a call raised naming one), called by every "
          "surviving rank: the communicator of the ranks that go on, in their order here. This "
          "one stays failed.")
      .def(
          "abort", [](PythonCommunicator& self) { self.comm().abort(); },
          "Fails this communicator's pending and later operations, here and on every peer.")
      .def("close", &PythonCommunicator::close,
           "Waits for the outstanding async operations, then releases the communicator.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PythonCommunicator& self, py::args) { self.close(); })
      .def("__repr__", [](PythonCommunicator& self) {
        if (self.closed()) return std::string("<tpfabric.Communicator (closed)>");
        Communicator& c = self.comm();
        return "<tpfabric.Communicator '" + c.name() + "' rank " + std::to_string(c.rank()) +
               " of " + std::to_string(c.size()) + ">";
      });

  const auto none = py::none();
  def_collective(cls, "all_reduce", &prepare_all_reduce,
                 "Reduces `buf` over all ranks, in place or into `out`; returns the result.",
                 "buf"_a, "op"_a = "sum", py::kw_only(), "out"_a = none, "dtype"_a = none);
  def_collective(cls, "reduce", &prepare_reduce,
                 "Reduces `buf` onto `root` (in place or into `out`, written on the root only).",
                 "buf"_a, "root"_a = 0, "op"_a = "sum", py::kw_only(), "out"_a = none,
                 "dtype"_a = none);
  def_collective(cls, "broadcast", &prepare_broadcast,
                 "Copies the root's `buf` to every rank (in place, or into `out`).", "buf"_a,
                 "root"_a = 0, py::kw_only(), "out"_a = none, "dtype"_a = none);
  def_collective(cls, "all_gather", &prepare_all_gather,
                 "`recv` (size x len(send)) gets rank r's `send` at block r.", "send"_a, "recv"_a,
                 py::kw_only(), "dtype"_a = none);
  def_collective(cls, "reduce_scatter", &prepare_reduce_scatter,
                 "`send` holds size blocks; rank r's `recv` gets the reduction of block r.",
                 "send"_a, "recv"_a, "op"_a = "sum", py::kw_only(), "dtype"_a = none);
  def_collective(cls, "all_to_all", &prepare_all_to_all,
                 "Block j of rank i's `send` lands in block i of rank j's `recv`.", "send"_a,
                 "recv"_a, py::kw_only(), "dtype"_a = none);
  def_collective(cls, "all_to_allv", &prepare_all_to_allv,
                 "All-to-all with a count per pair (torch's all_to_all_single with splits): "
                 "send_counts[j] elements go to rank j, recv_counts[i] come from rank i; "
                 "displacements (elements) default to the packed layout.",
                 "send"_a, "send_counts"_a, "recv"_a, "recv_counts"_a, py::kw_only(),
                 "send_displs"_a = none, "recv_displs"_a = none, "dtype"_a = none);
  def_collective(cls, "gather", &prepare_gather,
                 "The root's `recv` (size x len(send)) gets rank r's `send` at block r.", "send"_a,
                 "recv"_a = none, "root"_a = 0, py::kw_only(), "dtype"_a = none);
  def_collective(cls, "scatter", &prepare_scatter,
                 "Rank r's `recv` gets block r of the root's `send`.", "send"_a, "recv"_a,
                 "root"_a = 0, py::kw_only(), "dtype"_a = none);
  def_collective(cls, "send", &prepare_send,
                 "Sends `buf` to `peer`; matched in order with the peer's recv.", "buf"_a, "peer"_a,
                 py::kw_only(), "dtype"_a = none);
  def_collective(cls, "recv", &prepare_recv, "Receives into `buf` from `peer`; returns `buf`.",
                 "buf"_a, "peer"_a, py::kw_only(), "dtype"_a = none);
  def_collective(cls, "barrier", &prepare_barrier, "Returns once every rank has entered.",
                 py::kw_only());
}

void bind_mesh(py::module_& m) {
  py::class_<DeviceMesh, std::shared_ptr<DeviceMesh>>(m, "DeviceMesh",
                                                      R"(Communicators over a grid of ranks.

Dimensions are (name, size) pairs, row-major: the last is innermost, its ranks contiguous
(Megatron-LM puts TP last). Collective over `world`.)")
      .def(py::init([](PythonCommunicator& world, std::vector<std::pair<std::string, int>> dims) {
             std::vector<MeshDim> mesh_dims;
             for (auto& [name, size] : dims) mesh_dims.push_back({name, size});
             Communicator& comm = world.comm();
             py::gil_scoped_release nogil;
             return std::make_shared<DeviceMesh>(comm, std::move(mesh_dims));
           }),
           "world"_a, "dims"_a)
      .def(
          "group",
          [](std::shared_ptr<DeviceMesh> mesh, const std::string& dim) {
            Communicator* comm = &mesh->group(dim);
            return PythonCommunicator(comm, std::move(mesh));
          },
          "dim"_a, "The communicator of this rank's group along `dim`.")
      .def_property_readonly("coords", &DeviceMesh::coords)
      .def("coord", &DeviceMesh::coord, "dim"_a)
      .def_property_readonly("dims", [](const DeviceMesh& mesh) {
        std::vector<std::pair<std::string, int>> dims;
        for (const MeshDim& d : mesh.dims()) dims.emplace_back(d.name, d.size);
        return dims;
      });
}

}  // namespace

PYBIND11_MODULE(_tpfabric, m) {
  m.doc() = "tpfabric's communicator: collectives over shared memory and the network.";
  bind_errors(m);
  bind_enums(m);
  bind_work(m);
  bind_communicator(m);
  bind_mesh(m);
  m.def("_abort_unfinished", &PythonCommunicator::abort_unfinished,
        "Aborts every open communicator with an operation not yet done (for the exit on an "
        "uncaught exception: tpfabric._abort_unfinished_on_uncaught_exception).");
}

}  // namespace tpf::python
