#include "buffer_view.h"

#include <dlpack/dlpack.h>

#include <cstring>
#include <string_view>

#include "tpf/error.h"

namespace tpf::python {
namespace {

[[noreturn]] void refuse(const std::string& role, const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "tpfabric: argument '" + role + "' " + why);
}

struct PyBufferLease : BufferLease {
  Py_buffer view{};
  ~PyBufferLease() override { PyBuffer_Release(&view); }
};

struct DlpackLease : BufferLease {
  // The capsule's destructor (the exporter's) frees the tensor while the capsule is unconsumed,
  // so holding it is all the lease does.
  py::object capsule;
};

std::optional<DType> dtype_of_format(std::string_view format, size_t item_bytes) {
  // struct-module format codes; a leading byte-order or alignment mark is irrelevant on the
  // little-endian machines the fabric runs on, except '>' and '!' (big-endian), refused.
  if (!format.empty() && (format[0] == '>' || format[0] == '!')) return std::nullopt;
  if (!format.empty() && (format[0] == '<' || format[0] == '@' || format[0] == '='))
    format.remove_prefix(1);
  if (format.size() != 1) return std::nullopt;
  switch (format[0]) {
    case 'f': return DType::f32;
    case 'd': return DType::f64;
    case 'e': return DType::f16;
    case 'b': return DType::i8;
    case 'B': return DType::u8;
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
      if (item_bytes == 4) return DType::i32;
      if (item_bytes == 8) return DType::i64;
      return std::nullopt;
    default: return std::nullopt;
  }
}

std::optional<DType> dtype_of_dlpack(DLDataType type) {
  if (type.lanes != 1) return std::nullopt;
  switch (type.code) {
    case kDLFloat:
      if (type.bits == 16) return DType::f16;
      if (type.bits == 32) return DType::f32;
      if (type.bits == 64) return DType::f64;
      return std::nullopt;
    case kDLBfloat: return type.bits == 16 ? std::optional(DType::bf16) : std::nullopt;
    case kDLInt:
      if (type.bits == 8) return DType::i8;
      if (type.bits == 32) return DType::i32;
      if (type.bits == 64) return DType::i64;
      return std::nullopt;
    case kDLUInt: return type.bits == 8 ? std::optional(DType::u8) : std::nullopt;
    default: return std::nullopt;
  }
}

std::string dlpack_type_name(DLDataType type) {
  static const char* const kCodes[] = {"int",           "uint",   "float",
                                       "opaque handle", "bfloat", "complex"};
  std::string code = type.code < 6 ? kCodes[type.code] : "type code " + std::to_string(type.code);
  std::string name = code + std::to_string(type.bits);
  if (type.lanes != 1) name += "x" + std::to_string(type.lanes);
  return name;
}

// Element count and reinterpretation shared by both protocols.
BufferView finish(void* data, size_t bytes, DType natural, std::optional<DType> requested,
                  const std::string& role, std::shared_ptr<BufferLease> lease) {
  BufferView view;
  view.data = data;
  view.dtype = requested.value_or(natural);
  const size_t item = dtype_size(view.dtype);
  if (bytes % item != 0) {
    refuse(role, "holds " + std::to_string(bytes) + " bytes, not a whole number of " +
                     dtype_name(view.dtype) + " elements");
  }
  view.count = bytes / item;
  view.lease = std::move(lease);
  return view;
}

BufferView view_buffer_protocol(py::handle object, const std::string& role, Access access,
                                std::optional<DType> requested) {
  auto lease = std::make_shared<PyBufferLease>();
  int flags = PyBUF_STRIDES | PyBUF_FORMAT | (access == Access::write ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), &lease->view, flags) != 0) {
    // The exporter's message says why (most often: read-only memory where it is written).
    py::error_already_set cause;
    refuse(role, std::string("cannot be ") +
                     (access == Access::write ? "written in place" : "read") + ": " + cause.what());
  }
  const Py_buffer& view = lease->view;
  if (!PyBuffer_IsContiguous(&view, 'C')) {
    refuse(role, "is not C-contiguous; pass a contiguous copy (numpy.ascontiguousarray)");
  }
  const char* format = view.format != nullptr ? view.format : "B";
  std::optional<DType> natural = dtype_of_format(format, static_cast<size_t>(view.itemsize));
  if (!natural && !requested) {
    refuse(role, std::string("has element format '") + format +
                     "', which has no tpfabric dtype (f32, f64, f16, bf16, i8, u8, i32, i64); "
                     "pass dtype= to reinterpret its bytes");
  }
  return finish(view.buf, static_cast<size_t>(view.len), natural.value_or(DType::u8), requested,
                role, std::move(lease));
}

BufferView view_dlpack(py::handle object, const std::string& role, std::optional<DType> requested) {
  auto lease = std::make_shared<DlpackLease>();
  lease->capsule = object.attr("__dlpack__")();
  auto* managed =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(lease->capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    py::error_already_set cause;
    refuse(role, std::string("__dlpack__() did not return a DLPack capsule: ") + cause.what());
  }
  const DLTensor& tensor = managed->dl_tensor;
  if (tensor.device.device_type != kDLCPU && tensor.device.device_type != kDLCUDAHost) {
    refuse(role, "is not in CPU memory (DLPack device type " +
                     std::to_string(tensor.device.device_type) +
                     "); the fabric reads and writes host memory: move it with .cpu()");
  }
  size_t elements = 1;
  for (int d = 0; d < tensor.ndim; ++d) elements *= static_cast<size_t>(tensor.shape[d]);
  if (tensor.strides != nullptr && elements > 1) {
    int64_t expected = 1;
    for (int d = tensor.ndim - 1; d >= 0; --d) {
      if (tensor.shape[d] != 1 && tensor.strides[d] != expected) {
        refuse(role, "is not contiguous (dimension " + std::to_string(d) + " has stride " +
                         std::to_string(tensor.strides[d]) + ", expected " +
                         std::to_string(expected) + "); pass .contiguous()");
      }
      expected *= tensor.shape[d];
    }
  }
  std::optional<DType> natural = dtype_of_dlpack(tensor.dtype);
  if (!natural && !requested) {
    refuse(role, "has element type " + dlpack_type_name(tensor.dtype) +
                     ", which has no tpfabric dtype (f32, f64, f16, bf16, i8, u8, i32, i64)");
  }
  const size_t item_bits = static_cast<size_t>(tensor.dtype.bits) * tensor.dtype.lanes;
  if (item_bits % 8 != 0) refuse(role, "has elements that are not whole bytes");
  void* data = static_cast<char*>(tensor.data) + tensor.byte_offset;
  return finish(data, elements * item_bits / 8, natural.value_or(DType::u8), requested, role,
                std::move(lease));
}

}  // namespace

BufferView view_buffer(py::handle object, const std::string& role, Access access,
                       std::optional<DType> dtype) {
  if (object.is_none()) refuse(role, "is None where a buffer is needed");
  // numpy offers both protocols; the buffer protocol also says whether memory is read-only.
  if (PyObject_CheckBuffer(object.ptr())) return view_buffer_protocol(object, role, access, dtype);
  if (py::hasattr(object, "__dlpack__")) return view_dlpack(object, role, dtype);
  refuse(role, "of type " + std::string(py::str(py::type::handle_of(object).attr("__name__"))) +
                   " is neither a DLPack exporter (__dlpack__: torch.Tensor, numpy.ndarray) nor a "
                   "buffer (bytearray, array.array, memoryview)");
}

}  // namespace tpf::python
