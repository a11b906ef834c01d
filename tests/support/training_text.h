// English-like training text for the model tests: a few sentences in a deterministic shuffle.
#pragma once

#include <string>

namespace tpf::testing {

// Writes about `bytes` bytes to path and returns path.
std::string write_training_text(const std::string& path, size_t bytes = 40000);

}  // namespace tpf::testing
