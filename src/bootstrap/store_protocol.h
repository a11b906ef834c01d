// Wire format of the TCP store. Every message is a frame: a 4-byte little-endian payload length,
// then the payload. Integers are little-endian so that ranks on different hosts agree; strings are
// a 4-byte length then the bytes.
//
//   request  = u8 op, fields...          response = u8 status, fields...
//   hello    : u32 kProtocolMagic, str secret, i32 job_rank, i64 pid
//                                  -> ok(i32 host_rank, i64 host_pid) | auth_failed(str message)
//   set      : str key, str value                  -> ok
//   get      : str key, i64 timeout_ms             -> ok(str value) | not_found (at the deadline)
//                                                     | peer_died(str message)
//   add      : str key, i64 delta                  -> ok(i64 new value) | error(str message)
//   check    : str key                             -> ok(u8 exists)
//   get_many : u32 count, str key x count, i64 timeout_ms
//                                  -> ok(u32 count, str value x count) once every key exists
//                                     | not_found(str key: one still missing at the deadline)
//                                     | peer_died(str message) | error(str message)
//   goodbye  : (nothing)                           -> (no reply; the server closes)
//   lost     : i32 job_rank, i32 by_job_rank, str reason
//                                                  -> ok | error(str message)
//   get_many_from : u32 n, i32 job_rank x n, then get_many's fields -> get_many's answers
//   dead     : (nothing)                           -> ok(u32 n, i32 job_rank x n: ascending)
//   beat     : i64 silence_limit_ms                -> (no reply)
//
// The hello must be the first frame; a malformed frame is answered with error(str message) and the
// connection is closed. Frames above kMaxFrameBytes (kMaxHelloBytes before the hello) are refused
// the same way.
//
// job_rank is the client's rank in the job, or -1 for a client that is not a rank (a launcher, a
// tool). A connection of a rank that closes without a goodbye means that rank's process died:
// from then on every get that waits (or would wait) for a missing key is answered peer_died,
// naming that rank, instead of waiting for its deadline. host_rank names the job rank whose
// process serves the store (-1: a launcher), so that a client can say who died when the
// connection drops. A lost report says the same of a rank whose connection the server cannot see
// fail (a stopped process, a host cut off): by_job_rank found it so (-1: not a rank), and reason
// says how; the server answers the waits as for a death, once per rank. A get_many_from waits on
// the keys only `job_rank x n` set (a communicator's setup): a death of another rank does not end
// it (get and get_many wait on any rank). dead lists the ranks noted dead or lost so far. A beat
// says the rank is alive and asks the server to take it for lost, as a lost report would, once no
// beat has come for silence_limit_ms (0: no longer judged); beats come on a connection of their
// own (Store::keep_alive), never parked in a get, so the server reads each as it comes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace tpf::bootstrap::store_protocol {

constexpr uint32_t kProtocolMagic = 0x32465054;  // "TPF2"
constexpr size_t kFrameHeaderBytes = 4;
constexpr size_t kMaxFrameBytes = size_t{64} << 20;
// The hello is small; before it a stranger can make the server buffer at most this much.
constexpr size_t kMaxHelloBytes = 4096;
// Longest secret a client may present (leaves room for the rest of the hello).
constexpr size_t kMaxSecretBytes = 1024;

enum class Op : uint8_t {
  hello = 1,
  set = 2,
  get = 3,
  add = 4,
  check = 5,
  goodbye = 6,
  get_many = 7,
  lost = 8,
  get_many_from = 9,
  dead = 10,
  beat = 11
};
enum class Status : uint8_t { ok = 0, not_found = 1, error = 2, auth_failed = 3, peer_died = 4 };

inline void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void put_i64(std::string& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
inline void put_u8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void put_str(std::string& out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

inline uint32_t decode_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// Starts a frame in `out`; finish_frame() fills in the length once the payload is appended.
inline size_t begin_frame(std::string& out) {
  const size_t at = out.size();
  out.append(kFrameHeaderBytes, '\0');
  return at;
}
inline void finish_frame(std::string& out, size_t at) {
  const auto len = static_cast<uint32_t>(out.size() - at - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>((len >> (8 * i)) & 0xff);
}

// A client's hello (the first frame's payload): see the table above.
inline std::string hello_payload(std::string_view secret, int job_rank, int64_t pid) {
  std::string hello;
  put_u8(hello, static_cast<uint8_t>(Op::hello));
  put_u32(hello, kProtocolMagic);
  put_str(hello, secret);
  put_u32(hello, static_cast<uint32_t>(job_rank));
  put_i64(hello, pid);
  return hello;
}

// Reads fields from one payload; every getter returns nullopt instead of reading past the end,
// so a truncated or hostile frame is detected, never trusted.
class Reader {
 public:
  explicit Reader(std::string_view payload) : data_(payload) {}

  std::optional<uint8_t> u8() {
    if (data_.size() - pos_ < 1) return std::nullopt;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  std::optional<uint32_t> u32() {
    if (data_.size() - pos_ < 4) return std::nullopt;
    const uint32_t v = decode_u32(data_.data() + pos_);
    pos_ += 4;
    return v;
  }
  std::optional<int64_t> i64() {
    if (data_.size() - pos_ < 8) return std::nullopt;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) {
      u |= uint64_t{static_cast<unsigned char>(data_[pos_ + i])} << (8 * i);
    }
    pos_ += 8;
    return static_cast<int64_t>(u);
  }
  std::optional<std::string> str() {
    const auto len = u32();
    if (!len || data_.size() - pos_ < *len) return std::nullopt;
    std::string s(data_.substr(pos_, *len));
    pos_ += *len;
    return s;
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace tpf::bootstrap::store_protocol
