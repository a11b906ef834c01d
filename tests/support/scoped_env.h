// An environment variable set for a test's scope (each test runs in its own process under ctest;
// the variable is removed again, not restored, at the end of the scope).
#pragma once

#include <stdlib.h>

namespace tpf::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

}  // namespace tpf::testing
