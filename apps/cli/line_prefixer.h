// Re-emits a byte stream line by line with a prefix ("[3] "), for `tpf run --tag-output`.
#pragma once

#include <cstddef>
#include <string>

namespace tpf::cli {

// Buffers a partial line until its newline arrives so that each line goes out in one write():
// lines from different ranks may alternate, but never mix within a line. A line longer than
// kMaxLine bytes is cut and emitted in pieces, so one rank cannot make the launcher buffer
// without bound.
class LinePrefixer {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  LinePrefixer(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}

  // Appends bytes and writes out every complete line.
  void feed(const char* data, size_t size);
  // Writes a partial last line (with a newline added). Call once the source is closed.
  void flush();

 private:
  void write_all(const std::string& text);

  std::string prefix_;
  int out_fd_;
  std::string pending_;
  bool out_broken_ = false;  // the reader went away (EPIPE): drop output, keep the job running
};

}  // namespace tpf::cli
