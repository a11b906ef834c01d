// The planner's one way to reject input: tpf::Error(invalid_argument) with a message that names
// the file, key or flag and what is wrong with it.
#pragma once

#include <string>

#include "tpf/error.h"

namespace tpf::plan {

[[noreturn]] inline void invalid(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, message);
}

}  // namespace tpf::plan
