#include "python_communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_set>
#include <utility>

#include "tpf/error.h"

namespace tpf::python {

CallOptions call_options(std::optional<double> timeout_seconds) {
  CallOptions options;
  if (timeout_seconds) {
    if (!std::isfinite(*timeout_seconds) || *timeout_seconds < 0) {
      throw Error(ErrorCode::invalid_argument,
                  "tpfabric: timeout must be a finite number of seconds >= 0, not " +
                      std::to_string(*timeout_seconds));
    }
    // Clamped before the conversion (a huge float would overflow it); the fabric clamps again to
    // its own longest deadline.
    constexpr double kLongestMs = 1e12;
    options.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(std::min(*timeout_seconds * 1000.0, kLongestMs)));
  }
  return options;
}

PythonWork::PythonWork(Work work, std::shared_ptr<std::vector<std::shared_ptr<BufferLease>>> leases,
                       py::object result)
    : work_(std::move(work)), leases_(std::move(leases)), result_(std::move(result)) {}

py::object PythonWork::wait(std::optional<double> timeout_seconds) {
  const std::optional<std::chrono::milliseconds> timeout = call_options(timeout_seconds).timeout;
  bool done = false;
  {
    py::gil_scoped_release nogil;
    if (timeout) {
      done = work_.wait_for(*timeout);
    } else {
      work_.wait();
      done = true;
    }
  }
  if (!done) return py::none();
  return result_;
}

bool PythonWork::is_completed() { return work_.test(); }

namespace {

// Every PythonCommunicator alive in this process, for abort_unfinished(). Guarded by the GIL:
// pybind11 constructs, moves and destroys them with it held.
std::unordered_set<PythonCommunicator*>& live_communicators() {
  static auto* live = new std::unordered_set<PythonCommunicator*>;  // outlives every holder
  return *live;
}

}  // namespace

PythonCommunicator::PythonCommunicator(Communicator* comm, std::shared_ptr<void> owner)
    : comm_(comm), owner_(std::move(owner)) {
  live_communicators().insert(this);
}

PythonCommunicator::PythonCommunicator(PythonCommunicator&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      owner_(std::move(other.owner_)),
      outstanding_(std::move(other.outstanding_)) {
  live_communicators().insert(this);
}

PythonCommunicator PythonCommunicator::owning(Communicator comm) {
  auto owned = std::make_shared<Communicator>(std::move(comm));
  Communicator* raw = owned.get();
  return PythonCommunicator(raw, std::move(owned));
}

PythonCommunicator::~PythonCommunicator() {
  // pybind11 destroys objects with the GIL held; a moved-from object holds nothing.
  if (comm_ != nullptr) close();
  live_communicators().erase(this);
}

void PythonCommunicator::abort_unfinished() {
  for (PythonCommunicator* python_comm : live_communicators()) {
    if (python_comm->comm_ != nullptr && python_comm->has_unfinished()) python_comm->comm_->abort();
  }
}

bool PythonCommunicator::has_unfinished() const {
  return std::any_of(outstanding_.begin(), outstanding_.end(),
                     [](const Outstanding& entry) { return !entry.work.completed(); });
}

Communicator& PythonCommunicator::comm() {
  if (comm_ == nullptr) {
    throw Error(ErrorCode::invalid_argument, "tpfabric: the communicator is closed");
  }
  return *comm_;
}

void PythonCommunicator::close() {
  if (comm_ == nullptr) return;
  std::vector<Outstanding> outstanding = std::move(outstanding_);
  outstanding_.clear();
  {
    py::gil_scoped_release nogil;
    // Every wait inside an operation is bounded by its deadline, so this ends; a failure was
    // the business of whoever held the Work.
    for (Outstanding& entry : outstanding) {
      try {
        entry.work.wait();
      } catch (const Error&) {
      }
    }
    comm_ = nullptr;
    owner_.reset();  // may destroy the communicator: joins its threads, never needs the GIL
  }
  outstanding.clear();  // the leases, with the GIL held
}

void PythonCommunicator::forget_completed() {
  // Without moving anything (test() would take a round of every pending transfer): a failed
  // operation is done with its buffers too, and its failure is the business of its Work's holder.
  std::erase_if(outstanding_, [](const Outstanding& entry) { return entry.work.completed(); });
}

py::object PythonCommunicator::run(PreparedCall call, std::optional<double> timeout_seconds) {
  Communicator& communicator = comm();
  const CallOptions options = call_options(timeout_seconds);
  forget_completed();
  {
    py::gil_scoped_release nogil;
    call.blocking(communicator, options);
  }
  return call.result;  // the leases go with `call`, the GIL held
}

PythonWork PythonCommunicator::start(PreparedCall call, std::optional<double> timeout_seconds) {
  Communicator& communicator = comm();
  const CallOptions options = call_options(timeout_seconds);
  forget_completed();
  Work work;
  {
    py::gil_scoped_release nogil;
    work = call.async(communicator, options);
  }
  auto leases = std::make_shared<std::vector<std::shared_ptr<BufferLease>>>(std::move(call.leases));
  outstanding_.push_back({work, leases});
  return PythonWork(std::move(work), std::move(leases), std::move(call.result));
}

}  // namespace tpf::python
