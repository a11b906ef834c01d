// Tests of the TCP store (server, client, PrefixStore) and its robustness against bad clients.

#include "tpf/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"
#include "support/raw_store_client.h"
#include "tpf/error.h"

namespace tpf {
namespace {

using namespace std::chrono_literals;
using bootstrap::IoStatus;
namespace proto = bootstrap::store_protocol;

constexpr char kSecret[] = "test-secret";

std::unique_ptr<TcpStoreClient> connect_client(const TcpStoreServer& server,
                                               const std::string& secret = kSecret) {
  return std::make_unique<TcpStoreClient>("127.0.0.1", server.port(), secret, 5s);
}

using testing::RawClient;

// The frame of an add of `delta` to `key`, for a RawClient.
std::string add_frame(const std::string& key, int64_t delta) {
  std::string add;
  proto::put_u8(add, static_cast<uint8_t>(proto::Op::add));
  proto::put_str(add, key);
  proto::put_i64(add, delta);
  return RawClient::frame(add);
}

TEST(StoreTest, SetGetAddCheck) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  ASSERT_NE(server.port(), 0);
  auto client = connect_client(server);
  client->set("k", "v");
  EXPECT_EQ(client->get("k", 1s), "v");
  const std::string binary("a\0b\xff", 4);
  client->set("bin", binary);
  EXPECT_EQ(client->get("bin", 1s), binary);
  client->set("empty", "");
  EXPECT_EQ(client->get("empty", 1s), "");
  EXPECT_TRUE(client->check("k"));
  EXPECT_FALSE(client->check("missing"));
  EXPECT_EQ(client->add("c", 5), 5);
  EXPECT_EQ(client->add("c", -2), 3);
  EXPECT_EQ(client->get("c", 1s), "3");
  client->set("k", "overwritten");
  EXPECT_EQ(client->get("k", 1s), "overwritten");
  // A second client sees the first one's keys.
  auto other = connect_client(server);
  EXPECT_EQ(other->get("c", 1s), "3");
}

TEST(StoreTest, LargeValueRoundTripsAndOversizeIsRefusedByClient) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect_client(server);
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  client->set("big", big);
  EXPECT_EQ(client->get("big", 5s), big);
  const std::string too_big(proto::kMaxFrameBytes, 'x');
  try {
    client->set("too_big", too_big);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  }
  EXPECT_EQ(client->add("still_usable", 1), 1);
}

TEST(StoreTest, AddOnNonIntegerIsAnErrorAndConnectionStaysUsable) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect_client(server);
  client->set("text", "hello");
  try {
    client->add("text", 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("'text'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(client->get("text", 1s), "hello");
}

TEST(StoreTest, PrefixStoreNamespacesKeys) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  std::shared_ptr<Store> inner = connect_client(server);
  PrefixStore a("a", inner);
  PrefixStore b("b", inner);
  a.set("x", "1");
  b.set("x", "2");
  EXPECT_EQ(a.get("x", 1s), "1");
  EXPECT_EQ(b.get("x", 1s), "2");
  EXPECT_EQ(inner->get("a/x", 1s), "1");
  EXPECT_TRUE(a.check("x"));
  EXPECT_FALSE(a.check("y"));
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(inner->add("a/n", 0), 2);
  EXPECT_THROW(PrefixStore("p", nullptr), Error);
}

TEST(StoreTest, BlockingGetIsSatisfiedByAnotherClient) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto setter = connect_client(server);
  std::string got;
  std::string error;
  std::thread getter([&] {
    try {
      auto client = connect_client(server);
      client->add("getter_ready", 1);  // the setter waits for this before setting
      got = client->get("late", 10s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  setter->get("getter_ready", 10s);
  setter->set("late", "value");
  getter.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, "value");
}

TEST(StoreTest, ParkedGetIsAnsweredWhenKeyIsSet) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  // One write holding hello, add(marker) and get(late): the server handles the frames of one read
  // in order without yielding, so once the marker is visible the get is parked.
  RawClient raw(server.port());
  std::string get;
  proto::put_u8(get, static_cast<uint8_t>(proto::Op::get));
  proto::put_str(get, "late");
  proto::put_i64(get, 10000);
  raw.send_bytes(RawClient::hello(kSecret) + add_frame("marker", 1) + RawClient::frame(get));
  auto client = connect_client(server);
  EXPECT_EQ(client->get("marker", 5s), "1");
  client->set("late", "answer");
  ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));  // hello
  ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));  // add
  const auto reply = raw.read_reply();
  ASSERT_TRUE(reply.has_value());
  proto::Reader r(*reply);
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(proto::Status::ok));
  EXPECT_EQ(r.str(), "answer");
}

TEST(StoreTest, GetTimeoutThrowsAndClientStaysUsable) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect_client(server);
  const auto start = std::chrono::steady_clock::now();
  try {
    client->get("never", 100ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find("key 'never' not set within 100 ms"), std::string::npos)
        << e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 90ms);
  EXPECT_LT(waited, 5s);
  client->set("after", "ok");
  EXPECT_EQ(client->get("after", 1s), "ok");
  EXPECT_THROW(client->get("never", 0ms), Error);  // zero timeout: answered at once
  EXPECT_EQ(client->add("n", 1), 1);
}

// get_many asks for every key in one request: the server answers once the last one is set, with
// the values in the order asked, and handles the connection's later frames only then. The
// PrefixStore view asks for its own keys.
TEST(StoreTest, GetManyAnswersInOrderOnceTheLastKeyIsSet) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  RawClient raw(server.port());
  std::string many;
  proto::put_u8(many, static_cast<uint8_t>(proto::Op::get_many));
  proto::put_u32(many, 3);
  for (const char* key : {"a", "b", "c"}) proto::put_str(many, key);
  proto::put_i64(many, 10000);
  // One write: once the marker is visible the get_many is parked (see ParkedGetIsAnswered...).
  raw.send_bytes(RawClient::hello(kSecret) + add_frame("marker", 1) + RawClient::frame(many) +
                 add_frame("after", 1));
  auto client = connect_client(server);
  EXPECT_EQ(client->get("marker", 5s), "1");
  client->set("c", "3");
  client->set("a", "1");
  EXPECT_FALSE(client->check("after")) << "the get_many answered before its last key was set";
  client->set("b", "2");
  EXPECT_EQ(client->get("after", 5s), "1");
  ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));  // hello
  ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));  // add
  const auto reply = raw.read_reply();
  ASSERT_TRUE(reply.has_value());
  proto::Reader r(*reply);
  EXPECT_EQ(r.u8(), static_cast<uint8_t>(proto::Status::ok));
  EXPECT_EQ(r.u32(), 3u);
  EXPECT_EQ(r.str(), "1");
  EXPECT_EQ(r.str(), "2");
  EXPECT_EQ(r.str(), "3");
  EXPECT_TRUE(r.at_end());

  EXPECT_EQ(client->get_many({"b", "c", "a", "b"}, 1s),
            (std::vector<std::string>{"2", "3", "1", "2"}));
  EXPECT_TRUE(client->get_many({}, 1s).empty());
  std::shared_ptr<Store> inner = std::move(client);
  PrefixStore prefixed("p", inner);
  prefixed.set("x", "px");
  inner->set("x", "plain");
  EXPECT_EQ(prefixed.get_many({"x"}, 1s), std::vector<std::string>{"px"});
}

TEST(StoreTest, GetManyTimeoutNamesAMissingKeyAndClientStaysUsable) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect_client(server);
  client->set("here", "1");
  try {
    client->get_many({"here", "missing", "here"}, 100ms);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find("key 'missing' (of 3 asked for together) not set within "
                                         "100 ms"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(client->get_many({"missing"}, 0ms), Error);  // zero timeout: answered at once
  EXPECT_EQ(client->get_many({"here"}, 1s), std::vector<std::string>{"1"});
}

// A store that implements only the four basic calls gets get_many as a get per key, in order.
TEST(StoreTest, TheDefaultGetManyGetsEachKeyInOrder) {
  struct Echo : Store {
    std::vector<std::string> asked;
    void set(const std::string&, const std::string&) override {}
    std::string get(const std::string& key, std::chrono::milliseconds) override {
      asked.push_back(key);
      return key + "!";
    }
    int64_t add(const std::string&, int64_t) override { return 0; }
    bool check(const std::string&) override { return true; }
  } echo;
  EXPECT_EQ(echo.get_many({"x", "y"}, 1s), (std::vector<std::string>{"x!", "y!"}));
  EXPECT_EQ(echo.asked, (std::vector<std::string>{"x", "y"}));
}

TEST(StoreTest, MalformedGetManyIsRefusedAndTheServerGoesOn) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  for (const uint32_t count : {0u, 2u}) {  // none, or more keys than the frame holds
    RawClient raw(server.port());
    std::string many;
    proto::put_u8(many, static_cast<uint8_t>(proto::Op::get_many));
    proto::put_u32(many, count);
    proto::put_str(many, "a");
    proto::put_i64(many, 10);
    raw.send_bytes(RawClient::hello(kSecret) + RawClient::frame(many));
    ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
    const auto reply = raw.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->at(0), static_cast<char>(proto::Status::error));
  }
  auto client = connect_client(server);
  client->set("a", "1");
  EXPECT_EQ(client->get_many({"a"}, 1s), std::vector<std::string>{"1"});
}

TEST(StoreTest, WrongSecretIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  for (const std::string bad : {"wrong", "", "test-secre", "test-secretX"}) {
    try {
      TcpStoreClient client("127.0.0.1", server.port(), bad, 2s);
      FAIL() << "expected refusal for secret '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::bootstrap);
      EXPECT_NE(
          std::string(e.what()).find("refused this client: wrong job secret (TPF_JOB_SECRET)"),
          std::string::npos)
          << e.what();
    }
  }
  auto good = connect_client(server);  // the server is unharmed
  EXPECT_EQ(good->add("x", 1), 1);
}

TEST(StoreTest, ServerWithoutSecretAcceptsAnyClient) {
  TcpStoreServer server("127.0.0.1", 0, "");
  TcpStoreClient a("127.0.0.1", server.port(), "", 2s);
  TcpStoreClient b("127.0.0.1", server.port(), "anything", 2s);
  a.set("k", "v");
  EXPECT_EQ(b.get("k", 1s), "v");
}

TEST(StoreTest, SixtyFourConcurrentClientsAddCorrectly) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  constexpr int kClients = 64;
  constexpr int kAddsEach = 50;
  std::vector<std::vector<int64_t>> seen(kClients);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto client = connect_client(server);
        for (int i = 0; i < kAddsEach; ++i) seen[t].push_back(client->add("counter", 1));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  // Atomic adds hand every caller a distinct value, and together they cover 1..N exactly.
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t{kClients * kAddsEach});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAddsEach);
  auto client = connect_client(server);
  EXPECT_EQ(client->add("counter", 0), kClients * kAddsEach);
}

TEST(StoreTest, OneClientSharedByThreads) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect_client(server);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        client->add("shared", 1);
        client->set("t" + std::to_string(t), std::to_string(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(client->add("shared", 0), 400);
  EXPECT_EQ(client->get("t3", 1s), "49");
}

TEST(StoreTest, OversizeFrameIsRefusedWithoutCrash) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  {
    // Before the hello: a huge length prefix.
    RawClient raw(server.port());
    raw.send_bytes(std::string("\xff\xff\xff\xff", 4));
    const auto reply = raw.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->at(0), static_cast<char>(proto::Status::error));
    EXPECT_NE(reply->find("exceeds the limit"), std::string::npos);
    EXPECT_TRUE(raw.closed_by_server());
  }
  {
    // After the hello: one byte over 64 MiB is refused; the limit itself would be accepted.
    RawClient raw(server.port());
    std::string header;
    proto::put_u32(header, static_cast<uint32_t>(proto::kMaxFrameBytes + 1));
    raw.send_bytes(RawClient::hello(kSecret) + header);
    ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
    const auto reply = raw.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->at(0), static_cast<char>(proto::Status::error));
    EXPECT_TRUE(raw.closed_by_server());
  }
  auto client = connect_client(server);
  EXPECT_EQ(client->add("alive", 1), 1);
}

TEST(StoreTest, GarbageAndAbruptDisconnectsDoNotHurtTheServer) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  auto client = connect_client(server);
  client->set("k", "v");
  {
    RawClient raw(server.port());  // not a hello at all
    raw.send_bytes(RawClient::frame("garbage that is not a request"));
    const auto reply = raw.read_reply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->at(0), static_cast<char>(proto::Status::error));
    EXPECT_TRUE(raw.closed_by_server());
  }
  {
    RawClient raw(server.port());  // a valid hello, then an unknown op and a truncated key
    std::string bad;
    proto::put_u8(bad, 99);
    proto::put_str(bad, "k");
    std::string truncated;
    proto::put_u8(truncated, static_cast<uint8_t>(proto::Op::set));
    proto::put_u32(truncated, 1000);  // key length beyond the frame
    raw.send_bytes(RawClient::hello(kSecret) + RawClient::frame(bad));
    ASSERT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
    EXPECT_EQ(raw.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::error));
    EXPECT_TRUE(raw.closed_by_server());
    RawClient raw2(server.port());
    raw2.send_bytes(RawClient::hello(kSecret) + RawClient::frame(truncated));
    ASSERT_EQ(raw2.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::ok));
    EXPECT_EQ(raw2.read_reply().value_or("?").at(0), static_cast<char>(proto::Status::error));
  }
  for (int i = 0; i < 20; ++i) {
    RawClient raw(server.port());  // half a frame, then gone
    raw.send_bytes(std::string("\x10\x00", 2));
  }
  {
    RawClient raw(server.port());  // parks a get, then disappears
    std::string get;
    proto::put_u8(get, static_cast<uint8_t>(proto::Op::get));
    proto::put_str(get, "never_set");
    proto::put_i64(get, 60000);
    raw.send_bytes(RawClient::hello(kSecret) + RawClient::frame(get));
  }
  EXPECT_EQ(client->get("k", 1s), "v");
  client->set("never_set", "now");  // wakes nobody: the parked client is gone
  EXPECT_EQ(client->add("alive", 1), 1);
}

TEST(StoreTest, DestructorIsPromptWithClientsConnected) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  std::vector<std::unique_ptr<TcpStoreClient>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(connect_client(*server));
  clients[0]->set("k", "v");
  // One client parked in a long get while the server goes away.
  std::atomic<bool> parked_failed{false};
  std::thread waiter([&] {
    try {
      clients[1]->add("parking", 1);
      clients[1]->get("never", 60s);
    } catch (const Error& e) {
      parked_failed = e.code() == ErrorCode::bootstrap;
    }
  });
  clients[2]->get("parking", 5s);
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  waiter.join();
  EXPECT_TRUE(parked_failed.load());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  try {
    clients[3]->set("k", "v");
    FAIL() << "expected an error once the server is gone";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::bootstrap);
  }
}

TEST(StoreTest, ConnectToClosedPortFailsWithinTimeout) {
  uint16_t port;
  {
    TcpStoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStoreClient client("127.0.0.1", port, kSecret, 300ms);
    FAIL() << "expected a connect failure";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::bootstrap);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("failed within"), std::string::npos) << msg;
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 3s);
}

TEST(StoreTest, ClientRetriesUntilServerStarts) {
  uint16_t port;
  {
    TcpStoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  std::string error;
  std::string got;
  std::thread early([&] {
    try {
      TcpStoreClient client("127.0.0.1", port, kSecret, 10s);
      got = client.get("k", 10s);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  TcpStoreServer server("127.0.0.1", port, kSecret);
  TcpStoreClient setter("127.0.0.1", port, kSecret, 5s);
  setter.set("k", "v");
  early.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(got, "v");
}

TEST(StoreTest, ListenOnTakenPortIsAResourceError) {
  TcpStoreServer first("127.0.0.1", 0, "");
  try {
    TcpStoreServer second("127.0.0.1", first.port(), "");
    FAIL() << "expected EADDRINUSE";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::resource);
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.port())), std::string::npos);
  }
}

}  // namespace
}  // namespace tpf
