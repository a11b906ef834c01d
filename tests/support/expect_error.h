// For child bodies: runs f, which must throw tpf::Error, and returns that error (a child check
// fails if nothing was thrown).
#pragma once

#include <string>

#include "support/multiproc.h"
#include "tpf/error.h"

namespace tpf::testing {

template <class F>
Error expect_error(const std::string& what, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  throw ChildCheckFailure(what + ": no tpf::Error was thrown");
}

}  // namespace tpf::testing
