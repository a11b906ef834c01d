// Tests of detect_launch_env(): each launcher's variables, their precedence, and clear errors.

#include "tpf/launch_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "tpf/error.h"

namespace tpf {
namespace {

const char* const kLauncherVars[] = {"TPF_RANK",
                                     "TPF_WORLD_SIZE",
                                     "TPF_LOCAL_RANK",
                                     "TPF_LOCAL_WORLD_SIZE",
                                     "TPF_STORE_ADDR",
                                     "TPF_JOB_SECRET",
                                     "TPF_JOB_ID",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "OMPI_MCA_ess_base_jobid",
                                     "PMIX_NAMESPACE",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "SLURM_LOCALID",
                                     "SLURM_NTASKS_PER_NODE",
                                     "SLURM_TASKS_PER_NODE",
                                     "SLURM_JOB_ID",
                                     "SLURM_STEP_ID",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "TORCHELASTIC_RUN_ID",
                                     "TORCHELASTIC_USE_AGENT_STORE",
                                     "TORCHELASTIC_RESTART_COUNT"};

// Clears every launcher variable for the test and puts the originals back afterwards, so the
// tests pass inside mpirun/srun/torchrun too.
class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLauncherVars) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) ::setenv(name, value, 1);
  }
  // Expects detect_launch_env() to fail with a message containing every fragment.
  static void expect_error(std::initializer_list<const char*> fragments) {
    try {
      const LaunchEnv env = detect_launch_env();
      ADD_FAILURE() << "expected an error, got launcher " << env.launcher << " rank " << env.rank;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::bootstrap);
      for (const char* f : fragments) {
        EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
            << "missing '" << f << "' in: " << e.what();
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(LaunchEnvTest, NoLauncherSaysWhatToProvide) {
  expect_error({"TPF_RANK", "TPF_STORE_ADDR", "tpf run -n N", "OMPI_COMM_WORLD_RANK",
                "SLURM_PROCID", "MASTER_ADDR"});
}

TEST_F(LaunchEnvTest, TpfRun) {
  set({{"TPF_RANK", "2"},
       {"TPF_WORLD_SIZE", "4"},
       {"TPF_LOCAL_RANK", "0"},
       {"TPF_LOCAL_WORLD_SIZE", "2"},
       {"TPF_STORE_ADDR", "10.0.0.5:29500"},
       {"TPF_JOB_SECRET", "s3"},
       {"TPF_JOB_ID", "job-42"}});
  const LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.launcher, "tpf");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.store_host, "10.0.0.5");
  EXPECT_EQ(env.store_port, 29500);
  EXPECT_FALSE(env.rank0_hosts_store);
  EXPECT_EQ(env.secret, "s3");
  EXPECT_EQ(env.job_id, "job-42");
}

TEST_F(LaunchEnvTest, TpfRunDefaultsAndIpv6) {
  set({{"TPF_RANK", "1"}, {"TPF_WORLD_SIZE", "3"}, {"TPF_STORE_ADDR", "[::1]:1234"}});
  const LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.store_host, "::1");
  EXPECT_EQ(env.store_port, 1234);
  EXPECT_EQ(env.local_rank, 1);  // one host unless told otherwise
  EXPECT_EQ(env.local_world_size, 3);
  EXPECT_EQ(env.secret, "");
  EXPECT_EQ(env.job_id, "tpf-___1__1234");  // derived from the store address, sanitized
}

TEST_F(LaunchEnvTest, TpfRunErrorsNameTheVariable) {
  set({{"TPF_RANK", "0"}, {"TPF_WORLD_SIZE", "2"}});
  expect_error({"TPF_STORE_ADDR"});
  set({{"TPF_STORE_ADDR", "nohostport"}});
  expect_error({"TPF_STORE_ADDR='nohostport'"});
  set({{"TPF_STORE_ADDR", "host:99999"}});
  expect_error({"TPF_STORE_ADDR='99999'", "out of range"});
  set({{"TPF_STORE_ADDR", "host:0"}});
  expect_error({"TPF_STORE_ADDR"});
  set({{"TPF_STORE_ADDR", "host:1"}, {"TPF_RANK", "2"}});
  expect_error({"TPF_RANK=2", "world size 2"});
  set({{"TPF_RANK", " 1"}});
  expect_error({"TPF_RANK=' 1'", "not an integer"});
  set({{"TPF_RANK", "-1"}});
  expect_error({"TPF_RANK='-1'"});
  set({{"TPF_RANK", "1"}, {"TPF_WORLD_SIZE", "two"}});
  expect_error({"TPF_WORLD_SIZE='two'"});
  set({{"TPF_WORLD_SIZE", "2"}, {"TPF_LOCAL_RANK", "2"}, {"TPF_LOCAL_WORLD_SIZE", "2"}});
  expect_error({"TPF_LOCAL_RANK=2"});
  set({{"TPF_LOCAL_RANK", "0"}, {"TPF_LOCAL_WORLD_SIZE", "3"}});
  expect_error({"local world size 3"});
}

TEST_F(LaunchEnvTest, OpenMpiOnOneHostPublishesAPort) {
  set({{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"OMPI_MCA_ess_base_jobid", "12345"}});
  const LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.launcher, "mpirun");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_TRUE(env.rank0_hosts_store);
  EXPECT_EQ(env.store_host, "127.0.0.1");
  EXPECT_EQ(env.store_port, 0);
  EXPECT_EQ(env.job_id, "ompi-12345");
}

TEST_F(LaunchEnvTest, OpenMpiWithMasterAndPmixNamespace) {
  set({{"OMPI_COMM_WORLD_RANK", "0"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"PMIX_NAMESPACE", "prterun-node1-77@1"},
       {"MASTER_ADDR", "node1"},
       {"MASTER_PORT", "29400"},
       {"TPF_JOB_SECRET", "sec"}});
  const LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.store_host, "node1");
  EXPECT_EQ(env.store_port, 29400);
  EXPECT_TRUE(env.rank0_hosts_store);
  EXPECT_EQ(env.job_id, "ompi-prterun-node1-77_1");
  EXPECT_EQ(env.secret, "sec");
}

TEST_F(LaunchEnvTest, MultiHostWithoutMasterIsAnError) {
  set({{"OMPI_COMM_WORLD_RANK", "0"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
       {"OMPI_MCA_ess_base_jobid", "1"}});
  expect_error({"MASTER_ADDR", "MASTER_PORT", "several hosts"});
  set({{"MASTER_ADDR", "node1"}});
  expect_error({"MASTER_ADDR is set but MASTER_PORT is missing"});
  set({{"MASTER_PORT", "http"}});
  expect_error({"MASTER_PORT='http'"});
}

TEST_F(LaunchEnvTest, OpenMpiErrorsNameTheVariable) {
  set({{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_MCA_ess_base_jobid", "1"}});
  expect_error({"OMPI_COMM_WORLD_RANK=3"});
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2x"}});
  expect_error({"OMPI_COMM_WORLD_SIZE='2x'"});
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  expect_error({"OMPI_COMM_WORLD_SIZE is missing"});
  set({{"OMPI_COMM_WORLD_SIZE", "2"}});
  ::unsetenv("OMPI_MCA_ess_base_jobid");
  expect_error({"TPF_JOB_ID"});  // no way to tell jobs apart
  set({{"TPF_JOB_ID", "mine"}});
  EXPECT_EQ(detect_launch_env().job_id, "mine");
}

TEST_F(LaunchEnvTest, Slurm) {
  set({{"SLURM_PROCID", "5"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_TASKS_PER_NODE", "4(x2)"},
       {"SLURM_JOB_ID", "777"},
       {"SLURM_STEP_ID", "0"},
       {"MASTER_ADDR", "n1"},
       {"MASTER_PORT", "5000"}});
  LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.launcher, "srun");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.job_id, "slurm-777.0");
  EXPECT_TRUE(env.rank0_hosts_store);
  EXPECT_EQ(env.store_host, "n1");
  EXPECT_EQ(env.store_port, 5000);
  set({{"SLURM_NTASKS_PER_NODE", "8"}, {"SLURM_LOCALID", "5"}});  // preferred over the list
  env = detect_launch_env();
  EXPECT_EQ(env.local_world_size, 8);
}

TEST_F(LaunchEnvTest, SlurmOnOneHostAndErrors) {
  set({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "9"}});
  LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.job_id, "slurm-9");
  EXPECT_EQ(env.store_port, 0);
  EXPECT_EQ(env.local_world_size, 2);
  set({{"SLURM_TASKS_PER_NODE", "x"}});
  expect_error({"SLURM_TASKS_PER_NODE"});
  ::unsetenv("SLURM_TASKS_PER_NODE");
  set({{"SLURM_LOCALID", "abc"}});
  expect_error({"SLURM_LOCALID='abc'"});
  set({{"SLURM_LOCALID", "0"}});
  ::unsetenv("SLURM_JOB_ID");
  expect_error({"SLURM_JOB_ID"});
}

TEST_F(LaunchEnvTest, Torchrun) {
  set({{"RANK", "3"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_RANK", "3"},
       {"LOCAL_WORLD_SIZE", "4"},
       {"MASTER_ADDR", "127.0.0.1"},
       {"MASTER_PORT", "29500"},
       {"TORCHELASTIC_RUN_ID", "run/abc"}});
  LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_TRUE(env.rank0_hosts_store);
  // MASTER_PORT is torch's (its agent's store, or worker rank 0's): on one host rank 0 binds a
  // free loopback port and publishes it in a file.
  EXPECT_EQ(env.store_host, "127.0.0.1");
  EXPECT_EQ(env.store_port, 0);
  EXPECT_EQ(env.torch_store_key, "");
  EXPECT_EQ(env.job_id, "torchrun-run_abc");
  // torchrun's default run id "none" is shared by unrelated jobs: use the master address.
  set({{"TORCHELASTIC_RUN_ID", "none"}});
  EXPECT_EQ(detect_launch_env().job_id, "torchrun-127.0.0.1_29500");
  ::unsetenv("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(detect_launch_env().job_id, "torchrun-127.0.0.1_29500");
  set({{"LOCAL_RANK", "4"}});
  expect_error({"LOCAL_RANK=4"});
  set({{"LOCAL_RANK", "0"}, {"RANK", "4"}});
  expect_error({"RANK=4", "world size 4"});
  set({{"RANK", "0"}});
  ::unsetenv("WORLD_SIZE");
  expect_error({"WORLD_SIZE is missing"});
}

// Across hosts, the store's port goes through torchrun's agent store where there is one, per
// restart of the workers; without one rank 0 binds MASTER_PORT as torch's rank 0 would.
TEST_F(LaunchEnvTest, TorchrunAcrossHosts) {
  set({{"RANK", "1"},
       {"WORLD_SIZE", "4"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "2"},
       {"MASTER_ADDR", "node0"},
       {"MASTER_PORT", "29501"},
       {"TORCHELASTIC_RUN_ID", "job7"},
       {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.store_host, "node0");
  EXPECT_EQ(env.store_port, 29501);
  EXPECT_EQ(env.torch_store_key, "/tpf/torchrun-job7/attempt_0/store_port");
  set({{"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(detect_launch_env().torch_store_key, "/tpf/torchrun-job7/attempt_2/store_port");
  set({{"TORCHELASTIC_RESTART_COUNT", "x"}});
  expect_error({"TORCHELASTIC_RESTART_COUNT='x'"});
  set({{"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  env = detect_launch_env();
  EXPECT_EQ(env.store_port, 29501);
  EXPECT_EQ(env.torch_store_key, "");
}

TEST_F(LaunchEnvTest, Precedence) {
  set({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(detect_launch_env().launcher, "torchrun");
  set({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "5"}});
  EXPECT_EQ(detect_launch_env().launcher, "srun");
  EXPECT_EQ(detect_launch_env().rank, 2);
  set({{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_MCA_ess_base_jobid", "6"}});
  EXPECT_EQ(detect_launch_env().launcher, "mpirun");
  EXPECT_EQ(detect_launch_env().rank, 1);
  set({{"TPF_RANK", "0"}, {"TPF_WORLD_SIZE", "4"}, {"TPF_STORE_ADDR", "h:9"}});
  const LaunchEnv env = detect_launch_env();
  EXPECT_EQ(env.launcher, "tpf");
  EXPECT_EQ(env.rank, 0);
  EXPECT_FALSE(env.rank0_hosts_store);
}

TEST_F(LaunchEnvTest, JobIdOverrideIsSanitized) {
  set({{"RANK", "0"},
       {"WORLD_SIZE", "1"},
       {"MASTER_ADDR", "m"},
       {"MASTER_PORT", "1"},
       {"TPF_JOB_ID", "my job/1;rm -rf"}});
  EXPECT_EQ(detect_launch_env().job_id, "my_job_1_rm_-rf");
  set({{"TPF_JOB_ID", ".."}});
  expect_error({"TPF_JOB_ID"});
}

}  // namespace
}  // namespace tpf
