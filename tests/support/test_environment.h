// What kind of build and run a test is part of, for the few tests that must adapt to it:
//  - kSanitizedBuild: the tests were built with TPF_SANITIZE=ON (ASan + UBSan). The model tests
//    run 3-5x slower there and CI runs them on busy 2-core machines, so the heavy ones run a
//    smaller version of the same check (fewer steps or TP sizes) instead of getting longer
//    deadlines. Sanitizers look for memory and UB errors, which the smaller runs reach through
//    the same code paths; the full sizes run in the Release build.
//  - running_in_ci(): CI sets CI=true (.ci/run does when the CI system does not). A test that
//    would skip because an independent reference (python3-torch) is missing fails there instead:
//    a reference test that skips in CI proves nothing.
#pragma once

#include <cstdlib>
#include <string>

namespace tpf::testing {

// From the compiler (GCC: __SANITIZE_ADDRESS__, Clang: __has_feature), so no build flag can
// disagree with what was actually compiled in.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif

// True when the environment variable CI is set to anything but "", "0" or "false".
inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr) return false;
  const std::string value = ci;
  return !value.empty() && value != "0" && value != "false";
}

}  // namespace tpf::testing
