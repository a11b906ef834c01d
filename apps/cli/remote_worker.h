// Where tpf run's commands on other hosts run (`tpf run --hosts`: searching for the job's
// processes there, looking at their states, signalling them, asking them for their flight
// recorders). Each waits on the remote shell, up to seconds for a host that cannot be reached; run
// in the launcher's loop, they held it, and meanwhile no rank's output was passed on, no signal
// forwarded, no deadline kept. Here they run on one thread of their own, one after another in the
// order posted (a SIGKILL after the SIGTERM before it), and what the loop is to do with a result
// is handed back to it: the loop polls fd() and calls run_results(), so that the launcher's state
// is only ever touched by its own thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "cli/process_util.h"

namespace tpf::cli {

class RemoteWorker {
 public:
  // Runs on the loop's thread, with the result.
  using Then = std::function<void()>;
  // Runs on the worker: only on what it captured by value (and on what only the worker
  // touches). What it returns (may be empty) runs on the loop's thread.
  using Work = std::function<Then()>;

  RemoteWorker();
  // Runs the work posted and not yet done (each piece is bounded by its remote commands'
  // deadlines) and drops what it hands back: the launcher is done with the results.
  ~RemoteWorker();
  RemoteWorker(const RemoteWorker&) = delete;
  RemoteWorker& operator=(const RemoteWorker&) = delete;

  // Starts the thread at the first post. The thread takes the caller's signal mask: posted from
  // the launcher's thread, it never takes the signals the loop reads through its signalfd.
  // `if_failed` is handed back instead of the work's result if the work throws (said as a
  // warning), so that the loop does not wait for a result that never comes.
  void post(Work work, Then if_failed = {});
  // Readable while results wait for run_results (an eventfd).
  int fd() const { return ready_.get(); }
  // Runs the results handed back so far, in the order their work was posted.
  void run_results();
  // Waits until every piece of work posted has run, and then drops what it handed back.
  void finish();

 private:
  void serve();

  std::mutex mutex_;
  std::condition_variable changed_;
  struct Posted {
    Work work;
    Then if_failed;
  };
  std::deque<Posted> work_;
  std::deque<Then> results_;
  bool busy_ = false;  // a piece of work is running
  bool ending_ = false;
  Fd ready_;
  std::thread thread_;
};

}  // namespace tpf::cli
