#include "coll/network_cost.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "tpf/error.h"

namespace tpf::coll {

LinkClass NetworkLinkCost::link_class() const {
  LinkClass link;
  link.name = "network";
  link.alpha_us = step_us;
  link.port_gbps = link_gbps;
  link.stage_gbps = 0;  // sends read and receives write the buffers themselves (or scratch)
  link.reduce_gbps = reduce_gbps;
  return link;
}

const char* network_algorithm_name(NetworkAlgorithm algorithm) noexcept {
  switch (algorithm) {
    case NetworkAlgorithm::one_shot: return "one_shot";
    case NetworkAlgorithm::pipelined: return "pipelined";
    case NetworkAlgorithm::per_rail: return "per_rail";
    case NetworkAlgorithm::tree: return "tree";
    case NetworkAlgorithm::halving_doubling: return "halving_doubling";
  }
  return "?";
}

std::optional<NetworkAlgorithm> parse_network_algorithm(std::string_view name) noexcept {
  for (NetworkAlgorithm a :
       {NetworkAlgorithm::one_shot, NetworkAlgorithm::pipelined, NetworkAlgorithm::per_rail,
        NetworkAlgorithm::tree, NetworkAlgorithm::halving_doubling}) {
    if (name == network_algorithm_name(a)) return a;
  }
  return std::nullopt;
}

HalvingDoubling::HalvingDoubling(int hosts)
    : hosts(hosts), powered(static_cast<int>(std::bit_floor(static_cast<unsigned>(hosts)))) {}

int HalvingDoubling::rounds() const { return std::countr_zero(static_cast<unsigned>(powered)); }

int HalvingDoubling::position_of(int host) const {
  if (host >= 2 * pairs()) return host - pairs();
  return host % 2 == 0 ? host / 2 : -1;
}

int HalvingDoubling::host_at(int position) const {
  return position < pairs() ? 2 * position : position + pairs();
}

size_t network_packed_bytes(Collective op) noexcept {
  return collective_has_root(op) ? kNetworkRootedPackedBytes : kNetworkPackedBytes;
}

bool has_network_choice(Collective op) noexcept {
  return op == Collective::all_reduce || op == Collective::broadcast;
}

bool has_per_rail_form(Collective op) noexcept {
  return has_network_choice(op) || op == Collective::reduce || op == Collective::all_gather ||
         op == Collective::reduce_scatter || op == Collective::all_to_all ||
         op == Collective::gather || op == Collective::scatter;
}

size_t all_reduce_min_slice_bytes(const NetworkLinkCost& cost) {
  constexpr double kBusyRounds = 4;
  constexpr size_t kSmallest = size_t{128} << 10;  // the smallest measured (docs/fabric.md)
  const double busy = kBusyRounds * cost.step_us * cost.link_gbps * 1e3;  // bytes
  return std::clamp(static_cast<size_t>(busy), kSmallest, kNetworkMinChunkBytes);
}

size_t all_reduce_segments(size_t bytes, int hosts, size_t min_slice_bytes) {
  return std::clamp<size_t>(bytes / (min_slice_bytes * static_cast<size_t>(hosts)), 1,
                            kNetworkMaxChunks);
}

namespace {

// Elements per chunk of at least `min_bytes`, and at most kNetworkMaxChunks chunks (their tags).
size_t chunk_elems_of_at_least(size_t count, size_t elem_bytes, size_t min_bytes) {
  return std::max(
      {min_bytes / elem_bytes, (count + kNetworkMaxChunks - 1) / kNetworkMaxChunks, size_t{1}});
}

}  // namespace

size_t network_chunk_elems(size_t count, size_t elem_bytes) {
  return chunk_elems_of_at_least(count, elem_bytes, kNetworkMinChunkBytes);
}

size_t chunks_of_size(size_t count, size_t per_chunk) {
  return count == 0 ? 1 : (count + per_chunk - 1) / per_chunk;
}

size_t network_chunk_count(size_t count, size_t elem_bytes) {
  return chunks_of_size(count, network_chunk_elems(count, elem_bytes));
}

ChainCut chain_cut(const NetworkLinkCost& cost) {
  return {cost.step_us + cost.message_us, cost.link_gbps};
}

size_t chain_chunk_elems(size_t count, size_t elem_bytes, int hosts, ChainCut cut) {
  if (cut.round_us <= 0 || hosts <= 2) return network_chunk_elems(count, elem_bytes);
  const double bytes = static_cast<double>(count * elem_bytes);
  const double chunks = std::sqrt((hosts - 2) * bytes / (cut.link_gbps * 1e3 * cut.round_us));
  const double chunk_bytes =
      std::clamp(bytes / std::max(chunks, 1.0), static_cast<double>(kChainMinChunkBytes),
                 static_cast<double>(kNetworkMinChunkBytes));
  return chunk_elems_of_at_least(count, elem_bytes, static_cast<size_t>(chunk_bytes));
}

int gather_rounds(int hosts) {
  int rounds = 0;
  for (int reach = 1; reach < hosts; reach *= 2) ++rounds;
  return rounds;
}

namespace {

// The leaders' exchange of something with every other leader, directly or in rounds, counted as
// leaders_gather_in_rounds compares them: a step a round, message_us for each message a leader
// sends or receives.
double gather_direct_us(int hosts, const NetworkLinkCost& cost) {
  return cost.step_us + 2.0 * (hosts - 1) * cost.message_us;
}
double gather_in_rounds_us(int hosts, const NetworkLinkCost& cost) {
  return gather_rounds(hosts) * (cost.step_us + 2.0 * cost.message_us);
}

// The one the leaders run (gather_packed in coll/across_hosts.cc).
double leaders_gather_us(int hosts, const NetworkLinkCost& cost) {
  return leaders_gather_in_rounds(hosts, cost) ? gather_in_rounds_us(hosts, cost)
                                               : gather_direct_us(hosts, cost);
}

// A small rooted collective's messages between the root's leader and the others, as
// rooted_in_tree compares them: the root's H - 1 in one step, or a step and a message a hop of
// the binomial tree.
double rooted_direct_us(int hosts, const NetworkLinkCost& cost) {
  return cost.step_us + (hosts - 1) * cost.message_us;
}
double rooted_tree_us(int hosts, const NetworkLinkCost& cost) {
  return gather_rounds(hosts) * (cost.step_us + cost.message_us);
}

// `bytes` through one host's link.
double link_us(size_t bytes, const NetworkLinkCost& cost) {
  return static_cast<double>(bytes) / (cost.link_gbps * 1e3);
}

}  // namespace

size_t halving_doubling_messages(size_t bytes, int hosts) {
  const HalvingDoubling shape(hosts);
  size_t messages = 0;
  size_t range = bytes;
  for (int k = 0; k < shape.rounds(); ++k) {
    messages += 4 * network_chunk_count(range - range / 2, 1);  // the larger half, both phases
    range -= range / 2;
  }
  if (shape.pairs() > 0) messages += 2 * network_chunk_count(bytes, 1);
  return messages;
}

bool halving_doubling_messages_are_small(size_t bytes, int hosts) {
  if (hosts < 3) return false;
  const size_t largest = HalvingDoubling(hosts).pairs() > 0 ? bytes : bytes - bytes / 2;
  return largest <= kNetworkPackedBytes;
}

bool leaders_gather_in_rounds(int hosts, const NetworkLinkCost& cost) {
  if (hosts < 3) return false;  // one round either way, or nobody to exchange with
  return gather_in_rounds_us(hosts, cost) < gather_direct_us(hosts, cost);
}

size_t exchange_round_blocks(int hosts) {
  size_t blocks = 0;
  for (int distance = 1; distance < hosts; ++distance) blocks += std::popcount(unsigned(distance));
  return blocks;
}

bool leaders_exchange_in_rounds(int hosts, size_t pair_bytes, const NetworkLinkCost& cost) {
  if (hosts < 3) return false;  // one round either way, or nobody to exchange with
  const double block_us = link_us(pair_bytes, cost);
  const double direct_us = gather_direct_us(hosts, cost) + (hosts - 1) * block_us;
  const double rounds_us = gather_in_rounds_us(hosts, cost) +
                           static_cast<double>(exchange_round_blocks(hosts)) * block_us;
  return rounds_us < direct_us;
}

bool rooted_in_tree(int hosts, const NetworkLinkCost& cost) {
  if (hosts < 3) return false;  // the tree is the root's one message, or nobody to send to
  return rooted_tree_us(hosts, cost) < rooted_direct_us(hosts, cost);
}

bool reduce_in_one_round(size_t bytes, int hosts, const NetworkLinkCost& cost) {
  if (bytes * static_cast<size_t>(hosts - 1) > kNetworkRootedPackedBytes) return false;
  if (hosts <= 2) return true;  // the root's link takes the other host's data once either way
  const double direct_us = rooted_direct_us(hosts, cost);
  const double data_us = link_us(bytes, cost);
  const double one_round_us =
      std::min(direct_us, rooted_tree_us(hosts, cost)) + (hosts - 1) * data_us;
  const double slices_us = leaders_gather_us(hosts, cost) + 2 * direct_us + data_us;
  return one_round_us <= slices_us;
}

bool all_gather_in_ring(size_t host_bytes, int hosts, const NetworkLinkCost& cost) {
  if (hosts <= 2) return true;
  const double transfer_us = (hosts - 1) * static_cast<double>(host_bytes) / (cost.link_gbps * 1e3);
  return (hosts - 2) * cost.step_us <= kRingRoundsShare * transfer_us;
}

std::vector<size_t> ring_chunk_elems(const std::vector<size_t>& host_counts, size_t elem_bytes,
                                     size_t max_chunks) {
  std::vector<size_t> per(host_counts.size());
  size_t chunks = 0, elements = 0;
  for (size_t h = 0; h < host_counts.size(); ++h) {
    per[h] = network_chunk_elems(host_counts[h], elem_bytes);
    chunks += chunks_of_size(host_counts[h], per[h]);
    elements += host_counts[h];
  }
  const size_t n = host_counts.size();
  if (chunks <= max_chunks || n > max_chunks / 2) return per;
  // The sum over hosts of ceil(count / at_least) is at most elements / at_least + n <= max_chunks.
  const size_t at_least = (elements + max_chunks - n - 1) / (max_chunks - n);
  for (size_t& p : per) p = std::max(p, at_least);
  return per;
}

StepTraffic network_traffic(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                            size_t min_slice_bytes, ChainCut chain) {
  if (!has_network_choice(op) || hosts < 2 || algorithm == NetworkAlgorithm::per_rail ||
      (algorithm == NetworkAlgorithm::tree && op != Collective::broadcast) ||
      (algorithm == NetworkAlgorithm::halving_doubling && op != Collective::all_reduce)) {
    throw Error(ErrorCode::invalid_argument,
                std::string("no network cost of ") + collective_name(op) + " " +
                    network_algorithm_name(algorithm) + " on " + std::to_string(hosts) +
                    " hosts (all_reduce or broadcast, one_shot or pipelined, broadcast tree, "
                    "all_reduce halving_doubling, >= 2 hosts)");
  }
  const double b = static_cast<double>(bytes);
  const double h = hosts;
  if (algorithm == NetworkAlgorithm::halving_doubling) {
    // Each way, the rounds move (P - 1) / P of the buffer through a link and the pairs' even
    // hosts the whole buffer once more; the reduce-scatter combines as much. Plus the
    // fingerprint round.
    const HalvingDoubling shape(hosts);
    const double share = (shape.powered - 1.0) / shape.powered;
    const double paired = shape.pairs() > 0 ? 1 : 0;
    return {2.0 * shape.rounds() + 2 * paired + 1, 0, 2 * share * b + paired * b,
            share * b + paired * b};
  }
  if (algorithm == NetworkAlgorithm::tree) {
    // The whole buffer over each hop to the deepest leader; the root's call (or the leaders'
    // fingerprints) goes beside the data, as in one round.
    const double hops = gather_rounds(hosts);
    return {hops, 0, hops * b, 0};
  }
  if (algorithm == NetworkAlgorithm::one_shot) {
    if (op == Collective::all_reduce) {
      return traffic_of(Collective::all_reduce, Algorithm::one_shot, b, hosts, /*staged=*/false);
    }
    // The root pushes the buffer to every other leader: its own link carries H-1 copies (the
    // textbook one-shot broadcast has every rank read the root's memory, one copy per port).
    return {1, 0, (h - 1) * b, 0};
  }
  StepTraffic t;
  if (op == Collective::all_reduce) {
    const double segments = static_cast<double>(all_reduce_segments(bytes, hosts, min_slice_bytes));
    t = traffic_of(Collective::all_reduce, Algorithm::two_shot, b, hosts, false, segments);
  } else {
    // The chain: (H - 1) + c - 1 hops to the last host's last chunk, the buffer through its link
    // and a chunk through each link before it.
    const double chunks =
        static_cast<double>(chunks_of_size(bytes, chain_chunk_elems(bytes, 1, hosts, chain)));
    t = {h - 1 + chunks - 1, 0, b + (h - 2) * b / chunks, 0};
  }
  t.steps += 1;  // the fingerprint round (the one-shot forms carry fingerprints with the data)
  return t;
}

double predict_network_us(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                          const NetworkLinkCost& cost) {
  return predict_network_us(op, algorithm, bytes, hosts, cost, all_reduce_min_slice_bytes(cost),
                            chain_cut(cost));
}

double predict_network_us(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                          const NetworkLinkCost& cost, size_t min_slice_bytes, ChainCut chain) {
  const StepTraffic traffic = network_traffic(op, algorithm, bytes, hosts, min_slice_bytes, chain);
  return cost.call_us + traffic_us(traffic, cost.link_class());
}

double network_choice_us(Collective op, NetworkAlgorithm algorithm, size_t bytes, int hosts,
                         const NetworkLinkCost& cost, bool root_leads) {
  const size_t min_slice_bytes = all_reduce_min_slice_bytes(cost);
  const StepTraffic traffic =
      network_traffic(op, algorithm, bytes, hosts, min_slice_bytes, chain_cut(cost));
  const double fitted_us = cost.call_us + traffic_us(traffic, cost.link_class());
  const double h = hosts;
  const bool packed = bytes <= network_packed_bytes(op);
  // The fingerprint round (or, packed, the one round carrying the data) as the leaders run it,
  // in place of the one step the fitted prediction gives it.
  const double exchange_us = leaders_gather_us(hosts, cost) - cost.step_us;
  if (op == Collective::all_reduce) {
    if (algorithm == NetworkAlgorithm::one_shot) {
      // Packed: the partial results ride in the leaders' exchange. Larger: the fingerprints and
      // the data go to and come from every other leader, directly.
      return packed ? fitted_us + exchange_us : fitted_us + 4 * (h - 1) * cost.message_us;
    }
    if (algorithm == NetworkAlgorithm::halving_doubling) {
      return fitted_us + exchange_us +
             static_cast<double>(halving_doubling_messages(bytes, hosts)) * cost.message_us;
    }
    // Each segment: every slice owner receives a slice from, and sends its result to, every
    // other leader (reduce_in_slices), 4 (H - 1) messages on a leader's core.
    const double segments = static_cast<double>(all_reduce_segments(bytes, hosts, min_slice_bytes));
    return fitted_us + exchange_us + 4 * (h - 1) * segments * cost.message_us;
  }
  if (algorithm == NetworkAlgorithm::tree) {
    // From a leading root, its call goes down the tree ahead of the data: two messages a hop.
    // Otherwise a message a hop, and the leaders' fingerprints to and from every other leader.
    const double messages = root_leads ? 2 * traffic.steps : 2 * (h - 1) + traffic.steps;
    return fitted_us + messages * cost.message_us;
  }
  if (algorithm == NetworkAlgorithm::one_shot) {
    if (packed && root_leads) {
      // The root's data rides in its messages to the other leaders (broadcast_unacknowledged):
      // down the tree, ceil(log2 H) hops of a step, a message and the data each.
      if (rooted_in_tree(hosts, cost)) {
        const StepTraffic down_the_tree = network_traffic(op, NetworkAlgorithm::tree, bytes, hosts,
                                                          min_slice_bytes, chain_cut(cost));
        return cost.call_us + traffic_us(down_the_tree, cost.link_class()) +
               down_the_tree.steps * cost.message_us;
      }
      return fitted_us + (h - 1) * cost.message_us;  // the root's messages
    }
    // The root's data to every other leader, beside the leaders' fingerprints to one another.
    return fitted_us + 3 * (h - 1) * cost.message_us;
  }
  // The chain: after the fingerprint round, each hop is a step and a message.
  return fitted_us + exchange_us + (traffic.steps - 1) * cost.message_us;
}

NetworkAlgorithm choose_network_algorithm(Collective op, size_t bytes, int hosts,
                                          std::optional<NetworkAlgorithm> forced,
                                          const NetworkLinkCost& cost, int rails, bool root_leads) {
  if (!has_network_choice(op) || hosts < 2) return NetworkAlgorithm::pipelined;
  // The pipelined form, per rail where the layout has rails to use.
  const NetworkAlgorithm pipelined =
      rails >= 2 ? NetworkAlgorithm::per_rail : NetworkAlgorithm::pipelined;
  if (forced == NetworkAlgorithm::pipelined) return NetworkAlgorithm::pipelined;
  if (forced == NetworkAlgorithm::per_rail) return pipelined;
  const bool broadcast = op == Collective::broadcast;
  if (forced == NetworkAlgorithm::tree && broadcast) return NetworkAlgorithm::tree;
  if (forced == NetworkAlgorithm::halving_doubling && !broadcast) {
    return NetworkAlgorithm::halving_doubling;
  }
  // Per rail, each of the L rails carries 1/L of the buffer through a link of its own: the
  // leaders' pipelined form of a buffer L times smaller (the shared-memory steps, overlapped with
  // the transfers, are not priced).
  const size_t carried = rails >= 2 ? bytes / static_cast<size_t>(rails) : bytes;
  NetworkAlgorithm best = pipelined;
  double best_us = network_choice_us(op, NetworkAlgorithm::pipelined, carried, hosts, cost);
  // Ties go to the fewer rounds: the tree before the chain, one round before either.
  if (broadcast && hosts >= 3) {
    const double tree_us =
        network_choice_us(op, NetworkAlgorithm::tree, bytes, hosts, cost, root_leads);
    if (tree_us <= best_us) {
      best = NetworkAlgorithm::tree;
      best_us = tree_us;
    }
  }
  const size_t landed = broadcast ? bytes : bytes * static_cast<size_t>(hosts - 1);
  if (landed <= kMaxOneShotBytes) {
    if (forced == NetworkAlgorithm::one_shot) return NetworkAlgorithm::one_shot;
    const double one_shot_us =
        network_choice_us(op, NetworkAlgorithm::one_shot, bytes, hosts, cost, root_leads);
    if (one_shot_us <= best_us) return NetworkAlgorithm::one_shot;
  }
  // Halving-doubling in the pipelined form's place, never in one round's (network_cost.h).
  if (!broadcast && halving_doubling_messages_are_small(bytes, hosts) &&
      network_choice_us(op, NetworkAlgorithm::halving_doubling, bytes, hosts, cost) < best_us) {
    return NetworkAlgorithm::halving_doubling;
  }
  return best;
}

}  // namespace tpf::coll
