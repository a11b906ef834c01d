// The store watch's connection (src/bootstrap/store_watch.h) fails as a store client's does, and
// starts no watch then: the cases that end in a watch end the process, so they run in forked
// children (RendezvousTest.ARankAskedToEndWithItsStoreEndsOnceTheStoresProcessHasExited and the
// launcher's tests).
#include "bootstrap/store_watch.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "bootstrap/socket.h"
#include "tpf/error.h"
#include "tpf/store.h"

namespace tpf::bootstrap {
namespace {

using namespace std::chrono_literals;

// The message and code of the Error `body` throws ("" if it throws none).
std::pair<ErrorCode, std::string> error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::internal, ""};
}

TEST(StoreWatch, AWrongSecretIsRefusedNamingIt) {
  TcpStoreServer server("127.0.0.1", 0, "the-right-secret");
  const auto [code, what] = error_of([&] {
    end_process_when_store_closes("127.0.0.1", server.port(), "a-wrong-secret", 3,
                                  deadline_after(5s));
  });
  EXPECT_EQ(code, ErrorCode::bootstrap) << what;
  EXPECT_NE(what.find("refused the hello of this rank's watch (wrong job secret, "
                      "TPF_JOB_SECRET)"),
            std::string::npos)
      << what;
}

// A service that is no tpfabric store: a reply longer than a hello's answer (1 MiB) is refused,
// not read as an ok.
TEST(StoreWatch, AReplyThatNoStoreWouldSendIsRefused) {
  Listener listener = listen_tcp("127.0.0.1", 0);
  std::thread service([&] {
    pollfd entry{listener.socket.fd(), POLLIN, 0};
    if (::poll(&entry, 1, 10000) != 1) return;
    Socket client = accept_tcp(listener.socket);
    const char header[4] = {0, 0, 0x10, 0};  // little-endian 1 MiB
    if (client.valid()) (void)!::send(client.fd(), header, sizeof header, MSG_NOSIGNAL);
    pollfd closed{client.fd(), POLLRDHUP, 0};  // until the watch gives up
    (void)::poll(&closed, 1, 10000);
  });
  const auto [code, what] = error_of([&] {
    end_process_when_store_closes("127.0.0.1", listener.port, "any-secret", 3,
                                  deadline_after(5s));
  });
  service.join();
  EXPECT_EQ(code, ErrorCode::bootstrap) << what;
  EXPECT_NE(what.find("sent a malformed reply (1048576 bytes) to this rank's watch; is it a tpfabric "
                      "store?"),
            std::string::npos)
      << what;
}

}  // namespace
}  // namespace tpf::bootstrap
