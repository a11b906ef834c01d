#include "tpf/topology.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "support/scoped_env.h"
#include "tpf/error.h"

namespace tpf {
namespace {

TEST(Topology, DiscoversAtLeastOneCoreWithHardwareThreads) {
  MachineTopology machine = discover_topology();
  ASSERT_GE(machine.cores.size(), 1u);
  EXPECT_GE(machine.sockets, 1);
  EXPECT_GE(machine.numa_nodes, 1);
  for (const CoreInfo& core : machine.cores) {
    EXPECT_FALSE(core.pus.empty()) << "core " << core.logical_index;
    EXPECT_GE(core.numa_node, 0);
    EXPECT_LT(core.numa_node, machine.numa_nodes);
    EXPECT_GE(core.socket, 0);
    EXPECT_LT(core.socket, machine.sockets);
  }
}

TEST(Topology, DescribeMentionsCoresAndCpus) {
  std::string text = discover_topology().describe();
  EXPECT_NE(text.find("core"), std::string::npos) << text;
  EXPECT_NE(text.find("CPUs"), std::string::npos) << text;
}

TEST(Topology, ParseBindPolicyAcceptsTheFourNames) {
  for (BindPolicy policy : {BindPolicy::none, BindPolicy::core, BindPolicy::numa, BindPolicy::gpu})
    EXPECT_EQ(parse_bind_policy(bind_policy_name(policy)), policy);
  EXPECT_STREQ(bind_policy_name(BindPolicy::gpu), "gpu");
}

TEST(Topology, ParseBindPolicyRejectsJunkWithTheValueInTheMessage) {
  try {
    parse_bind_policy("socketish");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("socketish"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_bind_policy(""), Error);
  EXPECT_THROW(parse_bind_policy("CORE"), Error);
}

TEST(Topology, BindNoneDoesNothing) { EXPECT_EQ(bind_current_process(BindPolicy::none, 0, 1), ""); }

TEST(Topology, BindRejectsALocalRankOutsideTheWorld) {
  EXPECT_THROW(bind_current_process(BindPolicy::core, -1, 2), Error);
  EXPECT_THROW(bind_current_process(BindPolicy::core, 2, 2), Error);
  EXPECT_THROW(bind_current_process(BindPolicy::core, 0, 0), Error);
}

// Binding changes the whole process, so it happens in a child: the test binary stays unbound.
// Exit codes: 0 bound to the core's CPUs (or a warning, in containers that forbid binding),
// 1 description empty, 2 affinity not what the description says.
int bind_in_child(BindPolicy policy, int local_rank, int local_world_size) {
  pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      std::string where = bind_current_process(policy, local_rank, local_world_size);
      if (where.empty()) code = 1;
      if (code == 0 && where.rfind("warning:", 0) != 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) < 1) code = 2;
        if (policy == BindPolicy::core) {
          // The rank's share: cores / ranks consecutive cores, at least one.
          MachineTopology machine = discover_topology();
          const size_t n = machine.cores.size();
          const size_t share = std::max<size_t>(1, n / static_cast<size_t>(local_world_size));
          const size_t first = static_cast<size_t>(local_rank) * share % n;
          size_t want = 0;
          for (size_t i = first; i < first + share && i < n; ++i) {
            for (int pu : machine.cores[i].pus) {
              if (!CPU_ISSET(pu, &set)) code = 2;
              ++want;
            }
          }
          if (static_cast<size_t>(CPU_COUNT(&set)) != want) code = 2;
        }
      }
    } catch (...) {
      code = 3;
    }
    _exit(code);
  }
  int status = 0;
  // The child does bounded work (hwloc discovery and one syscall); it cannot block.
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(Topology, BindCorePinsToTheRanksShareOfTheCores) {
  EXPECT_EQ(bind_in_child(BindPolicy::core, 0, 2), 0);
  EXPECT_EQ(bind_in_child(BindPolicy::core, 1, 2), 0);
  EXPECT_EQ(bind_in_child(BindPolicy::core, 0, 1), 0);  // alone: every core
  EXPECT_EQ(bind_in_child(BindPolicy::core, 5, 8), 0);  // more ranks than cores: round-robin
}

TEST(Topology, BindNumaSucceedsOrWarns) { EXPECT_EQ(bind_in_child(BindPolicy::numa, 0, 1), 0); }

using testing::ScopedEnv;

// gpu: next to the GPU the local rank drives, on a GPU server that an hwloc export describes
// (tests/fabric/gpus_test.cc has it; hwloc's binding hooks for an export accept any set, so
// only the choice is checked here): local rank 2 drives GPU 0000:87:00.0 on socket 1 (CPUs
// 4-7); TPF_GPU names another; on this machine, without GPUs, a warning and no binding.
TEST(Topology, BindGpuPinsNextToTheRanksGpu) {
  {
    ScopedEnv machine("HWLOC_XMLFILE",
                      TPF_SOURCE_DIR "/tests/fabric/data/two-sockets-four-gpus.xml");
    std::string where = bind_current_process(BindPolicy::gpu, 2, 4);
    EXPECT_EQ(where.rfind("GPU 0000:87:00.0's CPUs 4-7 (CUDA device 2 of local rank 2", 0), 0u)
        << where;
    {
      ScopedEnv gpu("TPF_GPU", "0000:12:00.0");
      where = bind_current_process(BindPolicy::gpu, 2, 4);
      EXPECT_EQ(where.rfind("GPU 0000:12:00.0's CPUs 0-3 (TPF_GPU=0000:12:00.0)", 0), 0u) << where;
    }
    ScopedEnv hidden("CUDA_VISIBLE_DEVICES", "");
    where = bind_current_process(BindPolicy::gpu, 2, 4);
    EXPECT_EQ(where,
              "warning: no GPU for local rank 2 (CUDA_VISIBLE_DEVICES leaves no GPU visible); "
              "running unbound");
  }
  EXPECT_EQ(bind_current_process(BindPolicy::gpu, 0, 1),
            "warning: no GPU for local rank 0 (no GPU on PCI); running unbound");
}

}  // namespace
}  // namespace tpf
