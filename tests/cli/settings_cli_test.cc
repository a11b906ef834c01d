// `tpf settings` as a user runs it: every value with its source, and a malformed value reported as
// a communicator would report it.
#include <gtest/gtest.h>

#include <string>

#include "support/run_tpf.h"

namespace tpf::testing {
namespace {

// The line that starts with `name` followed by a blank, or "" if none does.
std::string line_of(const std::string& out, const std::string& name) {
  for (const std::string& line : lines_of(out)) {
    if (line.rfind(name + " ", 0) == 0) return line;
  }
  return {};
}

TEST(SettingsCli, PrintsEachValueWithItsSource) {
  const Outcome plain = run_tpf({"settings"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::string timeout = line_of(plain.out, "TPF_TIMEOUT");
  EXPECT_TRUE(contains(timeout, "300 s") && contains(timeout, "default")) << plain.out;
  EXPECT_FALSE(line_of(plain.out, "TPF_RUN_GRACE_S").empty()) << plain.out;

  const Outcome set =
      run_tpf({"settings"}, {"TPF_TIMEOUT=7", "TPF_JOB_SECRET=0123456789abcdefXYZ"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  const std::string from_env = line_of(set.out, "TPF_TIMEOUT");
  EXPECT_TRUE(contains(from_env, "7 s") && contains(from_env, " TPF_TIMEOUT ")) << set.out;
  EXPECT_FALSE(contains(set.out, "0123456789abcdefXYZ")) << "the secret was printed: " << set.out;
}

// The settings every rank derives the same choices from are marked with whom they must match;
// the others are not.
TEST(SettingsCli, MarksTheSettingsRanksMustShare) {
  const Outcome r = run_tpf({"settings"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"TPF_NET_ALGO", "TPF_NET_CONNECT", "TPF_NET_CALL_US", "TPF_NET_STEP_US",
                           "TPF_NET_MESSAGE_US", "TPF_NET_GBPS", "TPF_NET_REDUCE_GBPS"}) {
    EXPECT_TRUE(contains(line_of(r.out, name), "[alike on every rank]")) << r.out;
  }
  for (const char* name : {"TPF_ALLREDUCE_ALGO", "TPF_EAGER_MAX_BYTES", "TPF_SHM_STEP_US",
                           "TPF_SHM_EXCESS_STEP_US", "TPF_SHM_COPY_GBPS", "TPF_SHM_REDUCE_GBPS"}) {
    EXPECT_TRUE(contains(line_of(r.out, name), "[alike on each host's ranks]")) << r.out;
  }
  for (const char* name : {"TPF_TIMEOUT", "TPF_NET_PROTOCOL", "TPF_SHM_BUFFER_BYTES", "TPF_CPUS"}) {
    EXPECT_FALSE(contains(line_of(r.out, name), "[alike")) << r.out;
  }
}

TEST(SettingsCli, MalformedValueIsAnErrorNamingIt) {
  const Outcome bad = run_tpf({"settings"}, {"TPF_CPUS=two"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(contains(bad.err, "TPF_CPUS='two'")) << bad.err;
  const Outcome connect = run_tpf({"settings"}, {"TPF_NET_CONNECT=some"});
  EXPECT_EQ(connect.exit_code, 1);
  EXPECT_TRUE(contains(connect.err, "TPF_NET_CONNECT='some': expected first or all"))
      << connect.err;
  const Outcome extra = run_tpf({"settings", "--verbose"});
  EXPECT_EQ(extra.exit_code, 2);
  EXPECT_TRUE(contains(extra.err, "--verbose")) << extra.err;
}

}  // namespace
}  // namespace tpf::testing
