// The collective vocabulary: one table of the collectives tpfabric names anywhere — the fabric's
// validation, `tpf bench` and its peers, `tpf plan collective`, `tpf demo`. Each row holds the
// canonical name (nccl-tests' spellings, "allreduce", "sendrecv", are accepted too), who holds
// data, whether an in-place form exists, and the bus-bandwidth factor. The fabric's OpKind
// (op_desc.h) is the finer call-level kind (a send and a recv are two calls of send_recv).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tpf::coll {

enum class Collective : uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  gather,
  scatter,
  send_recv,  // as benchmarked: a ring shift, every rank sends to rank+1, receives from rank-1
  barrier,
};

// busbw = algbw x factor, as nccl-tests defines it (doc/PERFORMANCE.md there): the share of the
// bytes that crosses a link in the best algorithm, so that busbw compares with link bandwidth.
enum class BusFactor : uint8_t {
  none,         // barrier: no data
  one,          // broadcast, reduce, send_recv
  share,        // (n-1)/n: all_gather, reduce_scatter, all_to_all, gather, scatter
  twice_share,  // 2(n-1)/n: all_reduce
};

struct CollectiveInfo {
  Collective id;
  const char* name;   // canonical: snake_case, as the C++ API names the call
  bool reduces;       // takes a ReduceOp
  bool rooted;        // one rank is the source or the destination
  bool has_in_place;  // send == recv is allowed
  BusFactor bus;
};

std::span<const CollectiveInfo> all_collectives() noexcept;
const CollectiveInfo& collective_info(Collective c) noexcept;
const char* collective_name(Collective c) noexcept;

// The canonical name, with or without its underscores ("all_reduce", "allreduce", "sendrecv");
// nullopt otherwise.
std::optional<Collective> parse_collective(std::string_view spelling) noexcept;
// "all_reduce|all_gather|...|barrier" for usage and error messages.
std::string collective_choices();

bool collective_reduces(Collective c) noexcept;
bool collective_has_root(Collective c) noexcept;
bool collective_has_in_place(Collective c) noexcept;

// The factor for `nranks` ranks: 0 for fewer than 2 ranks where bytes only cross links between
// ranks (nccl-tests: 2(n-1)/n is 0 at n = 1), 1 for the one-to-one kinds, 0 for a barrier.
double bus_bandwidth_factor(Collective c, int nranks) noexcept;

}  // namespace tpf::coll
