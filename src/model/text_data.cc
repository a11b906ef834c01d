#include "model/text_data.h"

#include "formats/text_files.h"
#include "tensor/counter_rng.h"
#include "tpf/error.h"

namespace tpf {

TextData::TextData(const std::string& path, int64_t seq)
    : TextData(read_text_file(path, "training text"), seq, path) {}

TextData::TextData(std::string text, int64_t seq, const std::string& what)
    : bytes_(std::move(text)), seq_(seq), source_(what) {
  // A sample is seq inputs and the seq targets one byte later: seq + 1 bytes (batch() draws its
  // start from the size - seq positions that leave room for one).
  if (seq < 1 || static_cast<int64_t>(bytes_.size()) < seq + 1) {
    throw Error(ErrorCode::invalid_argument,
                "training text '" + what + "' has " + std::to_string(bytes_.size()) +
                    " bytes; it needs at least " + std::to_string(seq + 1) +
                    " (one sequence of the model's context plus the byte that follows it)");
  }
}

void TextData::batch(uint64_t seed, int64_t step, int64_t micro, int64_t batch,
                     std::vector<int32_t>& inputs, std::vector<int32_t>& targets) const {
  inputs.resize(static_cast<size_t>(batch * seq_));
  targets.resize(inputs.size());
  const RngKey key = RngKey{seed, stream_of("data")}
                         .derive(static_cast<uint64_t>(step))
                         .derive(static_cast<uint64_t>(micro));
  const uint64_t starts = static_cast<uint64_t>(size() - seq_ - 1) + 1;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start =
        static_cast<int64_t>(counter_bits(key, static_cast<uint64_t>(b)) % starts);
    for (int64_t t = 0; t < seq_; ++t) {
      const size_t at = static_cast<size_t>(b * seq_ + t);
      inputs[at] = static_cast<unsigned char>(bytes_[static_cast<size_t>(start + t)]);
      targets[at] = static_cast<unsigned char>(bytes_[static_cast<size_t>(start + t + 1)]);
    }
  }
}

std::vector<int32_t> encode_bytes(const std::string& text) {
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

std::string decode_bytes(const std::vector<int32_t>& tokens) {
  std::string out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) out.push_back(static_cast<char>(static_cast<unsigned char>(t)));
  return out;
}

}  // namespace tpf
