// tpf run's thread for commands on other hosts (apps/cli/remote_worker.h), as a function: work
// runs off the caller's thread, in the order posted, and its results come back to the caller
// through fd() and run on the caller's thread.
#include "cli/remote_worker.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tpf::cli {
namespace {

// Runs the worker's results as they come until `count` have run (bounded: 30 s).
void run_results_until(RemoteWorker& worker, const std::vector<std::string>& ran, size_t count) {
  while (ran.size() < count) {
    pollfd ready{worker.fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&ready, 1, 30000), 1) << "no result came back";
    worker.run_results();
  }
}

TEST(RemoteWorker, WorkRunsOffTheCallersThreadInOrderAndItsResultsRunOnTheCallers) {
  RemoteWorker worker;
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::string> ran;
  for (const char* name : {"first", "second", "third"}) {
    worker.post([name, caller, &ran]() -> RemoteWorker::Then {
      const bool off = std::this_thread::get_id() != caller;
      return [name, off, caller, &ran] {
        ran.push_back(std::string(name) + (off ? " off" : " ON THE CALLER'S THREAD") +
                      (std::this_thread::get_id() == caller ? "" : " (result off the caller's)"));
      };
    });
  }
  run_results_until(worker, ran, 3);
  EXPECT_EQ(ran, (std::vector<std::string>{"first off", "second off", "third off"}));
  pollfd ready{worker.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&ready, 1, 0), 0) << "fd() stays readable with no result left";
}

// Work that throws hands back what the caller said to do instead (so that the caller does not
// wait for a result that never comes), and the work after it still runs.
TEST(RemoteWorker, WorkThatThrowsHandsBackItsFallbackAndTheNextWorkRuns) {
  RemoteWorker worker;
  std::vector<std::string> ran;
  worker.post([]() -> RemoteWorker::Then { throw std::runtime_error("no shell"); },
              [&ran] { ran.push_back("fallback"); });
  worker.post([&ran]() -> RemoteWorker::Then { return [&ran] { ran.push_back("next"); }; });
  run_results_until(worker, ran, 2);
  EXPECT_EQ(ran, (std::vector<std::string>{"fallback", "next"}));
}

// finish() and the destructor run the work posted (signals to the ranks must reach them) and
// drop its results (the launcher is done with them).
TEST(RemoteWorker, FinishRunsThePostedWorkAndDropsItsResults) {
  std::vector<int> done;  // written by the work, read once finish() has returned
  bool result_ran = false;
  {
    RemoteWorker worker;
    for (int i = 0; i < 3; ++i) {
      worker.post([i, &done, &result_ran]() -> RemoteWorker::Then {
        done.push_back(i);
        return [&result_ran] { result_ran = true; };
      });
    }
    worker.finish();
    EXPECT_EQ(done, (std::vector<int>{0, 1, 2}));
    pollfd ready{worker.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&ready, 1, 0), 0) << "fd() stays readable with the results dropped";
    worker.run_results();
    EXPECT_FALSE(result_ran);
    worker.post([&done]() -> RemoteWorker::Then {
      done.push_back(3);
      return {};
    });
  }
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace tpf::cli
