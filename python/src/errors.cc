#include "errors.h"

#include <array>
#include <string>

#include "tpf/error.h"

namespace tpf::python {
namespace py = pybind11;
namespace {

struct ErrorClass {
  ErrorCode code;
  const char* code_name;  // the C++ enumerator's name
  const char* name;
  PyObject* builtin_base;  // a second base, so `except ValueError` etc. also catches it; or null
};

// Indexed by ErrorCode's value (checked in bind_errors).
const std::array<ErrorClass, 9> kErrorClasses = {{
    {ErrorCode::invalid_argument, "invalid_argument", "InvalidArgumentError", PyExc_ValueError},
    {ErrorCode::timeout, "timeout", "TimeoutError", PyExc_TimeoutError},
    {ErrorCode::mismatch, "mismatch", "MismatchError", nullptr},
    {ErrorCode::peer_died, "peer_died", "PeerDiedError", nullptr},
    {ErrorCode::aborted, "aborted", "AbortedError", nullptr},
    {ErrorCode::resource, "resource", "ResourceError", nullptr},
    {ErrorCode::bootstrap, "bootstrap", "BootstrapError", nullptr},
    {ErrorCode::system, "system", "SystemCallError", PyExc_OSError},
    {ErrorCode::internal, "internal", "InternalError", nullptr},
}};

// The classes live as long as the module (they are its attributes); these handles borrow them.
std::array<PyObject*, kErrorClasses.size()> g_classes{};

void raise(const Error& error) {
  const size_t index = static_cast<size_t>(error.code());
  PyObject* type = index < g_classes.size() ? g_classes[index] : PyExc_RuntimeError;
  py::object instance =
      py::reinterpret_steal<py::object>(PyObject_CallFunction(type, "s", error.what()));
  if (!instance) return;  // the constructor's own exception is set
  if (PyObject_SetAttrString(instance.ptr(), "code", py::cast(error.code()).ptr()) != 0) return;
  PyErr_SetObject(type, instance.ptr());
}

}  // namespace

void bind_errors(py::module_& module) {
  py::enum_<ErrorCode> codes(module, "ErrorCode",
                             "What kind of error a tpfabric.Error is (.code).");
  for (const ErrorClass& entry : kErrorClasses) codes.value(entry.code_name, entry.code);
  py::object base = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "tpfabric.Error",
      "Every error of tpfabric; .code names its kind (the C++ tpf::ErrorCode), the message names "
      "the operation, the rank and what to do.",
      PyExc_RuntimeError, nullptr));
  module.attr("Error") = base;
  for (size_t i = 0; i < kErrorClasses.size(); ++i) {
    const ErrorClass& entry = kErrorClasses[i];
    if (static_cast<size_t>(entry.code) != i) throw std::logic_error("kErrorClasses out of order");
    py::tuple bases = entry.builtin_base != nullptr
                          ? py::make_tuple(base, py::handle(entry.builtin_base))
                          : py::make_tuple(base);
    std::string qualified = std::string("tpfabric.") + entry.name;
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr));
    module.attr(entry.name) = cls;
    g_classes[i] = cls.ptr();
  }
  py::register_exception_translator([](std::exception_ptr pending) {
    try {
      if (pending) std::rethrow_exception(pending);
    } catch (const Error& error) {
      raise(error);
    }
  });
}

}  // namespace tpf::python
