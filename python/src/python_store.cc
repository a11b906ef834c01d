#include "python_store.h"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <vector>

#include "tpf/error.h"

namespace tpf::python {
namespace py = pybind11;
namespace {

const char* const kMethods[] = {"set", "get", "add", "wait"};

// torch 1.13's Python stores have no check(); a wait this short stands in for it.
constexpr std::chrono::milliseconds kCheckWait{1};

Error store_error(const std::string& what, const std::string& key, const py::error_already_set& e) {
  return Error(ErrorCode::bootstrap,
               "tpfabric: the Python store failed to " + what + " '" + key + "': " + e.what());
}

}  // namespace

PythonStore::PythonStore(py::object store)
    : store_(std::move(store)), has_check_(py::hasattr(store_, "check")) {
  for (const char* method : kMethods) {
    if (!py::hasattr(store_, method)) {
      throw Error(ErrorCode::invalid_argument,
                  std::string("tpfabric: the store object has no method '") + method +
                      "' (a store needs set, get, add and wait, as torch.distributed.Store has)");
    }
  }
}

PythonStore::~PythonStore() {
  py::gil_scoped_acquire gil;
  store_ = py::object();
}

void PythonStore::set(const std::string& key, const std::string& value) {
  py::gil_scoped_acquire gil;
  try {
    store_.attr("set")(key, py::bytes(value));
  } catch (const py::error_already_set& e) {
    throw store_error("set", key, e);
  }
}

std::string PythonStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  py::gil_scoped_acquire gil;
  try {
    // torch's stores read a zero timeout as "wait forever"; here it means "only if it is there".
    const std::vector<std::string> keys{key};
    if (timeout.count() > 0) {
      try {
        store_.attr("wait")(keys, timeout);
      } catch (const py::error_already_set& e) {
        // torch raises RuntimeError("... Wait timeout") when the deadline passes.
        throw Error(ErrorCode::timeout,
                    "tpfabric: key '" + key + "' did not appear in the Python store within " +
                        std::to_string(timeout.count()) + " ms (" + e.what() + ")");
      }
    } else if (!contains(key)) {
      throw Error(ErrorCode::timeout, "tpfabric: key '" + key + "' is not in the Python store");
    }
    return store_.attr("get")(key).cast<std::string>();
  } catch (const py::error_already_set& e) {
    throw store_error("get", key, e);
  }
}

int64_t PythonStore::add(const std::string& key, int64_t delta) {
  py::gil_scoped_acquire gil;
  try {
    return store_.attr("add")(key, delta).cast<int64_t>();
  } catch (const py::error_already_set& e) {
    throw store_error("add to", key, e);
  }
}

bool PythonStore::check(const std::string& key) {
  py::gil_scoped_acquire gil;
  try {
    return contains(key);
  } catch (const py::error_already_set& e) {
    throw store_error("check", key, e);
  }
}

bool PythonStore::contains(const std::string& key) {
  const std::vector<std::string> keys{key};
  if (has_check_) return store_.attr("check")(keys).cast<bool>();
  try {
    store_.attr("wait")(keys, kCheckWait);
    return true;
  } catch (const py::error_already_set& e) {
    if (!e.matches(PyExc_RuntimeError)) throw;  // torch reports the timeout as RuntimeError
    return false;
  }
}

}  // namespace tpf::python
