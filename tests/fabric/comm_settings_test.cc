// Settings (comm/settings.h): every value says where it came from, malformed values are errors
// naming the variable, each communicator reads them anew, and the catalog names every TPF_*
// variable the sources read. Settings that size the fabric are checked before anything is
// allocated: values that would wrap the segment's size arithmetic are errors, not crashes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "base/env_config.h"
#include "comm/settings.h"
#include "support/scoped_env.h"
#include "topo/network_devices.h"
#include "topo/rail_devices.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf {
namespace {

using testing::ScopedEnv;

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

// The report of `name`; a missing one fails the test (and reads as empty).
const detail::SettingReport& reported(const detail::CommSettings& s, const std::string& name) {
  if (const detail::SettingReport* r = s.reported(name)) return *r;
  ADD_FAILURE() << name << " is not in the settings report";
  static const detail::SettingReport none;
  return none;
}

TEST(CommSettings, EveryValueSaysWhereItCameFrom) {
  {
    const detail::CommSettings s = detail::resolve_comm_settings();
    EXPECT_EQ(s.timeout, std::chrono::seconds(300));
    EXPECT_EQ(reported(s, "TPF_TIMEOUT").source, "default");
    EXPECT_EQ(reported(s, "TPF_ALLREDUCE_ALGO").value, "automatic");
    EXPECT_EQ(s.net_protocol, transport::NetProtocol::automatic);
    EXPECT_EQ(reported(s, "TPF_NET_PROTOCOL").value, "auto");
    EXPECT_EQ(s.net_notice_wait, std::chrono::milliseconds(500));
  }
  ScopedEnv timeout("TPF_TIMEOUT", "7");
  ScopedEnv protocol("TPF_NET_PROTOCOL", "put");
  ScopedEnv algorithm("TPF_ALLREDUCE_ALGO", "two_shot");
  ScopedEnv cpus("TPF_CPUS", "3");
  ScopedEnv notice_wait("TPF_NET_NOTICE_WAIT_S", "2.5");
  {
    const detail::CommSettings s = detail::resolve_comm_settings();
    EXPECT_EQ(s.timeout, std::chrono::seconds(7));
    EXPECT_EQ(s.setup_timeout, std::chrono::seconds(7));
    EXPECT_EQ(reported(s, "TPF_TIMEOUT").source, "TPF_TIMEOUT");
    EXPECT_EQ(s.tuning.forced_all_reduce, coll::AllReduceAlgorithm::two_shot);
    EXPECT_EQ(s.job_cpus, 3);
    EXPECT_EQ(s.excess_ranks(5), 2);  // no launcher: the communicator's ranks are the machine's
    EXPECT_EQ(s.excess_ranks(2), 0);
    EXPECT_EQ(reported(s, "TPF_CPUS").value, "3");
    EXPECT_EQ(s.net_protocol, transport::NetProtocol::put);
    EXPECT_EQ(reported(s, "TPF_NET_PROTOCOL").source, "TPF_NET_PROTOCOL");
    EXPECT_EQ(s.net_notice_wait, std::chrono::milliseconds(2500));
    EXPECT_EQ(reported(s, "TPF_NET_NOTICE_WAIT_S").source, "TPF_NET_NOTICE_WAIT_S");
  }
  CommOptions options;  // what the program says wins over the environment
  options.timeout = std::chrono::milliseconds(2500);
  options.buffer_bytes = 8192;
  const detail::CommSettings s = detail::resolve_comm_settings(options);
  EXPECT_EQ(s.timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(reported(s, "TPF_TIMEOUT").source, "CommOptions::timeout");
  EXPECT_EQ(s.slot_bytes, 8192u);
  EXPECT_EQ(reported(s, "TPF_SHM_BUFFER_BYTES").source, "CommOptions::buffer_bytes");
}

TEST(CommSettings, TheLaunchersRanksOnThisMachineComeFromItsEnvironment) {
  ScopedEnv rank("TPF_RANK", "1");
  ScopedEnv world("TPF_WORLD_SIZE", "6");
  ScopedEnv local("TPF_LOCAL_WORLD_SIZE", "3");
  ScopedEnv store("TPF_STORE_ADDR", "127.0.0.1:1");
  const detail::CommSettings s = detail::resolve_comm_settings();
  EXPECT_EQ(s.local_world_size, 3);
  EXPECT_EQ(reported(s, "local world size").source, "launcher (tpf)");
}

// TPF_RAIL_DEVICES gives local rank l (its launcher's: torchrun's LOCAL_RANK here) device l mod
// the count, in place of UCX_NET_DEVICES, which is what the network and the hosts' map then use.
// A rank of a torchrun job of `world` ranks, `local_world` a host (LOCAL_RANK is the test's).
struct TorchrunRank {
  TorchrunRank(const char* rank, const char* world, const char* local_world)
      : rank_("RANK", rank),
        world_("WORLD_SIZE", world),
        local_world_("LOCAL_WORLD_SIZE", local_world) {}
  ScopedEnv rank_, world_, local_world_;
  ScopedEnv addr_{"MASTER_ADDR", "127.0.0.1"}, port_{"MASTER_PORT", "29500"};
};

TEST(CommSettings, RailDevicesGiveEachLocalRankTheDeviceOfItsRail) {
  const TorchrunRank torchrun("5", "8", "4");
  ScopedEnv launcher_devices("UCX_NET_DEVICES", "eth0");
  ScopedEnv rails("TPF_RAIL_DEVICES", "mlx5_0:1,mlx5_1:1,mlx5_2:1");
  for (const auto& [local_rank, device] :
       {std::pair{"0", "mlx5_0:1"}, {"1", "mlx5_1:1"}, {"2", "mlx5_2:1"}, {"3", "mlx5_0:1"}}) {
    ScopedEnv local("LOCAL_RANK", local_rank);
    const detail::CommSettings s = detail::resolve_comm_settings();
    EXPECT_EQ(s.net_devices, device) << "local rank " << local_rank;
    EXPECT_EQ(reported(s, "UCX_NET_DEVICES").value, device);
    EXPECT_EQ(reported(s, "UCX_NET_DEVICES").source,
              "TPF_RAIL_DEVICES (by the launcher's local rank)");
  }
}

// TPF_RAIL_DEVICES=auto needs no launcher: the rank publishes the devices next to its cores as
// read on this machine (topo::nearest_devices; which ones depends on the machine), and the
// communicator resolves them among its host's ranks (tests/fabric/network_devices_test.cc).
TEST(CommSettings, AutoRailDevicesAskForTheNearestDevicesWithoutALauncher) {
  ScopedEnv launcher_devices("UCX_NET_DEVICES", "eth0");
  ScopedEnv rails("TPF_RAIL_DEVICES", "auto");
  const detail::CommSettings s = detail::resolve_comm_settings();
  EXPECT_TRUE(topo::is_auto_rail_request(s.net_devices)) << s.net_devices;
  const std::vector<std::string> nearest =
      topo::nearest_devices(topo::discover_network_devices(), topo::process_binding());
  EXPECT_EQ(s.net_devices, topo::auto_rail_request(nearest));
  EXPECT_EQ(reported(s, "UCX_NET_DEVICES").source.rfind("TPF_RAIL_DEVICES=auto", 0), 0u)
      << reported(s, "UCX_NET_DEVICES").source;
}

// With a GPU (the machine an hwloc XML export describes, through hwloc's HWLOC_XMLFILE), auto
// asks for the HCA on the GPU's PCIe switch: torchrun's local rank 1 drives GPU 1, whose switch
// holds mlx5_1 (tests/fabric/gpus_test.cc has the server); TPF_GPU names another outright.
TEST(CommSettings, AutoRailDevicesAskForTheDeviceOnTheRanksGpuPath) {
  ScopedEnv machine("HWLOC_XMLFILE", TPF_SOURCE_DIR "/tests/fabric/data/two-sockets-four-gpus.xml");
  const TorchrunRank torchrun("1", "4", "4");
  ScopedEnv local("LOCAL_RANK", "1");
  ScopedEnv rails("TPF_RAIL_DEVICES", "auto");
  detail::CommSettings s = detail::resolve_comm_settings();
  EXPECT_EQ(s.net_devices, "auto:mlx5_1:1");
  EXPECT_NE(reported(s, "UCX_NET_DEVICES")
                .source.find("nearest GPU 0000:12:00.0 (CUDA device 1 of local rank 1"),
            std::string::npos)
      << reported(s, "UCX_NET_DEVICES").source;
  {
    ScopedEnv gpu("TPF_GPU", "0000:92:00.0");  // its switch has no HCA: its host bridge's two
    EXPECT_EQ(detail::resolve_comm_settings().net_devices, "auto:mlx5_2:1|mlx5_3:1");
  }
  {
    ScopedEnv gpu("TPF_GPU", "none");  // the cores' HCAs: unbound (an export), all four
    s = detail::resolve_comm_settings();
    EXPECT_EQ(s.net_devices, "auto:mlx5_0:1|mlx5_1:1|mlx5_2:1|mlx5_3:1");
    EXPECT_NE(
        reported(s, "UCX_NET_DEVICES").source.find("this rank's cores (no GPU: TPF_GPU=none)"),
        std::string::npos)
        << reported(s, "UCX_NET_DEVICES").source;
  }
  ScopedEnv gpu("TPF_GPU", "9");
  try {
    detail::resolve_comm_settings();
    ADD_FAILURE() << "TPF_GPU=9 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("TPF_GPU='9' names no GPU of this machine", 0), 0u)
        << e.what();
  }
}

// A list with an empty item, or one without a launcher to say the local rank, is an error naming
// the setting and what is wrong.
TEST(CommSettings, RailDevicesWithoutALocalRankOrWithAnEmptyItemAreErrors) {
  auto expect_invalid = [](const std::string& words) {
    try {
      detail::resolve_comm_settings();
      ADD_FAILURE() << "accepted; expected an error with: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  {
    ScopedEnv rails("TPF_RAIL_DEVICES", "eth0,eth1");
    expect_invalid(
        "TPF_RAIL_DEVICES='eth0,eth1' gives local rank l the device of rail l, but no "
        "launcher says this rank's local rank");
  }
  ScopedEnv rank("TPF_RANK", "1");
  ScopedEnv world("TPF_WORLD_SIZE", "2");
  ScopedEnv store("TPF_STORE_ADDR", "127.0.0.1:1");
  ScopedEnv rails("TPF_RAIL_DEVICES", "eth0,,eth1");
  expect_invalid("TPF_RAIL_DEVICES: '' in 'eth0,,eth1' is not a device name");
}

TEST(CommSettings, MalformedValuesAreErrorsNamingTheVariable) {
  const std::pair<const char*, const char*> cases[] = {
      {"TPF_CPUS", "two"},
      {"TPF_CPUS", "0"},
      {"TPF_ASYMMETRIC_FENCES", "yes"},
      {"TPF_ALLREDUCE_ALGO", "ring"},
      {"TPF_SHM_STEP_US", "-1"},
      {"TPF_SHM_COPY_GBPS", "fast"},
      {"TPF_EAGER_MAX_BYTES", "12Q"},
      {"TPF_TIMEOUT", "never"},
      {"TPF_FLIGHT_RECORDER_SIZE", "-3"},
      {"TPF_SHM_BUFFER_BYTES", "2T"},
      {"TPF_NET_PROTOCOL", "rdma"},
      {"TPF_NET_ALGO", "ring"},
      {"TPF_NET_GBPS", "fast"},
      {"TPF_NET_STEP_US", "0"},
      {"TPF_NET_MESSAGE_US", "-1"},
      {"TPF_NET_NOTICE_WAIT_S", "soon"},
  };
  for (const auto& [name, value] : cases) {
    ScopedEnv env(name, value);
    try {
      detail::resolve_comm_settings();
      ADD_FAILURE() << name << "='" << value << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string(name) + "='" + value + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

// A value that is refused is quoted in the error, but a long one is cut and control characters
// are escaped: a TPF_NODE_ID of 5,000 characters was printed whole.
TEST(CommSettings, ALongOrUnprintableValueIsQuotedShortInTheError) {
  const std::pair<std::string, std::string> cases[] = {
      {std::string(5000, 'h'), "TPF_NODE_ID='" + std::string(80, 'h') + "...' (5000 characters)"},
      {"a\tb", "TPF_NODE_ID='a\\x09b'"},
  };
  for (const auto& [value, shown] : cases) {
    ScopedEnv env("TPF_NODE_ID", value.c_str());
    try {
      detail::resolve_comm_settings();
      ADD_FAILURE() << "TPF_NODE_ID of " << value.size() << " characters was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(shown + " is not a host name", 0), 0u) << what;
      EXPECT_LT(what.size(), 300u) << what;
    }
  }
}

TEST(CommSettings, EachCommunicatorReadsThemAnew) {
  // The all-reduce choice used to be read once per process: a bad value set after the first
  // communicator went unnoticed, and a test could not change it for the next communicator.
  TcpStoreServer server("127.0.0.1", 0, "s3cret");
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  Communicator first = Communicator::create(0, 1, address, "s3cret");
  float x = 1;
  first.all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum);
  ScopedEnv env("TPF_ALLREDUCE_ALGO", "three_shot");
  try {
    Communicator::create(0, 1, address, "s3cret");
    ADD_FAILURE() << "TPF_ALLREDUCE_ALGO=three_shot was accepted by a later communicator";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("TPF_ALLREDUCE_ALGO"), std::string::npos) << e.what();
  }
  first.all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum);  // the first keeps what it read
  EXPECT_EQ(x, 1.0f);
}

TEST(SettingCatalog, NamesEveryTpfVariableTheSourcesReadOnce) {
  std::set<std::string> catalog;
  for (const detail::SettingInfo& info : detail::setting_catalog()) {
    EXPECT_TRUE(catalog.insert(info.name).second) << info.name << " is listed twice";
    EXPECT_GT(std::string(info.meaning).size(), 10u) << info.name;
  }
  // A variable is read through a string literal that starts with its name.
  const std::regex literal("\"(TPF_[A-Z0-9_]+)");
  size_t files = 0;
  for (const char* dir : {"src", "apps", "include"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::string(TPF_SOURCE_DIR) + "/" + dir)) {
      const std::string ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      ++files;
      std::ifstream in(entry.path());
      const std::string text{std::istreambuf_iterator<char>(in), {}};
      for (std::sregex_iterator m(text.begin(), text.end(), literal), end; m != end; ++m) {
        EXPECT_TRUE(catalog.count((*m)[1].str()))
            << (*m)[1].str() << " (read in " << entry.path().string()
            << ") is missing from setting_catalog() in src/comm/settings.cc";
      }
    }
  }
  EXPECT_GT(files, 100u);
}

}  // namespace
}  // namespace tpf
