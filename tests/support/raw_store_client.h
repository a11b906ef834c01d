// A hand-driven connection to a TcpStoreServer, for tests that send what a well-behaved client
// never would (strangers, truncated frames, ranks that vanish without a goodbye).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "bootstrap/socket.h"
#include "bootstrap/store_protocol.h"

namespace tpf::testing {

struct RawClient {
  static bootstrap::Deadline soon() { return bootstrap::deadline_after(std::chrono::seconds(5)); }

  bootstrap::Socket socket;
  explicit RawClient(uint16_t port) : socket(bootstrap::connect_tcp("127.0.0.1", port, soon())) {}

  void send_bytes(const std::string& bytes) {
    ASSERT_EQ(bootstrap::send_all(socket.fd(), bytes.data(), bytes.size(), soon()),
              bootstrap::IoStatus::ok);
  }
  static std::string frame(const std::string& payload) {
    namespace proto = bootstrap::store_protocol;
    std::string out;
    const size_t at = proto::begin_frame(out);
    out += payload;
    proto::finish_frame(out, at);
    return out;
  }
  // job_rank -1: not a rank. pid: what the server will name if this "rank" dies.
  static std::string hello(const std::string& secret, int job_rank = -1, int64_t pid = 1) {
    namespace proto = bootstrap::store_protocol;
    std::string p;
    proto::put_u8(p, static_cast<uint8_t>(proto::Op::hello));
    proto::put_u32(p, proto::kProtocolMagic);
    proto::put_str(p, secret);
    proto::put_u32(p, static_cast<uint32_t>(job_rank));
    proto::put_i64(p, pid);
    return frame(p);
  }
  // Returns the next reply's payload, or nullopt if the server closed the connection.
  std::optional<std::string> read_reply() {
    char header[4];
    if (bootstrap::recv_all(socket.fd(), header, 4, soon()) != bootstrap::IoStatus::ok) {
      return std::nullopt;
    }
    std::string payload(bootstrap::store_protocol::decode_u32(header), '\0');
    if (bootstrap::recv_all(socket.fd(), payload.data(), payload.size(), soon()) !=
        bootstrap::IoStatus::ok) {
      return std::nullopt;
    }
    return payload;
  }
  // True once the server has closed its end (bounded wait).
  bool closed_by_server() {
    char byte;
    for (;;) {
      const bootstrap::IoStatus st = bootstrap::recv_all(socket.fd(), &byte, 1, soon());
      if (st == bootstrap::IoStatus::closed) return true;
      if (st == bootstrap::IoStatus::timeout) return false;
    }
  }
};

}  // namespace tpf::testing
