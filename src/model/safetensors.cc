#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "formats/json.h"
#include "tpf/error.h"

namespace tpf {

namespace {

// Tensor bytes are copied between memory and file verbatim, and the format fixes them as
// little-endian; a big-endian port would need to swap here.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// Real headers are a few hundred bytes per tensor; a length beyond this is a corrupt or foreign
// file, and refusing it keeps us from allocating whatever the first 8 bytes happen to say.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i8, "I8"},   {DType::u8, "U8"},   {DType::i32, "I32"}, {DType::i64, "I64"},
};

std::string_view safetensors_name(DType dtype) {
  for (const auto& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "invalid";
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& entry : kDTypeNames) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// product(shape) * itemsize, or nullopt if a dim is negative or the product exceeds int64 (so
// later offset arithmetic cannot overflow either).
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, DType dtype) {
  int64_t bytes = static_cast<int64_t>(dtype_size(dtype));
  for (const int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(bytes, dim, &bytes)) return std::nullopt;
  }
  return static_cast<uint64_t>(bytes);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// A full disk is a resource problem the user can fix; other write failures are unexpected.
[[noreturn]] void throw_write_error(const std::string& what, int err) {
  throw_system_error(err == ENOSPC || err == EDQUOT ? ErrorCode::resource : ErrorCode::system, what,
                     err);
}

// Removes the temporary file unless the rename went through, so a failed write leaves nothing.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!committed_) std::remove(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void commit() { committed_ = true; }

 private:
  std::string path_;
  bool committed_ = false;
};

// The rename is only durable once the directory entry is on disk; best effort, since some file
// systems refuse fsync on directories and the data itself is already safe.
void sync_parent_directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

json::Value header_json(const std::string& op, const SafeTensorsFile& file) {
  auto check_utf8 = [&](const std::string& s, const char* role) {
    if (!json::is_valid_utf8(s)) {
      throw Error(ErrorCode::invalid_argument,
                  op + ": " + role + " " + json::dump(json::Value(s)) + " is not valid UTF-8");
    }
  };
  json::Object header;
  if (!file.metadata.empty()) {
    json::Object metadata;
    for (const auto& [key, value] : file.metadata) {
      check_utf8(key, "metadata key");
      check_utf8(value, "metadata value");
      metadata.emplace_back(key, value);
    }
    header.emplace_back(kMetadataKey, std::move(metadata));
  }
  std::unordered_set<std::string_view> names;
  uint64_t offset = 0;
  for (const SafeTensor& tensor : file.tensors) {
    auto fail = [&](const std::string& problem) {
      throw Error(ErrorCode::invalid_argument, op + ": tensor '" + tensor.name + "': " + problem);
    };
    check_utf8(tensor.name, "tensor name");
    if (tensor.name == kMetadataKey) fail("the name is reserved for the file's metadata");
    if (!names.insert(tensor.name).second) fail("duplicate tensor name");
    if (!is_valid(tensor.dtype)) fail("invalid dtype value");
    const std::optional<uint64_t> bytes = byte_size(tensor.shape, tensor.dtype);
    if (!bytes) fail("shape " + shape_text(tensor.shape) + " has a negative or too large dim");
    if (*bytes != tensor.data.size()) {
      fail("shape " + shape_text(tensor.shape) + " of " +
           std::string(safetensors_name(tensor.dtype)) + " needs " + std::to_string(*bytes) +
           " bytes but data holds " + std::to_string(tensor.data.size()));
    }
    json::Array shape(tensor.shape.begin(), tensor.shape.end());
    json::Object entry;
    entry.emplace_back("dtype", safetensors_name(tensor.dtype));
    entry.emplace_back("shape", std::move(shape));
    entry.emplace_back("data_offsets", json::Array{offset, offset + *bytes});
    header.emplace_back(tensor.name, std::move(entry));
    offset += *bytes;
  }
  return header;
}

void encode_u64_le(uint64_t value, unsigned char out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t decode_u64_le(const unsigned char in[8]) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | in[i];
  return value;
}

// Where one tensor's bytes lie in the data buffer, for the coverage check and the read.
struct Extent {
  uint64_t begin;
  uint64_t end;
  size_t index;  // into SafeTensorsFile::tensors
};

class HeaderReader {
 public:
  HeaderReader(const std::string& op, uint64_t buffer_size) : op_(op), buffer_size_(buffer_size) {}

  void read_metadata(const json::Value& value, SafeTensorsFile& out) const {
    if (value.is_null()) return;  // no metadata, as the reference reader reads an explicit null
    if (!value.is_object()) fail(std::string(kMetadataKey) + " is not a JSON object");
    for (const auto& [key, item] : value.as_object()) {
      if (!item.is_string()) {
        fail(std::string(kMetadataKey) + " value for " + json::dump(json::Value(key)) +
             " is a JSON " + json::type_name(item.type()) + ", not a string");
      }
      out.metadata.emplace(key, item.as_string());
    }
  }

  // Fills in name, dtype and shape (data stays empty) and returns the tensor's byte range.
  Extent read_tensor(const std::string& name, const json::Value& value, SafeTensor& tensor) const {
    auto bad = [&](const std::string& problem) { fail("tensor '" + name + "': " + problem); };
    if (!value.is_object()) bad("entry is a JSON " + std::string(json::type_name(value.type())));
    tensor.name = name;

    const json::Value* dtype = value.find("dtype");
    if (!dtype || !dtype->is_string()) bad("missing or non-string \"dtype\"");
    const std::optional<DType> parsed = parse_safetensors_dtype(dtype->as_string());
    if (!parsed) {
      bad("unsupported dtype " + json::dump(*dtype) +
          " (tpfabric reads F32, F64, F16, BF16, I8, U8, I32, I64)");
    }
    tensor.dtype = *parsed;

    const json::Value* shape = value.find("shape");
    if (!shape || !shape->is_array()) bad("missing or non-array \"shape\"");
    for (const json::Value& dim : shape->as_array()) {
      if (!dim.is_int() || dim.as_int() < 0) {
        bad("shape " + json::dump(*shape) + " is not a list of non-negative integers");
      }
      tensor.shape.push_back(dim.as_int());
    }

    const json::Value* offsets = value.find("data_offsets");
    if (!offsets || !offsets->is_array() || offsets->size() != 2 || !offsets->at(0).is_int() ||
        !offsets->at(1).is_int()) {
      bad("missing \"data_offsets\" or not two integers");
    }
    const int64_t begin = offsets->at(0).as_int(), end = offsets->at(1).as_int();
    const std::string offsets_text = json::dump(*offsets);
    if (begin < 0 || end < begin) bad("data_offsets " + offsets_text + " are not a range");
    if (static_cast<uint64_t>(end) > buffer_size_) {
      bad("data_offsets " + offsets_text + " lie outside the data buffer of " +
          std::to_string(buffer_size_) + " bytes");
    }
    const std::optional<uint64_t> bytes = byte_size(tensor.shape, tensor.dtype);
    if (!bytes || *bytes != static_cast<uint64_t>(end - begin)) {
      bad("shape " + shape_text(tensor.shape) + " of " + dtype->as_string() + " needs " +
          (bytes ? std::to_string(*bytes) : "too many") + " bytes but data_offsets " +
          offsets_text + " hold " + std::to_string(end - begin));
    }
    return Extent{static_cast<uint64_t>(begin), static_cast<uint64_t>(end), 0};
  }

  // The format requires the tensors to tile the buffer exactly: no overlaps (two tensors sharing
  // bytes would alias), no holes and no trailing bytes (both hide data no tensor describes).
  void check_coverage(std::vector<Extent>& extents, const SafeTensorsFile& file) const {
    std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;
    const std::string* previous = nullptr;
    for (const Extent& extent : extents) {
      const std::string& name = file.tensors[extent.index].name;
      const std::string range = json::dump(json::Array{extent.begin, extent.end});
      if (extent.begin < covered) {
        fail("tensor '" + name + "': data_offsets " + range + " overlap tensor '" + *previous +
             "', which ends at " + std::to_string(covered));
      }
      if (extent.begin > covered) {
        fail("tensor '" + name + "': data_offsets " + range + " leave a hole of " +
             std::to_string(extent.begin - covered) + " bytes " +
             (previous ? "after tensor '" + *previous + "'" : "at the start of the data buffer"));
      }
      covered = extent.end;
      previous = &name;
    }
    if (covered != buffer_size_) {
      fail("the last " + std::to_string(buffer_size_ - covered) + " bytes of the " +
           std::to_string(buffer_size_) + "-byte data buffer belong to no tensor");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(ErrorCode::invalid_argument, op_ + ": " + problem);
  }

  const std::string& op_;
  uint64_t buffer_size_;
};

void read_exactly(std::FILE* f, void* buffer, size_t bytes, const std::string& op,
                  const char* what) {
  if (bytes == 0) return;
  if (std::fread(buffer, 1, bytes, f) == bytes) return;
  if (std::ferror(f)) throw_system_error(ErrorCode::system, op + ": reading " + what, errno);
  throw Error(ErrorCode::invalid_argument,
              op + ": file ended while reading " + what + " (was it truncated while being read?)");
}

}  // namespace

const SafeTensor* SafeTensorsFile::find(const std::string& name) const {
  for (const SafeTensor& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

const SafeTensor& SafeTensorsFile::at(const std::string& name) const {
  if (const SafeTensor* tensor = find(name)) return *tensor;
  throw Error(ErrorCode::invalid_argument, "safetensors: no tensor named '" + name + "' among " +
                                               std::to_string(tensors.size()) + " tensors");
}

void write_safetensors(const std::string& path, const SafeTensorsFile& file) {
  const std::string op = "write_safetensors '" + path + "'";
  std::string header = json::dump(header_json(op, file));
  // The spec allows space padding; aligning the buffer to 8 bytes lets readers that map the file
  // view every tensor in place without misaligned loads.
  header.append((8 - header.size() % 8) % 8, ' ');
  unsigned char length[8];
  encode_u64_le(header.size(), length);

  const std::string temp = path + ".tmp";
  FilePtr f(std::fopen(temp.c_str(), "wb"));
  if (!f) throw_system_error(ErrorCode::invalid_argument, op + ": cannot create " + temp, errno);
  TempFileGuard guard(temp);
  auto write = [&](const void* data, size_t bytes) {
    if (bytes != 0 && std::fwrite(data, 1, bytes, f.get()) != bytes) {
      throw_write_error(op + ": writing " + temp, errno);
    }
  };
  write(length, sizeof length);
  write(header.data(), header.size());
  for (const SafeTensor& tensor : file.tensors) write(tensor.data.data(), tensor.data.size());
  // Flush and fsync before the rename: otherwise a crash can leave the new name pointing at a file
  // whose data never reached the disk.
  if (std::fflush(f.get()) != 0) throw_write_error(op + ": writing " + temp, errno);
  if (::fsync(::fileno(f.get())) != 0) throw_write_error(op + ": syncing " + temp, errno);
  if (std::fclose(f.release()) != 0) throw_write_error(op + ": closing " + temp, errno);
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    throw_system_error(ErrorCode::system, op + ": renaming " + temp, errno);
  }
  guard.commit();
  sync_parent_directory(path);
}

SafeTensorsFile read_safetensors(const std::string& path) {
  const std::string op = "read_safetensors '" + path + "'";
  auto fail = [&](const std::string& problem) {
    throw Error(ErrorCode::invalid_argument, op + ": " + problem);
  };
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) throw_system_error(ErrorCode::invalid_argument, op + ": cannot open", errno);
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) != 0) {
    throw_system_error(ErrorCode::system, op + ": fstat", errno);
  }
  if (!S_ISREG(st.st_mode)) fail("not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    fail("file has " + std::to_string(file_size) + " bytes, fewer than the 8 of the header length");
  }

  unsigned char length[8];
  read_exactly(f.get(), length, sizeof length, op, "the header length");
  const uint64_t header_size = decode_u64_le(length);
  if (header_size > kMaxHeaderBytes) {
    fail("header length " + std::to_string(header_size) +
         " is over 100 MB; this is not a safetensors file or it is corrupt");
  }
  if (header_size > file_size - 8) {
    fail("header length " + std::to_string(header_size) + " exceeds the " +
         std::to_string(file_size - 8) + " bytes after the length");
  }
  std::string text(header_size, '\0');
  read_exactly(f.get(), text.data(), text.size(), op, "the header");
  const json::Value header = json::parse(text, op + " header");
  if (!header.is_object()) {
    fail("header is a JSON " + std::string(json::type_name(header.type())) + ", not an object");
  }

  const uint64_t buffer_size = file_size - 8 - header_size;
  HeaderReader reader(op, buffer_size);
  SafeTensorsFile out;
  std::vector<Extent> extents;
  for (const auto& [name, value] : header.as_object()) {
    if (name == kMetadataKey) {
      reader.read_metadata(value, out);
      continue;
    }
    // Names are unique: the JSON parser rejects duplicate keys with the offending name.
    SafeTensor& tensor = out.tensors.emplace_back();
    Extent extent = reader.read_tensor(name, value, tensor);
    extent.index = out.tensors.size() - 1;
    extents.push_back(extent);
  }
  reader.check_coverage(extents, out);

  // Sorted by offset and contiguous, so the tensors are read front to back without seeking.
  for (const Extent& extent : extents) {
    SafeTensor& tensor = out.tensors[extent.index];
    tensor.data.resize(extent.end - extent.begin);
    read_exactly(f.get(), tensor.data.data(), tensor.data.size(), op,
                 ("tensor '" + tensor.name + "'").c_str());
  }
  return out;
}

SafeTensor to_safe_tensor(const std::string& name, const Tensor& t) {
  return to_safe_tensor(name, t, t.shape());
}

SafeTensor to_safe_tensor(const std::string& name, const Tensor& t, std::vector<int64_t> shape) {
  if (shape_numel(shape) != t.numel()) {
    throw Error(ErrorCode::invalid_argument, "tensor '" + name + "': shape " + shape_string(shape) +
                                                 " does not hold the " + std::to_string(t.numel()) +
                                                 " elements of " + shape_string(t.shape()));
  }
  SafeTensor s;
  s.name = name;
  s.dtype = t.dtype();
  s.shape = std::move(shape);
  s.data.resize(t.bytes());
  if (t.bytes() > 0) std::memcpy(s.data.data(), t.data(), t.bytes());
  return s;
}

Tensor tensor_of(const SafeTensor& s) {
  Tensor t = Tensor::uninitialized(s.shape, s.dtype);
  if (t.bytes() != s.data.size()) {
    throw Error(ErrorCode::invalid_argument, "tensor '" + s.name +
                                                 "': " + std::to_string(s.data.size()) +
                                                 " bytes for shape " + shape_string(s.shape));
  }
  if (t.bytes() > 0) std::memcpy(t.data(), s.data.data(), t.bytes());
  return t;
}

}  // namespace tpf
