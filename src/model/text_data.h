// Training text as bytes (the tokenizer is the identity on UTF-8 bytes: vocab 256), and the
// batches drawn from it. A batch is a pure function of (seed, step, micro-batch), so every rank of
// a TP group draws the same batch without communicating, and resuming at step N (at any TP size)
// continues with exactly the batches an uninterrupted run would have seen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpf {

class TextData {
 public:
  // Reads the whole file; throws tpf::Error naming the file if it is unreadable or shorter than
  // seq + 1 bytes (one sequence and the target of its last byte).
  TextData(const std::string& path, int64_t seq);
  TextData(std::string text, int64_t seq, const std::string& what);

  // batch sequences of seq + 1 bytes from random offsets: inputs are the first seq, targets the
  // last seq of each ([batch * seq] each, row-major).
  void batch(uint64_t seed, int64_t step, int64_t micro, int64_t batch,
             std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const;

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::string& source() const { return source_; }

 private:
  std::string bytes_;
  int64_t seq_;
  std::string source_;
};

// Text -> token ids and back (bytes).
std::vector<int32_t> encode_bytes(const std::string& text);
std::string decode_bytes(const std::vector<int32_t>& tokens);

}  // namespace tpf
