// tpfabric.Error and its subclasses, one per tpf::ErrorCode, raised for every tpf::Error with the
// same message and the code in `.code` (a tpfabric.ErrorCode, e.g. ErrorCode.timeout).
#pragma once

#include <pybind11/pybind11.h>

namespace tpf::python {

// Creates the exception classes in `module` and translates tpf::Error into them.
void bind_errors(pybind11::module_& module);

}  // namespace tpf::python
