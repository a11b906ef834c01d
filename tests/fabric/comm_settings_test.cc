// Settings that size the fabric are checked before anything is allocated: values that would wrap
// the segment's size arithmetic are errors naming the setting, not crashes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "base/env_config.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {
namespace {

// Sets an environment variable for the test's scope (each test runs in its own process).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

Error creation_error() {
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  try {
    Communicator::create(0, 1, "127.0.0.1:" + std::to_string(server.port()), "s3cret");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "the communicator was created";
  return Error(ErrorCode::internal, "none");
}

TEST(CommSettings, HugeShmBufferSettingIsAnErrorNamingIt) {
  // 2^63: the segment's size (two slots and more) wrapped and every rank got SIGSEGV.
  ScopedEnv env("TPF_SHM_BUFFER_BYTES", "9223372036854775808");
  const Error e = creation_error();
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(std::string(e.what()).find("TPF_SHM_BUFFER_BYTES"), std::string::npos) << e.what();
}

TEST(CommSettings, SizeWhoseSuffixOverflowsIsRejected) {
  ScopedEnv env("TPF_SHM_BUFFER_BYTES", "18014398509481984K");  // 2^54 KiB = 2^64 bytes
  try {
    base::env_bytes("TPF_SHM_BUFFER_BYTES");
    FAIL() << "accepted a size of 2^64 bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpf
