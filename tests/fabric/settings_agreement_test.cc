// Shared settings (comm/settings_agreement.h): the settings from which every rank makes the same
// choices on its own are compared while a communicator is created, the network's across every
// rank and shared memory's inside each host, so ranks told different things fail at once, all
// alike, naming the setting, each value and its ranks. Across hosts: tests/fabric/
// across_hosts_test.cc (AcrossHostsSettings).
#include "comm/settings_agreement.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "comm/settings.h"
#include "support/expect_error.h"
#include "support/expect_tpf_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "transport/shm_segment.h"

namespace tpf::detail {
namespace {

std::string line_with(const char* algo, const char* gbps) {
  return encode_shared_settings({{"TPF_ALLREDUCE_ALGO", algo, SharedAmong::host},
                                 {"TPF_NET_GBPS", gbps, SharedAmong::communicator}});
}

// The message of the mismatch check_shared_settings throws, or "" where it throws none.
std::string mismatch_of(const std::vector<std::string>& lines, const topo::HostMap& hosts) {
  try {
    check_shared_settings(lines, hosts, "communicator 'c'");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::mismatch) << e.what();
    return e.what();
  }
  return "";
}

TEST(SharedSettings, ListEveryValueTheChoicesDependOnWithItsScope) {
  const CommSettings settings = resolve_comm_settings();
  const std::vector<SharedSetting> shared = shared_settings(settings);
  auto scope_of = [&](const std::string& name) {
    for (const SharedSetting& s : shared)
      if (s.name == name) return s.among == SharedAmong::host ? "host" : "communicator";
    return "absent";
  };
  for (const char* name : {"TPF_NET_ALGO", "TPF_NET_CONNECT", "TPF_NET_CALL_US", "TPF_NET_STEP_US",
                           "TPF_NET_MESSAGE_US", "TPF_NET_GBPS", "TPF_NET_REDUCE_GBPS"}) {
    EXPECT_STREQ(scope_of(name), "communicator") << name;
  }
  for (const char* name : {"TPF_ALLREDUCE_ALGO", "TPF_EAGER_MAX_BYTES", "TPF_SHM_STEP_US",
                           "TPF_SHM_EXCESS_STEP_US", "TPF_SHM_COPY_GBPS", "TPF_SHM_REDUCE_GBPS"}) {
    EXPECT_STREQ(scope_of(name), "host") << name;
  }
  // Deadlines and the protocol may differ: neither changes which messages a collective sends.
  EXPECT_STREQ(scope_of("TPF_TIMEOUT"), "absent");
  EXPECT_STREQ(scope_of("TPF_NET_PROTOCOL"), "absent");
}

TEST(SharedSettings, AgreeingRanksPass) {
  const topo::HostMap hosts({"a", "a", "b", "b"});
  const std::string same = line_with("automatic", "12.5");
  EXPECT_EQ(mismatch_of({same, same, same, same}, hosts), "");
}

TEST(SharedSettings, ANetworkSettingMustBeAlikeOnEveryRank) {
  const topo::HostMap hosts({"a", "a", "b", "b"});
  const std::string slow = line_with("automatic", "0.0625");
  const std::string fast = line_with("automatic", "12.5");
  EXPECT_EQ(mismatch_of({fast, slow, fast, fast}, hosts),
            "communicator 'c': its ranks differ on TPF_NET_GBPS ('12.5' on ranks 0, 2, 3; "
            "'0.0625' on rank 1): every rank makes the same choices from it on its own (network "
            "algorithms, segment sizes), so set it alike on every rank");
  // Between hosts too, each host agreeing inside.
  EXPECT_NE(mismatch_of({slow, slow, fast, fast}, hosts)
                .find("'0.0625' on ranks 0, 1; '12.5' on "
                      "ranks 2, 3"),
            std::string::npos);
}

TEST(SharedSettings, ASharedMemorySettingMustBeAlikeInsideAHostOnly) {
  const topo::HostMap hosts({"a", "b", "a", "b"});
  const std::string one = line_with("one_shot", "12.5");
  const std::string two = line_with("two_shot", "12.5");
  EXPECT_EQ(mismatch_of({one, two, one, two}, hosts), "");  // each host alike inside
  EXPECT_EQ(mismatch_of({one, two, one, one}, hosts),
            "communicator 'c': the ranks on host 'b' differ on TPF_ALLREDUCE_ALGO ('two_shot' on "
            "rank 1; 'one_shot' on rank 3): a host's ranks make the same choices from it on their "
            "own (shared-memory algorithms), so set it alike on every rank of a host");
}

// A rank of another tpfabric that lacks a setting, and values with the line's separators, are
// compared as text, never misread.
TEST(SharedSettings, MissingSettingsAndOddValuesAreCompared) {
  const topo::HostMap hosts({"a", "a"});
  const std::string full = line_with("automatic", "12.5");
  const std::string older =
      encode_shared_settings({{"TPF_NET_GBPS", "12.5", SharedAmong::communicator}});
  EXPECT_NE(mismatch_of({full, older}, hosts)
                .find("differ on TPF_ALLREDUCE_ALGO ('automatic' on rank 0; (none) on rank 1)"),
            std::string::npos);
  const std::string odd = line_with("a;c:TPF_NET_GBPS=1", "12.5");
  EXPECT_EQ(odd.find('\t'), std::string::npos);
  EXPECT_NE(mismatch_of({full, odd}, hosts).find("'a?c:TPF_NET_GBPS?1' on rank 1"),
            std::string::npos);
  EXPECT_EQ(mismatch_of({odd, odd}, hosts), "");
}

// On one host: ranks told different shared-memory settings would pick different algorithms for
// one collective; they all fail while creating the communicator instead, and leave nothing in
// /dev/shm (it is checked before anything is mapped).
TEST(SharedSettings, RanksOfOneHostToldDifferentThingsFailWhileCreating) {
  testing::RunOptions options;
  options.job_name = "settings-agreement-" + std::to_string(::getpid());
  options.comm_options.timeout = std::chrono::milliseconds(30000);
  auto outcomes = testing::run_ranks_raw(
      3,
      [](const testing::RankContext& ctx) {
        if (ctx.rank == 2) ::setenv("TPF_EAGER_MAX_BYTES", "0", 1);
        const Error e = testing::expect_error("different settings on one host", [&] {
          Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret, ctx.comm_options);
        });
        TPF_CHILD_CHECK(e.code() == ErrorCode::mismatch, e.what());
        const std::string what = e.what();
        TPF_CHILD_CHECK(what.find("differ on TPF_EAGER_MAX_BYTES") != std::string::npos &&
                            what.find("on ranks 0, 1") != std::string::npos &&
                            what.find("'0 B' on rank 2") != std::string::npos,
                        what);
      },
      options);
  testing::expect_all_ok(outcomes);
  EXPECT_EQ(testing::list_dev_shm(transport::shm_job_prefix(options.job_name).substr(1)),
            std::vector<std::string>{});
}

}  // namespace
}  // namespace tpf::detail
