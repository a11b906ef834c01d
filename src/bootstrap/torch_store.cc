// TorchStoreClient: the three TCPStore queries the rendezvous needs (set, wait, get), each bounded
// by the caller's deadline.

#include "bootstrap/torch_store.h"

#include <string_view>
#include <utility>

#include "bootstrap/store_protocol.h"
#include "tpf/error.h"

namespace tpf::bootstrap {
namespace {

// torch 1.13's QueryType values (c10d TCPStore), of which the rendezvous uses three.
enum class TorchQuery : uint8_t { set = 0, get = 2, wait = 5 };
constexpr uint8_t kStopWaiting = 0;  // WaitResponseType::STOP_WAITING
// A port announced by rank 0 is a few bytes; anything longer is not the value we set.
constexpr uint64_t kMaxValueBytes = 1 << 16;

// torch's lengths are 8 little-endian bytes: the encoding of the tpf store's int64 fields.
void put_length(std::string& out, size_t n) {
  store_protocol::put_i64(out, static_cast<int64_t>(n));
}
void put_string(std::string& out, const std::string& s) {
  put_length(out, s.size());
  out += s;
}

}  // namespace

TorchStoreClient::TorchStoreClient(std::string host, uint16_t port, Deadline deadline)
    : host_(std::move(host)), port_(port) {
  try {
    socket_ = connect_tcp(host_, port_, deadline);
  } catch (const Error& e) {
    throw Error(e.code(), where() + ": " + e.what());
  }
}

std::string TorchStoreClient::where() const {
  return "torchrun's agent store at " + host_port(host_, port_) + " (MASTER_ADDR:MASTER_PORT)";
}

void TorchStoreClient::send_or_throw(const std::string& bytes, Deadline deadline,
                                     const std::string& what) {
  const IoStatus st = send_all(socket_.fd(), bytes.data(), bytes.size(), deadline);
  if (st == IoStatus::ok) return;
  throw Error(st == IoStatus::timeout ? ErrorCode::timeout : ErrorCode::bootstrap,
              what + ": " + where() +
                  (st == IoStatus::timeout ? " did not take the request in time"
                                           : " closed the connection"));
}

void TorchStoreClient::recv_or_throw(void* data, size_t n, Deadline deadline,
                                     const std::string& what) {
  const IoStatus st = recv_all(socket_.fd(), data, n, deadline);
  if (st == IoStatus::ok) return;
  throw Error(st == IoStatus::timeout ? ErrorCode::timeout : ErrorCode::bootstrap,
              what + ": " + where() +
                  (st == IoStatus::timeout ? " did not answer in time (has rank 0 started?)"
                                           : " closed the connection (is it torch's TCPStore?)"));
}

void TorchStoreClient::set(const std::string& key, const std::string& value, Deadline deadline) {
  std::string query(1, static_cast<char>(TorchQuery::set));
  put_string(query, key);
  put_string(query, value);
  send_or_throw(query, deadline, "set '" + key + "'");
}

std::string TorchStoreClient::get(const std::string& key, Deadline deadline) {
  const std::string what = "wait for '" + key + "'";
  std::string wait(1, static_cast<char>(TorchQuery::wait));
  put_length(wait, 1);
  put_string(wait, key);
  send_or_throw(wait, deadline, what);
  uint8_t answer = 0xff;
  recv_or_throw(&answer, 1, deadline, what);
  if (answer != kStopWaiting) {
    throw Error(ErrorCode::bootstrap, what + ": " + where() + " answered " +
                                          std::to_string(answer) + " instead of 'stop waiting'");
  }
  std::string get(1, static_cast<char>(TorchQuery::get));
  put_string(get, key);
  send_or_throw(get, deadline, "get '" + key + "'");
  char length[8];
  recv_or_throw(length, sizeof(length), deadline, "get '" + key + "'");
  const auto n = static_cast<uint64_t>(
      *store_protocol::Reader(std::string_view(length, sizeof(length))).i64());
  if (n > kMaxValueBytes) {
    throw Error(ErrorCode::bootstrap, "get '" + key + "': " + where() + " announced a value of " +
                                          std::to_string(n) + " bytes");
  }
  std::string value(n, '\0');
  recv_or_throw(value.data(), n, deadline, "get '" + key + "'");
  return value;
}

}  // namespace tpf::bootstrap
