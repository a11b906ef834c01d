// safetensors files: round trips of every dtype, a file built byte by byte from the spec, the
// writer's exact layout, and an error naming the file and the tensor for each malformed input.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "support/expect_tpf_error.h"
#include "tpf/error.h"

namespace tpf {
namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                DType::i8,  DType::u8,  DType::i32, DType::i64};

std::vector<std::byte> string_to_bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

// The 8-byte little-endian length, spelled out byte by byte rather than with the code under test.
std::string le64(uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

class SafeTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "safetensors_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void write_raw(const std::string& file, std::string_view contents) const {
    std::ofstream out(file, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    ASSERT_TRUE(out.good());
  }
  std::string read_raw(const std::string& file) const {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // A file with the given header text and `data_bytes` bytes of data, written to name.
  std::string write_file(const std::string& name, std::string_view header, size_t data_bytes) {
    const std::string file = path(name);
    write_raw(file, le64(header.size()) + std::string(header) + std::string(data_bytes, '\x5A'));
    return file;
  }

  std::filesystem::path dir_;
};

TEST_F(SafeTensorsTest, RoundTripsEveryDTypeWithScalarsAndEmptyTensors) {
  SafeTensorsFile file;
  file.metadata = {{"format", "pt"}, {"note", "caf\xC3\xA9 \"quoted\"\n"}};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3}, {2, 3}, {2, 0, 4}, {1, 1, 5}};
  uint8_t next = 1;
  for (DType dtype : kAllDTypes) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      SafeTensor tensor;
      tensor.name = std::string(dtype_name(dtype)) + ".t" + std::to_string(s);
      tensor.dtype = dtype;
      tensor.shape = shapes[s];
      size_t elements = 1;
      for (int64_t dim : tensor.shape) elements *= static_cast<size_t>(dim);
      tensor.data.resize(elements * dtype_size(dtype));
      for (std::byte& b : tensor.data) b = static_cast<std::byte>(next = next * 73 + 41);
      file.tensors.push_back(std::move(tensor));
    }
  }
  const std::string file_path = path("all.safetensors");
  write_safetensors(file_path, file);
  const SafeTensorsFile back = read_safetensors(file_path);
  EXPECT_EQ(back.metadata, file.metadata);
  ASSERT_EQ(back.tensors.size(), file.tensors.size());
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    const SafeTensor& want = file.tensors[i];
    const SafeTensor& got = back.tensors[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.dtype, want.dtype) << want.name;
    EXPECT_EQ(got.shape, want.shape) << want.name;
    EXPECT_EQ(got.data, want.data) << want.name;
  }
  EXPECT_EQ(back.at("f32.t0").data.size(), 4u);
  EXPECT_EQ(back.at("bf16.t3").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back.find("nope"), nullptr);
  EXPECT_TPF_ERROR(back.at("nope"), ErrorCode::invalid_argument, "'nope'");
}

TEST_F(SafeTensorsTest, RoundTripsAnEmptyFileAndALargeTensor) {
  const std::string empty_path = path("empty.safetensors");
  write_safetensors(empty_path, SafeTensorsFile{});
  EXPECT_EQ(read_raw(empty_path), le64(8) + "{}      ");
  const SafeTensorsFile empty = read_safetensors(empty_path);
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_TRUE(empty.metadata.empty());

  SafeTensorsFile file;
  file.tensors.push_back({"big", DType::f32, {1024, 1025}, {}});
  file.tensors[0].data.resize(1024 * 1025 * 4);
  for (size_t i = 0; i < file.tensors[0].data.size(); ++i) {
    file.tensors[0].data[i] = static_cast<std::byte>(i * 7 + i / 251);
  }
  write_safetensors(path("big.safetensors"), file);
  EXPECT_EQ(read_safetensors(path("big.safetensors")).at("big").data, file.tensors[0].data);
}

// Built from the format description, independently of the writer: unpadded header, keys in an
// order other than the data's, a 0-d tensor and an empty one.
TEST_F(SafeTensorsTest, ReadsAHandBuiltFile) {
  const std::string header = R"({"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                             R"("__metadata__":{"format":"pt"},)"
                             R"("e":{"dtype":"BF16","shape":[0,3],"data_offsets":[16,16]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data = std::string("\x00\x00\xC0\x3F", 4) +                 // 1.5f
                           std::string("\x00\x00\x00\xC0", 4) +                 // -2.0f
                           std::string("\xFD\xFF\xFF\xFF\xFF\xFF\xFF\xFF", 8);  // int64 -3
  const std::string file_path = path("hand.safetensors");
  write_raw(file_path, le64(header.size()) + header + data);

  const SafeTensorsFile file = read_safetensors(file_path);
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].name, "b");  // header order
  EXPECT_EQ(file.tensors[1].name, "e");
  EXPECT_EQ(file.tensors[2].name, "a");
  const SafeTensor& a = file.at("a");
  EXPECT_EQ(a.dtype, DType::f32);
  EXPECT_EQ(a.shape, std::vector<int64_t>{2});
  ASSERT_EQ(a.data.size(), 8u);
  float floats[2];
  std::memcpy(floats, a.data.data(), sizeof floats);
  EXPECT_EQ(floats[0], 1.5f);
  EXPECT_EQ(floats[1], -2.0f);
  const SafeTensor& b = file.at("b");
  EXPECT_EQ(b.dtype, DType::i64);
  EXPECT_TRUE(b.shape.empty());
  int64_t scalar;
  ASSERT_EQ(b.data.size(), sizeof scalar);
  std::memcpy(&scalar, b.data.data(), sizeof scalar);
  EXPECT_EQ(scalar, -3);
  EXPECT_EQ(file.at("e").dtype, DType::bf16);
  EXPECT_EQ(file.at("e").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(file.at("e").data.empty());

  // Space padding after the JSON, as the spec allows, reads the same.
  const std::string padded = header + "     ";
  write_raw(file_path, le64(padded.size()) + padded + data);
  EXPECT_EQ(read_safetensors(file_path).at("a").data, a.data);
}

TEST_F(SafeTensorsTest, WriterOutputIsTheSpecLayoutWithAlignedHeader) {
  SafeTensorsFile file;
  file.metadata["k"] = "v";
  file.tensors.push_back({"w", DType::u8, {3}, string_to_bytes("\x01\x02\x03")});
  file.tensors.push_back(
      {"s", DType::i32, {}, string_to_bytes(std::string("\x07\x00\x00\x00", 4))});
  const std::string file_path = path("layout.safetensors");
  write_safetensors(file_path, file);
  std::string header =
      R"({"__metadata__":{"k":"v"},"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
      R"("s":{"dtype":"I32","shape":[],"data_offsets":[3,7]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(read_raw(file_path),
            le64(header.size()) + header + "\x01\x02\x03" + std::string("\x07\x00\x00\x00", 4));
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_FALSE(std::filesystem::exists(file_path + ".tmp"));
}

TEST_F(SafeTensorsTest, WriteReplacesAnExistingFileAndFailedWritesLeaveItAlone) {
  const std::string file_path = path("model.safetensors");
  SafeTensorsFile first;
  first.tensors.push_back({"x", DType::i8, {2}, string_to_bytes("ab")});
  write_safetensors(file_path, first);
  SafeTensorsFile second;
  second.tensors.push_back({"y", DType::i8, {1}, string_to_bytes("c")});
  write_safetensors(file_path, second);
  EXPECT_EQ(read_safetensors(file_path).tensors.at(0).name, "y");

  SafeTensorsFile bad;
  bad.tensors.push_back({"z", DType::i8, {5}, string_to_bytes("c")});
  EXPECT_THROW(write_safetensors(file_path, bad), Error);
  EXPECT_EQ(read_safetensors(file_path).tensors.at(0).name, "y");
  EXPECT_FALSE(std::filesystem::exists(file_path + ".tmp"));
}

TEST_F(SafeTensorsTest, WriterRejectsInvalidTensorsNamingThem) {
  const std::string file_path = path("w.safetensors");
  auto write_one = [&](SafeTensor a, SafeTensor b = {"other", DType::u8, {0}, {}}) {
    SafeTensorsFile file;
    file.tensors = {std::move(a), std::move(b)};
    write_safetensors(file_path, file);
  };
  const auto inv = ErrorCode::invalid_argument;
  EXPECT_TPF_ERROR(write_one({"dup", DType::u8, {0}, {}}, {"dup", DType::u8, {0}, {}}), inv,
                   file_path, "tensor 'dup'", "duplicate");
  EXPECT_TPF_ERROR(write_one({"short", DType::f32, {2, 2}, string_to_bytes("abc")}), inv, file_path,
                   "tensor 'short'", "needs 16 bytes but data holds 3");
  EXPECT_TPF_ERROR(write_one({"neg", DType::u8, {-1}, {}}), inv, "tensor 'neg'", "[-1]");
  EXPECT_TPF_ERROR(write_one({"huge", DType::f64, {int64_t{1} << 40, int64_t{1} << 40}, {}}), inv,
                   "tensor 'huge'", "too large");
  EXPECT_TPF_ERROR(write_one({"__metadata__", DType::u8, {0}, {}}), inv, "'__metadata__'",
                   "reserved");
  EXPECT_TPF_ERROR(write_one({"bad_dtype", static_cast<DType>(99), {0}, {}}), inv,
                   "tensor 'bad_dtype'", "invalid dtype");
  EXPECT_TPF_ERROR(write_one({"bad\xFFname", DType::u8, {0}, {}}), inv, file_path,
                   "not valid UTF-8");
  EXPECT_FALSE(std::filesystem::exists(file_path));
  EXPECT_FALSE(std::filesystem::exists(file_path + ".tmp"));

  SafeTensorsFile ok;
  EXPECT_TPF_ERROR(write_safetensors(path("no/such/dir/x.safetensors"), ok), inv,
                   path("no/such/dir/x.safetensors"), "No such file or directory");
}

TEST_F(SafeTensorsTest, ShortFileOrBadHeaderLengthNamesTheFile) {
  const auto inv = ErrorCode::invalid_argument;
  const std::string tiny = path("tiny.safetensors");
  write_raw(tiny, "abcde");
  EXPECT_TPF_ERROR(read_safetensors(tiny), inv, tiny, "5 bytes", "fewer than the 8");
  write_raw(tiny, "");
  EXPECT_TPF_ERROR(read_safetensors(tiny), inv, tiny, "0 bytes");

  const std::string longer = path("longer.safetensors");
  write_raw(longer, le64(1000) + "{}");
  EXPECT_TPF_ERROR(read_safetensors(longer), inv, longer, "header length 1000 exceeds the 2 bytes");

  const std::string absurd = path("absurd.safetensors");
  write_raw(absurd, le64(uint64_t{1} << 40) + "{}");
  EXPECT_TPF_ERROR(read_safetensors(absurd), inv, absurd, "over 100 MB");
  write_raw(absurd, le64(~uint64_t{0}) + "{}");
  EXPECT_TPF_ERROR(read_safetensors(absurd), inv, absurd, "over 100 MB");

  EXPECT_TPF_ERROR(read_safetensors(path("missing.safetensors")), inv, path("missing.safetensors"),
                   "No such file or directory");
  EXPECT_TPF_ERROR(read_safetensors(dir_.string()), inv, dir_.string(), "not a regular file");
}

TEST_F(SafeTensorsTest, BadJsonNamesTheFileAndOffset) {
  const auto inv = ErrorCode::invalid_argument;
  std::string f = write_file("json.safetensors", R"({"a": )", 0);
  EXPECT_TPF_ERROR(read_safetensors(f), inv, f, "header: invalid JSON at byte 6");
  f = write_file("array.safetensors", "[]", 0);
  EXPECT_TPF_ERROR(read_safetensors(f), inv, f, "header is a JSON array");
  f = write_file("nul.safetensors", std::string("{}\0\0\0\0\0\0", 8), 0);
  EXPECT_TPF_ERROR(read_safetensors(f), inv, f, "invalid JSON at byte 2");
  f = write_file("dup.safetensors",
                 R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                 R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                 2);
  EXPECT_TPF_ERROR(read_safetensors(f), inv, f, "duplicate key \"w\"");
  f = write_file("meta.safetensors", R"({"__metadata__":{"epoch":3}})", 0);
  EXPECT_TPF_ERROR(read_safetensors(f), inv, f, "__metadata__", "\"epoch\"", "not a string");
  f = write_file("null_meta.safetensors", R"({"__metadata__":null})", 0);
  EXPECT_TRUE(read_safetensors(f).metadata.empty());
  f = write_file("meta2.safetensors", R"({"__metadata__":[]})", 0);
  EXPECT_TPF_ERROR(read_safetensors(f), inv, f, "__metadata__ is not a JSON object");
}

// One tensor entry "t" (plus, where given, a second entry) with a buffer of `data_bytes`.
struct BadTensorCase {
  const char* label;
  std::string entries;
  size_t data_bytes;
  std::vector<std::string> message_parts;
};

TEST_F(SafeTensorsTest, MalformedTensorEntriesNameTheFileAndTheTensor) {
  const std::vector<BadTensorCase> cases = {
      {"not an object", R"("t":[1])", 0, {"tensor 't'", "entry is a JSON array"}},
      {"unknown dtype",
       R"("t":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]})",
       1,
       {"tensor 't'", "unsupported dtype \"BOOL\""}},
      {"lower-case dtype",
       R"("t":{"dtype":"f32","shape":[1],"data_offsets":[0,4]})",
       4,
       {"tensor 't'", "unsupported dtype \"f32\""}},
      {"missing dtype", R"("t":{"shape":[1],"data_offsets":[0,1]})", 1, {"tensor 't'", "dtype"}},
      {"negative dim",
       R"("t":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]})",
       0,
       {"tensor 't'", "shape [2,-1]", "non-negative"}},
      {"fractional dim",
       R"("t":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]})",
       1,
       {"tensor 't'", "shape [1.0]"}},
      {"missing shape", R"("t":{"dtype":"U8","data_offsets":[0,1]})", 1, {"tensor 't'", "shape"}},
      {"size mismatch",
       R"("t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]})",
       8,
       {"tensor 't'", "shape [3] of F32 needs 12 bytes", "hold 8"}},
      {"shape overflow",
       R"("t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})",
       8,
       {"tensor 't'", "needs too many bytes"}},
      {"offsets outside buffer",
       R"("t":{"dtype":"U8","shape":[16],"data_offsets":[0,16]})",
       8,
       {"tensor 't'", "[0,16] lie outside the data buffer of 8 bytes"}},
      {"offsets reversed",
       R"("t":{"dtype":"U8","shape":[0],"data_offsets":[8,0]})",
       8,
       {"tensor 't'", "[8,0] are not a range"}},
      {"negative offset",
       R"("t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]})",
       8,
       {"tensor 't'", "not a range"}},
      {"three offsets",
       R"("t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]})",
       1,
       {"tensor 't'", "not two integers"}},
      {"float offsets",
       R"("t":{"dtype":"U8","shape":[1],"data_offsets":[0.0,1.0]})",
       1,
       {"tensor 't'", "not two integers"}},
      {"overlap",
       R"("t":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
       R"("u":{"dtype":"U8","shape":[8],"data_offsets":[4,12]})",
       12,
       {"tensor 'u'", "[4,12] overlap tensor 't'", "ends at 8"}},
      {"same range twice",
       R"("t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
       R"("u":{"dtype":"I32","shape":[1],"data_offsets":[0,4]})",
       4,
       {"overlap tensor", "'t'", "'u'"}},
      {"hole between",
       R"("t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
       R"("u":{"dtype":"U8","shape":[4],"data_offsets":[8,12]})",
       12,
       {"tensor 'u'", "hole of 4 bytes after tensor 't'"}},
      {"hole at start",
       R"("t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]})",
       8,
       {"tensor 't'", "hole of 4 bytes at the start of the data buffer"}},
      {"trailing bytes",
       R"("t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})",
       8,
       {"the last 4 bytes of the 8-byte data buffer belong to no tensor"}},
  };
  for (const BadTensorCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string f = write_file("bad.safetensors", "{" + c.entries + "}", c.data_bytes);
    EXPECT_THROW(
        {
          try {
            read_safetensors(f);
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
            const std::string message = e.what();
            EXPECT_NE(message.find("read_safetensors '" + f + "'"), std::string::npos) << message;
            for (const std::string& part : c.message_parts) {
              EXPECT_NE(message.find(part), std::string::npos)
                  << "'" << part << "' is not in: " << message;
            }
            throw;
          }
        },
        Error);
  }
}

TEST_F(SafeTensorsTest, UnknownEntryFieldsAreIgnoredForForwardCompatibility) {
  const std::string f = write_file(
      "extra.safetensors", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":1}})", 2);
  EXPECT_EQ(read_safetensors(f).at("t").data, string_to_bytes("ZZ"));
}

}  // namespace
}  // namespace tpf
