// tpf::Error: the one exception type of the C++ API. Its message names the operation, the rank and,
// where there is one, what to do about it.
#pragma once

#include "tpf/export.h"

#include <stdexcept>
#include <string>

namespace TPF_API tpf {

enum class ErrorCode {
  invalid_argument,  // the caller passed something wrong (null buffer, bad count, root out of range)
  timeout,           // an operation's deadline expired
  mismatch,          // ranks called different collectives (fingerprints disagree)
  peer_died,         // a peer process exited or was killed
  aborted,           // the communicator was aborted, locally or by a peer
  resource,          // not enough of something (/dev/shm space, memory, ports)
  bootstrap,         // rendezvous failed (store unreachable, bad secret, missing environment)
  system,            // a system call failed unexpectedly
  internal,          // a bug in tpfabric
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Throws Error(code, what + ": " + strerror(err)).
[[noreturn]] void throw_system_error(ErrorCode code, const std::string& what, int err);

}  // namespace tpf
