// Hosts emulated as network namespaces joined by a bridge (scripts/emulated-hosts.sh; CI runs as
// root with iproute2): ranks tell the hosts apart by themselves (no TPF_NODE_ID), share memory
// inside a namespace and cross the veth links over UCX between them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/expect_error.h"
#include "support/multiproc.h"
#include "tpf/comm.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf::testing {
namespace {

// Creates the namespaces for one test and always removes them.
class EmulatedCluster {
 public:
  // `nics` links per host (rails), uncapped.
  explicit EmulatedCluster(int hosts, int nics = 1) : name_("tpfe" + std::to_string(::getpid())) {
    script_ = std::string(TPF_SOURCE_DIR) + "/scripts/emulated-hosts.sh";
    const std::string up = script_ + " up " + name_ + " " + std::to_string(hosts) +
                           (nics > 1 ? " '' " + std::to_string(nics) : "");
    ok_ = std::system(up.c_str()) == 0;
  }
  ~EmulatedCluster() { std::system((script_ + " down " + name_).c_str()); }
  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }
  // Cuts host h off the bridge: its link (NIC 0) goes down at the switch.
  bool cut(int host) const {
    const std::string port = "p" + std::to_string(host) + "-0";
    return std::system(("ip -n " + name_ + "-sw link set " + port + " down").c_str()) == 0;
  }
  // Host `on` keeps host `host`'s link address for good (a permanent neighbour entry), so that once
  // `host` is cut off what `on` sends it vanishes, as a dead host's traffic does behind a router,
  // instead of failing in seconds when address resolution gives up.
  bool pin_address(int on, int host) const {
    const std::string in_host = "ip -n " + name_ + "-h" + std::to_string(host);
    const std::string mac = "$(" + in_host +
                            " -o link show eth0 | awk '{for (i = 1; i < NF; i++) if ($i == "
                            "\"link/ether\") print $(i + 1)}')";
    const std::string address = "127.100.0." + std::to_string(host + 1);
    return std::system(("ip -n " + name_ + "-h" + std::to_string(on) + " neigh replace " + address +
                        " dev eth0 nud permanent lladdr " + mac)
                           .c_str()) == 0;
  }
  std::string netns(int host) const { return "/run/netns/" + name_ + "-h" + std::to_string(host); }

 private:
  std::string name_, script_;
  bool ok_ = false;
};

// The rank's store connection is made first, in the machine's namespace (where the harness
// serves the store); then the rank moves to its host, where it uses link `device`. Like `ip netns
// exec`, it mounts a sysfs of the host's namespace on /sys in a mount namespace of its own: UCX
// finds its devices in /sys/class/net, which otherwise lists the machine's (its eth0, no eth1).
std::shared_ptr<Store> connect_then_enter(const RankContext& ctx, const std::string& netns,
                                          const std::string& device = "eth0") {
  auto store = connect_to_store(ctx, ctx.rank);
  const int fd = ::open(netns.c_str(), O_RDONLY | O_CLOEXEC);
  TPF_CHILD_CHECK(fd >= 0, "open " + netns + ": " + std::strerror(errno));
  TPF_CHILD_CHECK(::setns(fd, CLONE_NEWNET) == 0, std::string("setns: ") + std::strerror(errno));
  ::close(fd);
  auto sys_call = [](bool ok, const char* what) {
    TPF_CHILD_CHECK(ok, std::string(what) + ": " + std::strerror(errno));
  };
  sys_call(::unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS)");
  sys_call(::mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0, "mount / rslave");
  sys_call(::umount2("/sys", MNT_DETACH) == 0, "umount /sys");
  sys_call(::mount("sysfs", "/sys", "sysfs", 0, nullptr) == 0, "mount sysfs");
  ::setenv("UCX_NET_DEVICES", device.c_str(), 1);  // a link, not the namespace's loopback
  return store;
}

// Bytes sent through `device` in this process's network namespace (/proc/self/net/dev follows
// the namespace; /sys/class/net shows the one sysfs was mounted in). -1 if it is not there.
long long tx_bytes(const std::string& device) {
  FILE* dev = std::fopen("/proc/self/net/dev", "r");
  if (dev == nullptr) return -1;
  char line[512];
  long long bytes = -1;
  while (std::fgets(line, sizeof line, dev) != nullptr) {
    char name[64];
    long long fields[9];
    if (std::sscanf(line, " %63[^:]: %lld %lld %lld %lld %lld %lld %lld %lld %lld", name,
                    &fields[0], &fields[1], &fields[2], &fields[3], &fields[4], &fields[5],
                    &fields[6], &fields[7], &fields[8]) == 10 &&
        device == name) {
      bytes = fields[8];  // receive: 8 fields; then transmit bytes
    }
  }
  std::fclose(dev);
  return bytes;
}

TEST(EmulatedHosts, TwoNamespacesOfTwoRanksRunCollectivesOverTheirLink) {
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(30000);
  auto outcomes = run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        auto store = connect_then_enter(ctx, cluster.netns(ctx.rank / 2));
        Communicator comm =
            Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        const size_t count = (size_t{4} << 20) / sizeof(float) + 5;
        std::vector<float> in(count), out(count);
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 1000) * (ctx.rank + 1));
        comm.all_reduce(in.data(), out.data(), count, DType::f32, ReduceOp::sum);
        for (size_t i = 0; i < count; i += 997) {
          TPF_CHILD_CHECK(out[i] == static_cast<float>((i % 1000) * 10),
                          "element " + std::to_string(i));
        }
        std::vector<int32_t> ranks(4, -1);
        const int32_t me = ctx.rank;
        comm.all_gather(&me, ranks.data(), 1, DType::i32);
        TPF_CHILD_CHECK(ranks == (std::vector<int32_t>{0, 1, 2, 3}), "all_gather");
        comm.barrier();
      },
      options);
  expect_all_ok(outcomes);
}

// Two hosts of two ranks with a link per rail (rank l of each host on link eth<l>, so each rank
// has a device of its own): per rail, the default there, each rank sends its share of all_reduce,
// reduce, all_gather, reduce_scatter, broadcast, gather, scatter and all_to_all through its own
// link; the leaders' forms (TPF_NET_ALGO=pipelined) send all of it through the leaders' link and
// nothing through the second. Counted with the links' byte counters, results checked. Per rank per
// rail: all_reduce of 4 MiB, 2 MiB (2 (H-1) / H of its half); reduces of 4 MiB to each host's
// leader, 2 MiB (below); all_gather and reduce_scatter of 1 MiB blocks, its 1 MiB block;
// broadcasts of 4 MiB from each host's leader, its 2 MiB half once; gather to rank 0 and scatter
// from it of 1 MiB blocks, its 1 MiB block (below); all_to_all of 1 MiB blocks, the two blocks
// its host's ranks send to its rail's rank on the other host. The same per rail with the hosts'
// ranks interleaved (host 0 holds ranks 0 and 2, host 1 ranks 1 and 3: each host's blocks of a
// buffer lie apart, as under a cyclic placement).
TEST(EmulatedHosts, PerRailCollectivesUseEveryRailsLink) {
  EmulatedCluster cluster(2, /*nics=*/2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  struct Case {
    const char* algorithm;  // TPF_NET_ALGO; "": the default
    bool interleaved;
  };
  for (const auto [algorithm, interleaved] :
       {Case{"", false}, Case{"pipelined", false}, Case{"", true}}) {
    SCOPED_TRACE(std::string("TPF_NET_ALGO='") + algorithm + "'" +
                 (interleaved ? ", hosts interleaved" : ""));
    // Rank r's host and local rank; the second host's leader.
    auto host_of = [&](int r) { return interleaved ? r % 2 : r / 2; };
    auto local_of = [&](int r) { return interleaved ? r / 2 : r % 2; };
    const int second_leader = interleaved ? 1 : 2;
    RunOptions options;
    options.comm_options.timeout = std::chrono::milliseconds(30000);
    auto outcomes = run_ranks_raw(
        4,
        [&](const RankContext& ctx) {
          const std::string device = "eth" + std::to_string(local_of(ctx.rank));
          auto store = connect_then_enter(ctx, cluster.netns(host_of(ctx.rank)), device);
          if (*algorithm != '\0') ::setenv("TPF_NET_ALGO", algorithm, 1);
          Communicator comm =
              Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
          // What one collective sent through this rank's link: counted after a barrier, by which
          // every byte has arrived and so has left the link (a completed send may still sit in
          // its socket's buffer). `share`: one rail's bytes per rank.
          auto expect_rail_traffic = [&](const char* what, long long share,
                                         const std::function<void()>& collective) {
            const long long before = tx_bytes(device);
            TPF_CHILD_CHECK(before >= 0, "no " + device + " in /proc/self/net/dev");
            collective();
            comm.barrier();
            const long long sent = tx_bytes(device) - before;
            const long long least = share * 9 / 10;  // framing aside, the share itself
            const std::string said =
                std::string(what) + ": " + device + " sent " + std::to_string(sent) + " bytes";
            if (*algorithm == '\0') {  // per rail
              TPF_CHILD_CHECK(sent >= least, said);
            } else if (local_of(ctx.rank) == 1) {  // the second rail: not a leader
              TPF_CHILD_CHECK(sent < least / 8, said);
            } else {
              TPF_CHILD_CHECK(sent >= 2 * least, said);
            }
          };
          const size_t count = (size_t{4} << 20) / sizeof(float) + 3;
          std::vector<float> in(count), out(count);
          for (size_t i = 0; i < count; ++i)
            in[i] = static_cast<float>((i % 1000) * (ctx.rank + 1));
          expect_rail_traffic("all_reduce", 2LL << 20, [&] {
            comm.all_reduce(in.data(), out.data(), count, DType::f32, ReduceOp::sum);
          });
          for (size_t i = 0; i < count; i += 997) {
            TPF_CHILD_CHECK(out[i] == static_cast<float>((i % 1000) * 10),
                            "all_reduce element " + std::to_string(i));
          }
          TPF_CHILD_CHECK(out[count - 1] == static_cast<float>(((count - 1) % 1000) * 10),
                          "the last element (the tail of the last rail)");
          // reduce to each host's leader: on two hosts the root's host combines all of each
          // rail's part, so the other host sends its partial of it (2 MiB a rail) and the root's
          // host nothing.
          std::vector<float> to_first(count), to_second(count);
          expect_rail_traffic("reduce", 2LL << 20, [&] {
            comm.reduce(in.data(), to_first.data(), count, DType::f32, ReduceOp::sum, 0);
            comm.reduce(in.data(), to_second.data(), count, DType::f32, ReduceOp::sum,
                        second_leader);
          });
          const bool leads = local_of(ctx.rank) == 0;
          for (size_t i = 0; leads && i < count; i += 997) {
            const std::vector<float>& got = ctx.rank == 0 ? to_first : to_second;
            TPF_CHILD_CHECK(got[i] == static_cast<float>((i % 1000) * 10),
                            "reduce element " + std::to_string(i));
          }
          if (leads) {
            const std::vector<float>& got = ctx.rank == 0 ? to_first : to_second;
            TPF_CHILD_CHECK(got[count - 1] == static_cast<float>(((count - 1) % 1000) * 10),
                            "reduce's last element (the tail of the last rail)");
          }
          const size_t block = (size_t{1} << 20) / sizeof(float);
          expect_rail_traffic("all_gather", 1LL << 20,
                              [&] { comm.all_gather(in.data(), out.data(), block, DType::f32); });
          for (size_t i = 0; i < 4 * block; i += 997) {
            const size_t r = i / block, at = i % block;
            TPF_CHILD_CHECK(out[i] == static_cast<float>((at % 1000) * (r + 1)),
                            "all_gather element " + std::to_string(i));
          }
          expect_rail_traffic("reduce_scatter", 1LL << 20, [&] {
            comm.reduce_scatter(in.data(), out.data(), block, DType::f32, ReduceOp::sum);
          });
          for (size_t i = 0; i < block; i += 997) {
            const size_t at = ctx.rank * block + i;
            TPF_CHILD_CHECK(out[i] == static_cast<float>((at % 1000) * 10),
                            "reduce_scatter element " + std::to_string(i));
          }
          // broadcast from each host's leader: each host sends the buffer once, per rail a half
          // through each of its links, else all of it through the leader's.
          std::vector<float> first(count), second(count);
          expect_rail_traffic("broadcast", 2LL << 20, [&] {
            comm.broadcast(in.data(), first.data(), count, DType::f32, 0);
            comm.broadcast(in.data(), second.data(), count, DType::f32, second_leader);
          });
          for (size_t i = 0; i < count; i += 997) {
            TPF_CHILD_CHECK(first[i] == static_cast<float>(i % 1000) &&
                                second[i] == static_cast<float>((i % 1000) * (second_leader + 1)),
                            "broadcast element " + std::to_string(i));
          }
          TPF_CHILD_CHECK(
              second[count - 1] == static_cast<float>(((count - 1) % 1000) * (second_leader + 1)),
              "broadcast's last element (the tail of the last rail)");
          // gather to rank 0 and scatter from it: per rail, host b's ranks send their 1 MiB
          // blocks to the root's host and host a's ranks host b's blocks, 1 MiB a rail.
          std::vector<float> gathered(4 * block);
          expect_rail_traffic("gather and scatter", 1LL << 20, [&] {
            comm.gather(in.data(), gathered.data(), block, DType::f32, 0);
            comm.scatter(in.data(), out.data(), block, DType::f32, 0);
          });
          for (size_t i = 0; ctx.rank == 0 && i < 4 * block; i += 997) {
            const size_t r = i / block, at = i % block;
            TPF_CHILD_CHECK(gathered[i] == static_cast<float>((at % 1000) * (r + 1)),
                            "gather element " + std::to_string(i));
          }
          for (size_t i = 0; i < block; i += 997) {
            const size_t at = ctx.rank * block + i;
            TPF_CHILD_CHECK(out[i] == static_cast<float>(at % 1000),
                            "scatter element " + std::to_string(i));
          }
          expect_rail_traffic("all_to_all", 2LL << 20,
                              [&] { comm.all_to_all(in.data(), out.data(), block, DType::f32); });
          for (size_t i = 0; i < 4 * block; i += 997) {  // block r: rank r's block for this rank
            const size_t r = i / block, at = ctx.rank * block + i % block;
            TPF_CHILD_CHECK(out[i] == static_cast<float>((at % 1000) * (r + 1)),
                            "all_to_all element " + std::to_string(i));
          }
        },
        options);
    expect_all_ok(outcomes);
  }
}

// The TPF_NODE_ID lines `tpf settings` prints for `command`.
std::vector<std::string> host_keys_printed_by(const std::string& command) {
  std::vector<std::string> keys;
  FILE* out = ::popen(command.c_str(), "r");
  if (out == nullptr) return keys;
  char line[4096];
  while (std::fgets(line, sizeof line, out) != nullptr) {
    if (std::strncmp(line, "TPF_NODE_ID", 11) == 0) keys.emplace_back(line);
  }
  ::pclose(out);
  return keys;
}

// `ip netns exec` starts every command in a mount namespace of its own (over the same /dev/shm):
// two ranks started that way in one namespace are one host, two namespaces are two. The second
// command starts while the first is alive, so their mount namespaces are distinct (a namespace's
// id can be reused once it is gone).
TEST(EmulatedHosts, CommandsStartedInOneNamespaceAreOneHost) {
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  const std::string tpf = TPF_BINARY;
  auto in = [&](int host) {
    return "ip netns exec " + cluster.name() + "-h" + std::to_string(host);
  };
  const auto same = host_keys_printed_by(in(0) + " sh -c '" + tpf + " settings; " + in(0) + " " +
                                         tpf + " settings'");
  ASSERT_EQ(same.size(), 2u);
  EXPECT_EQ(same[0], same[1]);
  const auto other = host_keys_printed_by(in(1) + " " + tpf + " settings");
  ASSERT_EQ(other.size(), 1u);
  EXPECT_NE(same[0], other[0]);
}

TEST(EmulatedHosts, ARankKilledOnTheOtherHostIsNamed) {
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(600000);  // only the death can end it
  auto outcomes = run_ranks_raw(
      2,
      [&](const RankContext& ctx) {
        auto store = connect_then_enter(ctx, cluster.netns(ctx.rank));
        Communicator comm =
            Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        if (ctx.rank == 1) ::raise(SIGKILL);
        int64_t value = 1, out = 0;
        const Error e = expect_error("all_reduce with a dead rank", [&] {
          comm.all_reduce(&value, &out, 1, DType::i64, ReduceOp::sum);
        });
        TPF_CHILD_CHECK(e.code() == ErrorCode::peer_died, e.what());
        TPF_CHILD_CHECK(std::string(e.what()).find("rank 1") != std::string::npos, e.what());
      },
      options);
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].describe();
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
}

// The output and exit status of a shell command.
std::pair<std::string, int> shell(const std::string& command) {
  std::string text;
  FILE* out = ::popen((command + " 2>&1").c_str(), "r");
  if (out == nullptr) return {"popen failed", -1};
  char chunk[4096];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, out)) > 0) text.append(chunk, n);
  return {text, ::pclose(out)};
}

// Bytes host `host`'s second link (eth1) has sent, read from outside its namespace; -1 if it has
// none.
long long second_link_sent(const EmulatedCluster& cluster, int host) {
  const auto [text, status] =
      shell("ip netns exec " + cluster.name() + "-h" + std::to_string(host) +
            " cat /sys/class/net/eth1/statistics/tx_bytes");
  return status == 0 ? std::atoll(text.c_str()) : -1LL;
}

// `tpf run --hosts` with `ip netns exec` as the remote shell: the launcher on host 0 serves the
// store on host 0's address, two ranks start on each emulated host, they are two hosts, and
// the launcher sweeps both hosts' /dev/shm afterwards.
TEST(EmulatedHosts, TpfRunStartsRanksOnEveryHostThroughTheRemoteShell) {
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  const std::string& n = cluster.name();
  const std::string run = "UCX_NET_DEVICES=eth0 timeout 120 ip netns exec " + n + "-h0 " +
                          TPF_BINARY + " run --hosts " + n + "-h0:2," + n +
                          "-h1:2 --rsh 'ip netns exec' --store-bind 127.100.0.1 -- " + TPF_BINARY;
  const auto [bench, status] = shell(run + " bench all_reduce -b 4M -e 4M -n 2 -w 1");
  EXPECT_EQ(status, 0) << bench;
  EXPECT_NE(bench.find("Out of bounds values : 0 OK"), std::string::npos) << bench;
  // After the job the launcher sweeps each host's /dev/shm through the same remote shell.
  EXPECT_EQ(bench.find("warning: the sweep"), std::string::npos) << bench;
  const std::vector<std::string> keys = host_keys_printed_by(run + " settings");
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 2u) << keys[0] << keys[2];
}

// `tpf run --rail-devices eth0,eth1` gives local rank l of every host the link of rail l, so on two
// emulated hosts with a link per rail the launcher's ranks take the per-rail forms by default:
// each host's second link carries its share of a 4 MiB all_reduce (2 MiB a call per rank; six
// calls and more in the bench), counted on the link. `--rail-devices auto` does the same from
// what each rank finds (the namespace's links, none nearer than the other: the host's two ranks
// take one each), and so with the ranks pinned by their hosts (--bind core, through `tpf bind`).
// Without the option (every rank on eth0) the second links stay idle. The option wins over the
// TPF_RAIL_DEVICES=eth0 the launcher was started with.
TEST(EmulatedHosts, TpfRunRailDevicesPutEachLocalRankOnItsOwnLink) {
  EmulatedCluster cluster(2, /*nics=*/2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  const std::string& n = cluster.name();
  auto second_links_sent = [&] {
    return std::vector<long long>{second_link_sent(cluster, 0), second_link_sent(cluster, 1)};
  };
  // What auto chooses from on an emulated host, however the namespace is entered: with /sys
  // remounted for it (ip netns exec) hwloc sees no NIC; without (nsenter, or setns as the tests'
  // ranks do) hwloc sees the machine's, which the namespace does not have, whatever their names.
  for (const std::string& enter :
       {"ip netns exec " + n + "-h0 ", "nsenter --net=/run/netns/" + n + "-h0 "}) {
    const auto [topo, status] = shell(enter + TPF_BINARY + " topo");
    EXPECT_EQ(status, 0) << topo;
    EXPECT_NE(topo.find("\nnearest to this process: eth0, eth1\n"), std::string::npos)
        << enter << "\n"
        << topo;
  }
  for (const std::string option :
       {"--rail-devices eth0,eth1", "--rail-devices auto", "--bind core --rail-devices auto", ""}) {
    SCOPED_TRACE(option.empty() ? "UCX_NET_DEVICES=eth0" : option);
    const bool rails = !option.empty();
    const std::string run =
        "UCX_NET_DEVICES=eth0 TPF_RAIL_DEVICES=eth0 timeout 120 ip netns exec " + n + "-h0 " +
        TPF_BINARY + " run --hosts " + n + "-h0:2," + n +
        "-h1:2 --rsh 'ip netns exec' --store-bind 127.100.0.1 " + option + " -- " + TPF_BINARY +
        " bench all_reduce -b 4M -e 4M -n 2 -w 1";
    const std::vector<long long> before = second_links_sent();
    const auto [bench, status] = shell(run);
    const std::vector<long long> after = second_links_sent();
    EXPECT_EQ(status, 0) << bench;
    EXPECT_NE(bench.find("Out of bounds values : 0 OK"), std::string::npos) << bench;
    for (int host = 0; host < 2; ++host) {
      ASSERT_GE(before[host], 0) << "no eth1 on host " << host;
      const long long sent = after[host] - before[host];
      if (rails) {
        EXPECT_GE(sent, 4LL << 20) << "host " << host << "'s eth1";
      } else {
        EXPECT_LT(sent, 1LL << 20) << "host " << host << "'s eth1";
      }
    }
  }
}

// Under other launchers every rank gets one environment: TPF_RAIL_DEVICES=eth0,eth1 gives local
// rank l the link of rail l from the launcher's LOCAL_RANK (torchrun's variables here, the ranks
// started in their hosts' namespaces as torchrun's agents would), in place of the UCX_NET_DEVICES
// every rank got; each host's second link then carries its share of a 4 MiB all_reduce (2 MiB a
// call per rank), counted on the link, and the results are right.
TEST(EmulatedHosts, RailDevicesSettingPutsEachLocalRankOnItsOwnLinkUnderTorchrun) {
  EmulatedCluster cluster(2, /*nics=*/2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  const std::string& n = cluster.name();
  const long long before[] = {second_link_sent(cluster, 0), second_link_sent(cluster, 1)};
  const std::string start_ranks =
      "for r in 0 1 2 3; do ip netns exec " + n +
      "-h$((r / 2)) env RANK=$r WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 "
      "MASTER_ADDR=127.100.0.1 MASTER_PORT=29655 TPF_JOB_SECRET=0123456789abcdef0123 "
      "UCX_NET_DEVICES=eth0 TPF_RAIL_DEVICES=eth0,eth1 timeout 120 " +
      std::string(TPF_BINARY) + " bench all_reduce -b 4M -e 4M -n 2 -w 1 > /tmp/" + n +
      "-rank$r.log 2>&1 & done; status=0; for p in $(jobs -p); do wait $p || status=1; done; "
      "cat /tmp/" +
      n + "-rank*.log; rm -f /tmp/" + n + "-rank*.log; exit $status";
  const auto [bench, status] = shell("bash -c '" + start_ranks + "'");
  EXPECT_EQ(status, 0) << bench;
  EXPECT_NE(bench.find("Out of bounds values : 0 OK"), std::string::npos) << bench;
  for (int host = 0; host < 2; ++host) {
    ASSERT_GE(before[host], 0) << "no eth1 on host " << host;
    EXPECT_GE(second_link_sent(cluster, host) - before[host], 4LL << 20)
        << "host " << host << "'s eth1";
  }
}

// Rank 0 cuts host `host` off once every rank has called this (after a barrier, say), and
// every rank returns only once the link is down (`shared`'s counters 0 and 1).
void cut_once_all_are_here(const EmulatedCluster& cluster, int host, const SharedBlock& shared,
                           const RankContext& ctx) {
  if (ctx.rank == 0) {
    TPF_CHILD_CHECK(wait_until([&] { return shared.counter(0).load() == ctx.size - 1; },
                               std::chrono::seconds(50)),
                    "the other ranks did not come");
    TPF_CHILD_CHECK(cluster.cut(host), "ip link set down failed");
    shared.counter(1).store(1);
    return;
  }
  shared.counter(0).fetch_add(1);
  TPF_CHILD_CHECK(
      wait_until([&] { return shared.counter(1).load() == 1; }, std::chrono::seconds(50)),
      "rank 0 did not cut the link");
}

// A host that drops off the network gives UCX over TCP nothing to report for minutes: each side's
// heartbeat names a rank of the other, every rank fails with that cause well before its
// ten-minute deadline (TPF_HOST_LOST_S = 3 here), and nothing is left behind.
TEST(EmulatedHosts, AHostCutOffTheNetworkIsNamedOnBothSides) {
  EmulatedCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  SharedBlock shared;
  ::setenv("TPF_HOST_LOST_S", "3", 1);  // the children inherit it
  RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(600000);  // only the heartbeat ends it
  auto outcomes = run_ranks_raw(
      4,
      [&](const RankContext& ctx) {
        auto store = connect_then_enter(ctx, cluster.netns(ctx.rank / 2));
        Communicator comm =
            Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        comm.barrier();
        cut_once_all_are_here(cluster, 1, shared, ctx);  // nothing crosses the all_reduce
        int64_t value = 1, out = 0;
        const Error e = expect_error("all_reduce across a cut link", [&] {
          comm.all_reduce(&value, &out, 1, DType::i64, ReduceOp::sum);
        });
        TPF_CHILD_CHECK(e.code() == ErrorCode::timeout, e.what());
        // Each host's watcher (rank 0, rank 2) names a rank of the other host: whichever of its
        // two ranks' last beat came first (either, from one run to the next).
        const std::string what = e.what();
        const int other = ctx.rank < 2 ? 2 : 0;
        TPF_CHILD_CHECK(
            what.find("rank " + std::to_string(other) + " (host '") != std::string::npos ||
                what.find("rank " + std::to_string(other + 1) + " (host '") != std::string::npos,
            what);
        TPF_CHILD_CHECK(std::string(e.what()).find("has sent no heartbeat") != std::string::npos,
                        e.what());
      },
      options);
  ::unsetenv("TPF_HOST_LOST_S");
  expect_all_ok(outcomes);
}

// A rank that first sends to a rank of a host that is cut off already (on three hosts of two
// ranks, rank 1 is not connected to rank 2 before its first transfer, TPF_NET_CONNECT=first)
// fails when the heartbeat names that host, as the others do. UCX connected over TCP blocking by
// default: rank 1 sat in the kernel's connect() for its SYN retries (127 s), deaf to the
// heartbeat and its own deadline, until the run's deadline (60 s) killed it; with address
// resolution failing instead (no pinned address) it sat 9 to 36 s, holding its network, and its
// heartbeat stopped too: its watcher could name rank 1, a live rank, as the one lost.
TEST(EmulatedHosts, AFirstTransferToAHostCutOffFailsWithTheHeartbeatsCause) {
  EmulatedCluster cluster(3);
  ASSERT_TRUE(cluster.ok()) << "scripts/emulated-hosts.sh up failed (needs root and iproute2)";
  ASSERT_TRUE(cluster.pin_address(0, 1)) << "ip neigh replace failed";
  SharedBlock shared;
  ::setenv("TPF_HOST_LOST_S", "3", 1);  // the children inherit it
  RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(600000);  // only the heartbeat ends it
  auto outcomes = run_ranks_raw(
      6,
      [&](const RankContext& ctx) {
        auto store = connect_then_enter(ctx, cluster.netns(ctx.rank / 2));
        Communicator comm =
            Communicator::create(ctx.rank, ctx.size, store, "world", ctx.comm_options);
        comm.barrier();
        cut_once_all_are_here(cluster, 1, shared, ctx);  // ranks 2 and 3
        int32_t value = ctx.rank;
        const Error e = expect_error("a transfer with a host cut off", [&] {
          if (ctx.rank == 1) {
            comm.send(&value, 1, DType::i32, 2);
          } else if (ctx.rank == 2) {
            comm.recv(&value, 1, DType::i32, 1);
          } else {
            comm.recv(&value, 1, DType::i32, 2);
          }
        });
        // The cut-off host's ranks fail either way: by their heartbeat, or rank 2's connection
        // to rank 1 failing first (within ms, its link being down). No notice of theirs crosses.
        if (ctx.rank / 2 == 1) return;
        const std::string what = e.what();
        TPF_CHILD_CHECK(what.find("has sent no heartbeat") != std::string::npos, what);
        TPF_CHILD_CHECK(what.find("rank 1 (host '") == std::string::npos, what);  // it is live
        if (ctx.rank == 1) {
          TPF_CHILD_CHECK(what.find("rank 2 (host '") != std::string::npos ||
                              what.find("rank 3 (host '") != std::string::npos,
                          what);
        }
      },
      options);
  ::unsetenv("TPF_HOST_LOST_S");
  expect_all_ok(outcomes);
}

}  // namespace
}  // namespace tpf::testing
