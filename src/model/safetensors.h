// Reading and writing the Hugging Face safetensors format: an 8-byte little-endian header length N,
// N bytes of JSON describing each tensor (dtype, shape, byte range), then the tensors' bytes. It is
// how checkpoints are exchanged with PyTorch and Hugging Face tooling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"
#include "tpf/dtype.h"

namespace tpf {

// One named tensor with its raw little-endian bytes (data.size() == product(shape) * itemsize; a
// 0-d tensor, shape {}, holds one element).
struct SafeTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

// A whole file held in memory: free-form string metadata and the tensors in file order.
struct SafeTensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<SafeTensor> tensors;  // written in this order; read in header order

  // Linear search: files hold hundreds of tensors, looked up once each at load time.
  const SafeTensor* find(const std::string& name) const;  // nullptr if absent
  const SafeTensor& at(const std::string& name) const;    // tpf::Error naming the tensor if absent
};

// Writes path + ".tmp" and renames it over path, so a crash never leaves a truncated checkpoint
// under the real name. Throws tpf::Error(invalid_argument) for duplicate or reserved names, invalid
// dtypes, negative dims or data of the wrong size, and an error naming the path and the system's
// reason if the file cannot be written.
void write_safetensors(const std::string& path, const SafeTensorsFile& file);

// Reads and validates a whole file. Throws tpf::Error(invalid_argument) naming the file and, where
// there is one, the tensor, for anything malformed: short file, absurd header length, bad JSON,
// dtypes other than those of tpf::DType, negative dims, a byte range that does not match the shape
// or lies outside the buffer, and buffers with overlaps, holes or trailing bytes.
SafeTensorsFile read_safetensors(const std::string& path);

// Between tpfabric tensors and file entries (copies). `shape` overrides the tensor's (same count).
SafeTensor to_safe_tensor(const std::string& name, const Tensor& t);
SafeTensor to_safe_tensor(const std::string& name, const Tensor& t, std::vector<int64_t> shape);
Tensor tensor_of(const SafeTensor& s);

}  // namespace tpf
