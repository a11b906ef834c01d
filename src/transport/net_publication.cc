#include "transport/net_publication.h"

#include <cstring>

namespace tpf::transport {

std::string net_address_key(int rank) { return "net/" + std::to_string(rank); }
std::string net_put_key(int rank) { return "netput/" + std::to_string(rank); }

std::string to_hex(const void* data, size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (size_t i = 0; i < bytes; ++i) {
    const auto byte = static_cast<const unsigned char*>(data)[i];
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

std::vector<unsigned char> from_hex(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::vector<unsigned char> out;
  if (text.size() % 2 != 0) return {};
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = value(text[i]), lo = value(text[i + 1]);
    if (hi < 0 || lo < 0) return {};
    out.push_back(static_cast<unsigned char>(hi << 4 | lo));
  }
  return out;
}

// Little-endian fields: base (8), key length (4), key, peers (4), then per peer its rank (4) and
// block offset (8).
std::string encode(const PutPublication& p) {
  std::string out;
  auto put = [&](const void* data, size_t bytes) {
    out.append(static_cast<const char*>(data), bytes);
  };
  const auto key_bytes = static_cast<uint32_t>(p.rkey.size());
  const auto peers = static_cast<uint32_t>(p.blocks.size());
  put(&p.base, 8);
  put(&key_bytes, 4);
  put(p.rkey.data(), p.rkey.size());
  put(&peers, 4);
  for (const auto& [rank, offset] : p.blocks) {
    put(&rank, 4);
    put(&offset, 8);
  }
  return to_hex(out.data(), out.size());
}

std::optional<PutPublication> decode_put_publication(const std::string& text) {
  const std::vector<unsigned char> bytes = from_hex(text);
  size_t at = 0;
  auto take = [&](void* into, size_t n) {
    if (at + n > bytes.size()) return false;
    std::memcpy(into, bytes.data() + at, n);
    at += n;
    return true;
  };
  PutPublication p;
  uint32_t key_bytes = 0, peers = 0;
  if (!take(&p.base, 8) || !take(&key_bytes, 4) || key_bytes > bytes.size()) return std::nullopt;
  p.rkey.resize(key_bytes);
  if (!take(p.rkey.data(), key_bytes) || !take(&peers, 4) || peers > bytes.size())
    return std::nullopt;
  for (uint32_t i = 0; i < peers; ++i) {
    int32_t rank = 0;
    uint64_t offset = 0;
    if (!take(&rank, 4) || !take(&offset, 8)) return std::nullopt;
    p.blocks.emplace_back(rank, offset);
  }
  if (at != bytes.size()) return std::nullopt;
  return p;
}

}  // namespace tpf::transport
