// Whole-file text I/O for the tools' small files (configurations, manifests, training text, planner
// inputs, benchmark results).
#pragma once

#include <string>

namespace tpf {

// The file's bytes; throws tpf::Error(invalid_argument) "cannot read <what> '<path>'".
std::string read_text_file(const std::string& path, const std::string& what);

// Writes path.tmp and renames it over path, so readers see the old or the new file, never half.
void write_text_file_atomically(const std::string& path, const std::string& text);

}  // namespace tpf
