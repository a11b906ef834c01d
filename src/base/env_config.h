// Strict readers of environment variables: clear errors naming the variable for malformed values.
// Which TPF_* variables exist, and the communicator's defaults, are comm/settings.h's.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

namespace tpf::base {

// The value of an environment variable, or nullopt if unset or empty.
std::optional<std::string> env_string(const char* name);
// Parses a non-negative size; accepts suffixes K, M, G (powers of 1024). Throws Error naming the
// variable if malformed.
std::optional<size_t> env_bytes(const char* name);
// A request that is on only when set to 1: false where unset, empty or 0; otherwise throws
// Error naming the variable and what 1 means (`meaning`: "dumps go to the job's store").
bool env_request(const char* name, const std::string& meaning);
// Parses seconds (may be fractional, e.g. "0.5").
std::optional<std::chrono::milliseconds> env_seconds(const char* name);

}  // namespace tpf::base
