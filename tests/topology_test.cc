#include "tpf/topology.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

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

TEST(Topology, ParseBindPolicyAcceptsTheThreeNames) {
  EXPECT_EQ(parse_bind_policy("none"), BindPolicy::none);
  EXPECT_EQ(parse_bind_policy("core"), BindPolicy::core);
  EXPECT_EQ(parse_bind_policy("numa"), BindPolicy::numa);
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
          MachineTopology machine = discover_topology();
          const CoreInfo& core =
              machine.cores[static_cast<size_t>(local_rank) % machine.cores.size()];
          if (static_cast<size_t>(CPU_COUNT(&set)) != core.pus.size()) code = 2;
          for (int pu : core.pus) {
            if (!CPU_ISSET(pu, &set)) code = 2;
          }
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

TEST(Topology, BindCorePinsToTheCoresCpus) {
  EXPECT_EQ(bind_in_child(BindPolicy::core, 0, 2), 0);
  EXPECT_EQ(bind_in_child(BindPolicy::core, 1, 2), 0);
}

TEST(Topology, BindNumaSucceedsOrWarns) { EXPECT_EQ(bind_in_child(BindPolicy::numa, 0, 1), 0); }

}  // namespace
}  // namespace tpf
