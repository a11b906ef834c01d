#include "tpf/error.h"

#include <cstring>

namespace tpf {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::mismatch: return "mismatched collectives";
    case ErrorCode::peer_died: return "peer died";
    case ErrorCode::aborted: return "aborted";
    case ErrorCode::resource: return "out of resources";
    case ErrorCode::bootstrap: return "bootstrap failed";
    case ErrorCode::system: return "system error";
    case ErrorCode::internal: return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

void throw_system_error(ErrorCode code, const std::string& what, int err) {
  throw Error(code, what + ": " + std::strerror(err));
}

}  // namespace tpf
