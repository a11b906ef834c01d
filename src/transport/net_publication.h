// What a rank of a communicator across hosts publishes in the communicator's store for its network
// peers (UcxNetwork): its UCX worker's address under "net/<rank>" and, with put + signal, its
// registered region under "netput/<rank>", both as lowercase hex. One owner for the encoding, so
// that a test can read what a rank published (which peers it gave slots) as its peers do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tpf::transport {

// The keys, in the communicator's store, of `rank`'s worker address and put publication ("" where
// the rank uses tagged messages only).
std::string net_address_key(int rank);
std::string net_put_key(int rank);

std::string to_hex(const void* data, size_t bytes);
// Empty where `text` is not hex of whole bytes.
std::vector<unsigned char> from_hex(const std::string& text);

// What a rank using put + signal publishes: its region's address, its remote key and where each
// put peer's block is (the peer's rank, the block's offset in the region).
struct PutPublication {
  uint64_t base = 0;
  std::vector<unsigned char> rkey;
  std::vector<std::pair<int32_t, uint64_t>> blocks;
};
std::string encode(const PutPublication& publication);
// nullopt where `text` is not one.
std::optional<PutPublication> decode_put_publication(const std::string& text);

}  // namespace tpf::transport
