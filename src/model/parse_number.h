// Strict conversion of text to numbers, for every number tpfabric reads from a file's metadata or a
// command line: the whole text must be the number (no sign or space around it, no trailing
// letters, no exponent for integers) and it must lie in the range the caller allows. std::stoll
// and std::stof accept "1e30" as 1 and name nothing on failure; these name the field and the file.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace tpf {

// "in [lo, hi]", or ">= lo" where hi is int64_t's maximum: the words of a range in the errors
// below and in other range checks ("model.layers must be in [1, 4096]").
std::string range_text(int64_t lo, int64_t hi);

// Decimal integer in [min_value, max_value]. Throws tpf::Error(invalid_argument):
// "<what> must be an integer in [min, max], got '<text>'" (what: "metadata 'n_head' of m.st").
int64_t parse_integer(std::string_view text, int64_t min_value, int64_t max_value,
                      const std::string& what);
// The same for unsigned values up to 2^64 - 1 (seeds).
uint64_t parse_unsigned(std::string_view text, uint64_t max_value, const std::string& what);
// A finite decimal or scientific number in [min_value, max_value] ("1e-5", "0.02").
double parse_real(std::string_view text, double min_value, double max_value,
                  const std::string& what);

}  // namespace tpf
