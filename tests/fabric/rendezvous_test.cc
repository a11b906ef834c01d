// Tests of rendezvous(): rank 0 hosting the store with a published port (real processes), the
// launcher hosting it, bounded failures when ranks are missing, prompt peer_died when a rank (or
// the store's host) dies, and no store open to strangers without TPF_JOB_SECRET.

#include "bootstrap/rendezvous.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/scoped_env.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf::bootstrap {
namespace {

using namespace std::chrono_literals;

// A job id no other test run on this host shares.
std::string unique_job_id(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "rdvtest-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

LaunchEnv rank0_hosted_env(int rank, int world, const std::string& job_id) {
  LaunchEnv env;
  env.launcher = "mpirun";
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.store_host = "127.0.0.1";
  env.store_port = 0;
  env.rank0_hosts_store = true;
  env.secret = "rdv-secret";
  env.job_id = job_id;
  return env;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Body of one forked rank; returns the process exit code.
int run_rank(int rank, int world, const std::string& job_id) {
  try {
    const Rendezvous r = rendezvous(rank0_hosted_env(rank, world, job_id), 10s);
    if ((rank == 0) != (r.server != nullptr)) {
      std::fprintf(stderr, "rank %d: server present=%d\n", rank, r.server != nullptr);
      return 2;
    }
    if (rank == 0 && file_exists(port_file_path(job_id))) {
      std::fprintf(stderr, "rank 0: port file still present after rendezvous\n");
      return 3;
    }
    r.store->set("value/" + std::to_string(rank), std::to_string(rank * 10));
    for (int peer = 0; peer < world; ++peer) {
      if (r.store->get("value/" + std::to_string(peer), 10s) != std::to_string(peer * 10)) {
        std::fprintf(stderr, "rank %d: wrong value from rank %d\n", rank, peer);
        return 4;
      }
    }
    if (rank != 0) {
      // The last rank to finish tells rank 0, which must keep serving until then.
      if (r.store->add("finished", 1) == world - 1) r.store->set("all_finished", "1");
    } else if (world > 1) {
      r.store->get("all_finished", 10s);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
}

TEST(RendezvousTest, Rank0HostsStoreAndPublishesPortForThreeProcesses) {
  constexpr int kWorld = 3;
  const std::string job_id = unique_job_id("fork");
  std::vector<pid_t> children;
  // Start the non-zero ranks first so they really wait for the port file.
  for (int rank : {2, 1, 0}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(30);  // a stuck child dies, so the parent's waitpid below is bounded
      ::_exit(run_rank(rank, kWorld, job_id));
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "child " << pid << " status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
  }
  EXPECT_FALSE(file_exists(port_file_path(job_id)));
}

TEST(RendezvousTest, LauncherHostedStoreWithThreads) {
  TcpStoreServer server("127.0.0.1", 0, "launcher-secret");
  constexpr int kWorld = 3;
  std::vector<Rendezvous> results(kWorld);
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      LaunchEnv env;
      env.launcher = "tpf";
      env.rank = rank;
      env.world_size = kWorld;
      env.local_rank = rank;
      env.local_world_size = kWorld;
      env.store_host = "127.0.0.1";
      env.store_port = server.port();
      env.rank0_hosts_store = false;
      env.secret = "launcher-secret";
      env.job_id = unique_job_id("tpf");
      try {
        results[rank] = rendezvous(env, 5s);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    ASSERT_NE(results[rank].store, nullptr);
    EXPECT_EQ(results[rank].server, nullptr);
  }
  EXPECT_EQ(results[0].store->add("rendezvous/connected", 0), kWorld);
}

TEST(RendezvousTest, WrongSecretIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, "right");
  LaunchEnv env = rank0_hosted_env(1, 2, unique_job_id("secret"));
  env.rank0_hosts_store = false;
  env.store_port = server.port();
  env.secret = "wrong";
  try {
    rendezvous(env, 2s);
    FAIL() << "expected refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::bootstrap);
    EXPECT_NE(std::string(e.what()).find("TPF_JOB_SECRET"), std::string::npos) << e.what();
  }
}

TEST(RendezvousTest, MissingRank0TimesOutNamingThePortFile) {
  const std::string job_id = unique_job_id("norank0");
  const auto start = std::chrono::steady_clock::now();
  try {
    rendezvous(rank0_hosted_env(1, 2, job_id), 200ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find(port_file_path(job_id)), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(RendezvousTest, Rank0AloneTimesOutAndRemovesThePortFile) {
  const std::string job_id = unique_job_id("alone");
  try {
    rendezvous(rank0_hosted_env(0, 2, job_id), 300ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find("only 1 of 2 ranks"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(file_exists(port_file_path(job_id)));
}

TEST(RendezvousTest, StalePortFileFromDeadProcessIsIgnored) {
  const std::string job_id = unique_job_id("stale");
  const std::string path = port_file_path(job_id);
  // A pid that certainly exited: a child we reaped.
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  {
    std::ofstream stale(path);
    stale << "1 " << dead << "\n";  // port 1: nobody listens there
  }
  ::chmod(path.c_str(), 0600);
  std::string error1;
  std::thread rank1([&] {
    try {
      const Rendezvous r = rendezvous(rank0_hosted_env(1, 2, job_id), 10s);
      r.store->set("hello", "from 1");
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  Rendezvous r0;
  std::string error0;
  try {
    r0 = rendezvous(rank0_hosted_env(0, 2, job_id), 10s);
    EXPECT_EQ(r0.store->get("hello", 10s), "from 1");
  } catch (const std::exception& e) {
    error0 = e.what();
  }
  rank1.join();
  EXPECT_EQ(error0, "");
  EXPECT_EQ(error1, "");
  EXPECT_FALSE(file_exists(path));
  ::unlink(path.c_str());
}

// Forks one process per rank running body(rank) -> exit code (bounded by alarm); returns the
// exit codes, -signal for a rank killed by a signal.
std::vector<int> run_forked(int world, const std::function<int(int)>& body) {
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) return {};
    if (pid == 0) {
      ::alarm(30);  // far below the 120 s a setup timeout would take
      ::_exit(body(rank));
    }
    children.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  }
  return codes;
}

// In a forked rank: 0 if get() fails with peer_died and a message holding every fragment.
int expect_peer_died_get(Store& store, const std::vector<std::string>& fragments) {
  try {
    store.get("never_set", 20s);
    std::fprintf(stderr, "get succeeded\n");
    return 10;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::peer_died) {
      std::fprintf(stderr, "code %s: %s\n", error_code_name(e.code()), e.what());
      return 11;
    }
    for (const auto& f : fragments) {
      if (std::string(e.what()).find(f) == std::string::npos) {
        std::fprintf(stderr, "'%s' not in: %s\n", f.c_str(), e.what());
        return 12;
      }
    }
    return 0;
  }
}

TEST(RendezvousTest, RankThatDiesAfterConnectingIsPeerDiedForTheOthers) {
  const std::string job_id = unique_job_id("rankdies");
  int done[2];
  ASSERT_EQ(::pipe(done), 0);
  const auto codes = run_forked(3, [&](int rank) {
    try {
      const Rendezvous r = rendezvous(rank0_hosted_env(rank, 3, job_id), 10s);
      if (rank == 2) {
        // Once every rank has connected (a death before would fail the rendezvous itself), gone
        // without closing its store connection, as if killed.
        r.store->get("rendezvous/all_connected", 10s);
        ::_exit(0);
      }
      const int code = expect_peer_died_get(*r.store, {"job rank 2 (pid ", "died"});
      // Rank 0 serves the store: it stays until rank 1 has its answer.
      char byte = 0;
      if (rank == 1) (void)!::write(done[1], &byte, 1);
      if (rank == 0) (void)!::read(done[0], &byte, 1);
      return code;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 1;
    }
  });
  ::close(done[0]);
  ::close(done[1]);
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

// TPF_END_WITH_STORE=1 (what tpf run --hosts sets for the ranks it starts through ssh): once the
// process that serves the store is gone, the rank ends (SIGKILL) with a line naming the store,
// where it would otherwise run on (here: wait in pause() until the alarm). Child 0 serves the
// store and exits once the rank (child 1) has made its rendezvous.
TEST(RendezvousTest, ARankAskedToEndWithItsStoreEndsOnceTheStoresProcessHasExited) {
  int port_pipe[2], ready_pipe[2], rank_stderr[2];
  ASSERT_EQ(::pipe(port_pipe), 0);
  ASSERT_EQ(::pipe(ready_pipe), 0);
  ASSERT_EQ(::pipe(rank_stderr), 0);
  const auto codes = run_forked(2, [&](int child) {
    if (child == 0) {
      TcpStoreServer server("127.0.0.1", 0, "end-with-store-secret");
      const uint16_t port = server.port();
      (void)!::write(port_pipe[1], &port, sizeof port);
      char byte = 0;
      (void)!::read(ready_pipe[0], &byte, 1);
      ::_exit(0);  // the kernel closes the store's connections
    }
    ::dup2(rank_stderr[1], STDERR_FILENO);
    uint16_t port = 0;
    if (::read(port_pipe[0], &port, sizeof port) != sizeof port) return 20;
    ::setenv("TPF_END_WITH_STORE", "1", 1);
    LaunchEnv env;
    env.launcher = "tpf";
    env.world_size = 1;
    env.local_world_size = 1;
    env.store_host = "127.0.0.1";
    env.store_port = port;
    env.rank0_hosts_store = false;
    env.secret = "end-with-store-secret";
    env.job_id = unique_job_id("endwithstore");
    try {
      const Rendezvous r = rendezvous(env, 10s);
      (void)!::write(ready_pipe[1], "r", 1);
      for (;;) ::pause();  // until the watch ends it (or the alarm)
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank: %s\n", e.what());
      return 21;
    }
  });
  ::close(rank_stderr[1]);
  std::string said;
  char buffer[1024];
  for (ssize_t n; (n = ::read(rank_stderr[0], buffer, sizeof buffer)) > 0;) said.append(buffer, n);
  for (int fd : {port_pipe[0], port_pipe[1], ready_pipe[0], ready_pipe[1], rank_stderr[0]}) {
    ::close(fd);
  }
  EXPECT_EQ(codes, (std::vector<int>{0, -SIGKILL})) << said;
  EXPECT_NE(said.find("tpf: rank 0 (pid "), std::string::npos) << said;
  EXPECT_NE(said.find("): the job's store at 127.0.0.1:"), std::string::npos) << said;
  EXPECT_NE(said.find(" closed its connection: its launcher has ended, so this rank ends too "
                      "(TPF_END_WITH_STORE=1)"),
            std::string::npos)
      << said;
}

TEST(RendezvousTest, EndWithStoreTakesOnlyOneOrZero) {
  TcpStoreServer server("127.0.0.1", 0, "launcher-secret");
  LaunchEnv env = rank0_hosted_env(0, 1, unique_job_id("endwithstorebad"));
  env.launcher = "tpf";
  env.rank0_hosts_store = false;
  env.store_port = server.port();
  env.secret = "launcher-secret";
  testing::ScopedEnv bad("TPF_END_WITH_STORE", "yes");
  try {
    rendezvous(env, 2s);
    FAIL() << "expected TPF_END_WITH_STORE=yes to be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("TPF_END_WITH_STORE='yes' should be 1"), std::string::npos)
        << e.what();
  }
}

// Under mpirun, srun or torchrun rank 0 serves the store: a rank ending with it would be killed
// as rank 0 exits before it.
TEST(RendezvousTest, EndWithStoreIsRefusedWhereRank0ServesTheStore) {
  testing::ScopedEnv asked("TPF_END_WITH_STORE", "1");
  try {
    rendezvous(rank0_hosted_env(1, 2, unique_job_id("endwithstorerank0")), 2s);
    FAIL() << "expected TPF_END_WITH_STORE=1 to be refused under mpirun";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("TPF_END_WITH_STORE=1 is for ranks of tpf run, whose "
                                         "store its launcher serves; under mpirun rank 0 serves "
                                         "it"),
              std::string::npos)
        << e.what();
  }
}

TEST(RendezvousTest, DeathOfRank0WhichServesTheStoreIsPeerDiedNamingIt) {
  const std::string job_id = unique_job_id("rank0dies");
  const auto codes = run_forked(2, [&](int rank) {
    try {
      const Rendezvous r = rendezvous(rank0_hosted_env(rank, 2, job_id), 10s);
      if (rank == 0) ::_exit(0);  // every rank has connected once rendezvous returns on rank 0
      return expect_peer_died_get(*r.store, {"job rank 0 (pid ", "which serves the store"});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 1;
    }
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
}

TEST(RendezvousTest, MultiHostJobWithoutSecretIsRefusedSayingHowToSetIt) {
  for (int rank : {0, 1}) {
    LaunchEnv env = rank0_hosted_env(rank, 4, unique_job_id("nosecret"));
    env.local_world_size = 2;  // two hosts
    env.store_host = "127.0.0.2";  // never contacted: refused before connecting
    env.store_port = 29511;
    env.secret = "";
    try {
      rendezvous(env, 1s);
      FAIL() << "rank " << rank << ": a network store without a secret was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::bootstrap);
      const std::string m = e.what();
      for (const char* f :
           {"0.0.0.0:29511", "TPF_JOB_SECRET is not set", "several hosts",
            "export TPF_JOB_SECRET=$(openssl rand -hex 16)", "mpirun -x TPF_JOB_SECRET"}) {
        EXPECT_NE(m.find(f), std::string::npos) << "'" << f << "' not in: " << m;
      }
    }
    env.secret = "short";
    try {
      rendezvous(env, 1s);
      FAIL() << "rank " << rank << ": a guessable secret was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::bootstrap);
      EXPECT_NE(std::string(e.what()).find("has only 5 characters"), std::string::npos) << e.what();
    }
  }
}

TEST(RendezvousTest, SingleHostJobWithoutSecretMakesOneUpAndRefusesStrangers) {
  const std::string job_id = unique_job_id("madeup");
  Rendezvous r1;
  std::string error1;
  std::thread rank1([&] {
    try {
      LaunchEnv env = rank0_hosted_env(1, 2, job_id);
      env.secret = "";
      r1 = rendezvous(env, 10s);
    } catch (const std::exception& e) {
      error1 = e.what();
    }
  });
  LaunchEnv env0 = rank0_hosted_env(0, 2, job_id);
  env0.secret = "";
  Rendezvous r0 = rendezvous(env0, 10s);
  rank1.join();
  ASSERT_EQ(error1, "");
  ASSERT_NE(r0.server, nullptr);
  r1.store->set("k", "from 1");
  EXPECT_EQ(r0.store->get("k", 5s), "from 1");
  EXPECT_FALSE(file_exists(port_file_path(job_id)));  // the secret's file is gone
  for (const std::string guess : {"", "rdv-secret"}) {
    try {
      TcpStoreClient stranger("127.0.0.1", r0.server->port(), guess, 2s);
      FAIL() << "a client without the made-up secret got in";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::bootstrap);
      EXPECT_NE(std::string(e.what()).find("wrong job secret"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tpf::bootstrap
