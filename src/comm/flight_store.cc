#include "comm/flight_store.h"

#include <chrono>
#include <exception>

#include "base/env_config.h"
#include "tpf/launch_env.h"
#include "tpf/store.h"

namespace tpf::detail {
namespace {

// A dump is written while the job fails: the launcher's store should answer at once, and a
// failing rank must not wait long for one that does not.
constexpr std::chrono::milliseconds kConnectTimeout{5000};

}  // namespace

std::string flight_store_count_key(int rank) {
  return "tpf-flight/rank" + std::to_string(rank) + "/texts";
}

std::string flight_store_text_key(int rank, int64_t n) {
  return "tpf-flight/rank" + std::to_string(rank) + "/" + std::to_string(n);
}

std::string flight_store_notice_key(int64_t m) { return "tpf-flight/notice/" + std::to_string(m); }

bool flight_dumps_go_to_store() {
  return base::env_request("TPF_FLIGHT_RECORDER_STORE", "dumps go to the job's store");
}

bool append_flight_text_to_store(const std::string& text, std::string& why) noexcept {
  try {
    const LaunchEnv env = detect_launch_env();
    if (env.launcher != "tpf") {
      why =
          "TPF_FLIGHT_RECORDER_STORE=1 needs a job started by tpf run (launcher: " + env.launcher +
          ")";
      return false;
    }
    TcpStoreClient store(env.store_host, env.store_port, env.secret, kConnectTimeout);
    const int64_t n = store.add(flight_store_count_key(env.rank), 1);
    store.set(flight_store_text_key(env.rank, n), text);
    const int64_t m = store.add(kFlightStoreTotalKey, 1);  // after the text, which is then there
    store.set(flight_store_notice_key(m), std::to_string(env.rank));
    return true;
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "unknown error";
  }
  return false;
}

}  // namespace tpf::detail
