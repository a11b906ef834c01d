#include "cli/option_values.h"

#include <limits>

#include "cli/commands.h"
#include "model/parse_number.h"
#include "tpf/error.h"

namespace tpf::cli {

int64_t integer_option(const std::optional<std::string>& text, const std::string& flag,
                       int64_t fallback, int64_t min_value, int64_t max_value) {
  if (!text) return fallback;
  try {
    return parse_integer(*text, min_value, max_value, flag);
  } catch (const Error& e) {
    throw UsageError(e.what());  // a command-line mistake: exit status 2 with the usage hint
  }
}

double real_option(const std::optional<std::string>& text, const std::string& flag, double fallback,
                   double min_value) {
  if (!text) return fallback;
  try {
    return parse_real(*text, min_value, std::numeric_limits<double>::max(), flag);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace tpf::cli
