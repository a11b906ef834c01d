#include "support/training_text.h"

#include <cstdint>
#include <fstream>
#include <vector>

namespace tpf::testing {

std::string write_training_text(const std::string& path, size_t bytes) {
  const std::vector<std::string> sentences = {
      "The quick brown fox jumps over the lazy dog. ",
      "A journey of a thousand miles begins with a single step. ",
      "All that glitters is not gold. ",
      "To be or not to be, that is the question. ",
      "It was the best of times, it was the worst of times. ",
      "Knowledge is power, and power is knowledge of the right things. ",
      "The early bird catches the worm, but the second mouse gets the cheese. "};
  std::string text;
  uint64_t x = 12345;
  while (text.size() < bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;  // an LCG: the order is fixed
    text += sentences[(x >> 33) % sentences.size()];
  }
  std::ofstream(path) << text;
  return path;
}

}  // namespace tpf::testing
