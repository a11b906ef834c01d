// printf-style formatting into a std::string: the planner's reports, explanations and notes.
#pragma once

#include <string>

namespace tpf::plan {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tpf::plan
