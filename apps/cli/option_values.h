// Strict values of options that CLI11 binds as text: converted after parsing with the project's
// own number parsers (model/parse_number.h), so a bad value is named the way tpf always names it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tpf::cli {

// `fallback` when the option was not given, else the whole text as an integer in
// [min_value, max_value]; anything else is a UsageError naming `flag` and the text.
int64_t integer_option(const std::optional<std::string>& text, const std::string& flag,
                       int64_t fallback, int64_t min_value, int64_t max_value = INT64_MAX);

// The same for a finite real number of at least `min_value`.
double real_option(const std::optional<std::string>& text, const std::string& flag, double fallback,
                   double min_value);

}  // namespace tpf::cli
