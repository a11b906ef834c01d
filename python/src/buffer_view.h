// What a Python object passed as a collective's buffer is, in the fabric's terms: a pointer, an
// element count and a dtype, read zero-copy from the DLPack protocol (torch tensors of every dtype,
// bfloat16 included; numpy) or the buffer protocol (numpy, array.array, bytearray, memoryview).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "tpf/dtype.h"

namespace tpf::python {

namespace py = pybind11;

// Keeps the exporters' views alive (a Py_buffer, a DLPack capsule) for as long as an operation
// may touch the memory: until its Work completes. Destroy with the GIL held.
struct BufferLease {
  virtual ~BufferLease() = default;
};

struct BufferView {
  void* data = nullptr;
  size_t count = 0;  // elements of `dtype`
  DType dtype = DType::u8;
  std::shared_ptr<BufferLease> lease;
};

enum class Access { read, write };

// `role` names the argument in errors ("send", "recv", ...). `dtype` reinterprets the memory as
// that type (e.g. numpy uint16 holding bfloat16 bits); its byte size must divide the buffer's.
// Raises tpf::Error(invalid_argument) for memory that is not contiguous, not on the CPU, read-only
// where it is written, or of a type the fabric has no dtype for.
BufferView view_buffer(py::handle object, const std::string& role, Access access,
                       std::optional<DType> dtype = std::nullopt);

}  // namespace tpf::python
