// The Python-facing communicator: a tpf::Communicator plus what Python needs around it. Every
// collective runs with the GIL released; the buffers of an asynchronous operation stay leased until
// it completes, whether or not anyone holds its Work.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "buffer_view.h"
#include "tpf/comm.h"

namespace tpf::python {

namespace py = pybind11;

// One collective, its arguments checked and its buffers leased, ready to run in either form.
struct PreparedCall {
  std::function<void(Communicator&, const CallOptions&)> blocking;
  std::function<Work(Communicator&, const CallOptions&)> async;
  std::vector<std::shared_ptr<BufferLease>> leases;
  py::object result = py::none();  // what the call returns: the output buffer
};

// An asynchronous operation as Python sees it. wait() returns the call's result.
class PythonWork {
 public:
  PythonWork(Work work, std::shared_ptr<std::vector<std::shared_ptr<BufferLease>>> leases,
             py::object result);
  // Blocks (GIL released) until done or `timeout` seconds passed; raises the operation's error.
  // Returns the result, or None if the timeout passed first.
  py::object wait(std::optional<double> timeout_seconds);
  bool is_completed();  // never blocks; raises the operation's error if it failed
  bool ended() const { return work_.completed(); }  // never moves it, never raises
  const py::object& result() const { return result_; }

 private:
  Work work_;
  std::shared_ptr<std::vector<std::shared_ptr<BufferLease>>> leases_;
  py::object result_;
};

class PythonCommunicator {
 public:
  // `owner` keeps what `comm` lives in alive (the communicator itself, or a DeviceMesh).
  PythonCommunicator(Communicator* comm, std::shared_ptr<void> owner);
  static PythonCommunicator owning(Communicator comm);
  ~PythonCommunicator();
  PythonCommunicator(PythonCommunicator&& other) noexcept;
  PythonCommunicator& operator=(PythonCommunicator&&) = delete;

  Communicator& comm();  // raises tpf::Error(invalid_argument) after close()
  bool closed() const { return comm_ == nullptr; }
  // Aborts every open communicator of this process with an operation not yet done. For the exit on
  // an uncaught exception (tpfabric/__init__.py): close() at finalization would wait for those
  // operations until their deadline, and the peers waiting for this rank with them; aborted, they
  // fail at once naming it. The GIL must be held.
  static void abort_unfinished();
  // Waits for this object's outstanding operations, then releases the communicator (the last
  // holder of a split or mesh group destroys it). Idempotent.
  void close();

  py::object run(PreparedCall call, std::optional<double> timeout_seconds);
  PythonWork start(PreparedCall call, std::optional<double> timeout_seconds);

 private:
  struct Outstanding {
    Work work;
    std::shared_ptr<std::vector<std::shared_ptr<BufferLease>>> leases;
  };
  void forget_completed();  // drops the leases of operations that completed (GIL held)
  bool has_unfinished() const;

  Communicator* comm_ = nullptr;
  std::shared_ptr<void> owner_;
  std::vector<Outstanding> outstanding_;
};

CallOptions call_options(std::optional<double> timeout_seconds);

}  // namespace tpf::python
