#include "coll/across_hosts.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "coll/reduce_kernels.h"
#include "tpf/error.h"

namespace tpf::coll {
namespace {

using transport::NetRequest;

// Network tags: the operation's sequence number above a phase number, so messages of successive
// operations and of the phases of one never match each other; the top tag bit stays clear (it
// marks point-to-point messages, comm/net_p2p.h).
constexpr int kPhaseBits = 8;
constexpr uint64_t kSequenceMask =
    (uint64_t{1} << (transport::UcxNetwork::kTagBits - 1 - kPhaseBits)) - 1;
enum Phase : uint64_t { kFingerprint = 1, kFirst = 2, kSecond = 3, kChunks = 4 };
// Pipelined phases give each chunk a phase number of its own, from kChunks on.
constexpr size_t kMaxChunks = (size_t{1} << kPhaseBits) - kChunks;

using Buffer = std::vector<std::byte>;

// memcpy, but an empty copy may name null pointers (empty buffers of zero-count calls).
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// One collective across hosts: what every algorithm below needs to know about the layout.
class HostCollective {
 public:
  HostCollective(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                 const transport::WaitContext& ctx, const CollectiveTuning& tuning)
      : g_(group),
        d_(desc),
        sequence_(sequence),
        ctx_(ctx),
        tuning_(tuning),
        elem_(dtype_size(desc.dtype)),
        me_(group.rank),
        host_(group.hosts.host_of(group.rank)),
        local_rank_(group.hosts.local_rank(group.rank)) {}

  void run() {
    switch (d_.kind) {
      case OpKind::all_reduce: return all_reduce();
      case OpKind::reduce: return reduce();
      case OpKind::broadcast: return broadcast();
      case OpKind::all_gather: return all_gather();
      case OpKind::reduce_scatter: return reduce_scatter();
      case OpKind::all_to_all: return all_to_all();
      case OpKind::gather: return gather();
      case OpKind::scatter: return scatter();
      case OpKind::barrier: return barrier();
      case OpKind::send:
      case OpKind::recv: break;
    }
    throw Error(ErrorCode::internal, std::string(op_kind_name(d_.kind)) +
                                         " is not a collective: it goes through P2pTransfer");
  }

 private:
  int hosts() const { return g_.hosts.hosts(); }
  int leader(int host) const { return g_.hosts.ranks_on(host)[0]; }
  bool is_leader() const { return local_rank_ == 0; }
  const std::vector<int>& ranks_on(int host) const { return g_.hosts.ranks_on(host); }
  // The rank of a rooted collective that talks to the network for its host: the root on the
  // root's host (so its data needs no extra hop), the leader elsewhere.
  int representative_local_rank(int host) const {
    return host == g_.hosts.host_of(d_.root) ? g_.hosts.local_rank(d_.root) : 0;
  }
  // Reductions across several steps add; an average divides once at the end.
  ReduceOp partial_op() const { return d_.op == ReduceOp::avg ? ReduceOp::sum : d_.op; }
  uint64_t tag(Phase phase) const { return (sequence_ & kSequenceMask) << kPhaseBits | phase; }
  uint64_t chunk_tag(size_t chunk) const { return tag(Phase{kChunks + chunk}); }
  size_t bytes(size_t count) const { return count * elem_; }
  std::byte* at(void* base, size_t elements) const {
    return static_cast<std::byte*>(base) + elements * elem_;
  }
  const std::byte* at(const void* base, size_t elements) const {
    return static_cast<const std::byte*>(base) + elements * elem_;
  }

  // A collective on this host's shared memory, described in local ranks.
  void local(const OpDesc& desc) { run_operation(g_.local, desc, sequence_, ctx_, tuning_); }
  OpDesc local_desc(OpKind kind, size_t count, int root, const void* send, void* recv,
                    ReduceOp op = ReduceOp::sum) const {
    OpDesc desc = d_;
    desc.kind = kind;
    desc.count = count;
    desc.root = root;
    desc.send = send;
    desc.recv = recv;
    desc.op = op;
    return desc;
  }

  void wait(std::vector<NetRequest>& requests) { g_.network.wait_all(requests, ctx_); }

  // One round between the leaders: each sends to(h) to every other host h's leader and receives
  // that leader's message into from(h) (both: {address, bytes}), then waits for all of it.
  template <class To, class From>
  void exchange_with_leaders(Phase phase, To&& to, From&& from) {
    std::vector<NetRequest> requests;
    for (int h = 0; h < hosts(); ++h) {
      if (h == host_) continue;
      const auto [in, in_bytes] = from(h);
      const auto [out, out_bytes] = to(h);
      requests.push_back(g_.network.recv(leader(h), tag(phase), in, in_bytes));
      requests.push_back(g_.network.send(leader(h), tag(phase), out, out_bytes));
    }
    wait(requests);
  }
  void wait(std::vector<NetRequest>& requests, size_t i) {
    g_.network.wait_all(std::span<NetRequest>(&requests[i], 1), ctx_);
  }

  // The leaders tell each other which collective they are in before any data moves: different
  // calls on different hosts fail as a mismatch instead of waiting for messages never sent.
  void compare_fingerprints_across_hosts() {
    if (!is_leader()) return;
    const transport::Fingerprint mine = collective_fingerprint(d_, sequence_);
    std::vector<transport::Fingerprint> theirs(hosts());
    exchange_with_leaders(
        kFingerprint,
        [&](int) {
          return std::pair{&mine, sizeof mine};
        },
        [&](int h) {
          return std::pair{&theirs[h], sizeof mine};
        });
    for (int h = 0; h < hosts(); ++h) {
      if (h == host_ || theirs[h] == mine) continue;
      throw Error(ErrorCode::mismatch,
                  ctx_.op_label() + ": ranks called different collectives: rank " +
                      std::to_string(me_) + " (host '" + g_.hosts.key(host_) + "') called " +
                      describe_fingerprint(mine) + ", rank " + std::to_string(leader(h)) +
                      " (host '" + g_.hosts.key(h) + "') called " +
                      describe_fingerprint(theirs[h]));
    }
  }

  // dst = the reduction of parts[0], ..., parts[H-1] (one per host, in host order).
  void combine_hosts(void* dst, const std::vector<const void*>& parts, size_t count) {
    Buffer out(bytes(count));
    reduce_n(d_.dtype, partial_op(), out.data(), parts.data(), static_cast<int>(parts.size()),
             count);
    if (d_.op == ReduceOp::avg) divide_n(d_.dtype, out.data(), count, g_.hosts.ranks());
    copy_bytes(dst, out.data(), out.size());
  }

  // Blocks of `ranks` (communicator ranks) from a buffer of one block per communicator rank.
  void pack(Buffer& out, const void* full, const std::vector<int>& ranks, size_t block) const {
    out.resize(bytes(ranks.size() * block));
    for (size_t i = 0; i < ranks.size(); ++i)
      copy_bytes(at(out.data(), i * block), at(full, ranks[i] * block), bytes(block));
  }
  void unpack(void* full, const void* packed, const std::vector<int>& ranks, size_t block) const {
    for (size_t i = 0; i < ranks.size(); ++i)
      copy_bytes(at(full, ranks[i] * block), at(packed, i * block), bytes(block));
  }

  // Reduce inside the host to the leader, reduce-scatter + all-gather between the leaders (each
  // leader combines one chunk from every host, in host order), broadcast inside the host.
  void all_reduce() {
    compare_fingerprints_across_hosts();
    const size_t n = d_.count;
    local(local_desc(OpKind::reduce, n, 0, d_.send, d_.recv, partial_op()));
    if (is_leader()) {
      const int hcount = hosts();
      auto begin = [&](int c) { return n * static_cast<size_t>(c) / static_cast<size_t>(hcount); };
      const size_t mine = begin(host_ + 1) - begin(host_);
      auto chunk_of = [&](int h) {  // host h's chunk of this rank's buffer
        return std::pair{at(d_.recv, begin(h)), bytes(begin(h + 1) - begin(h))};
      };
      std::vector<Buffer> from(hcount);
      exchange_with_leaders(kFirst, chunk_of, [&](int h) {
        from[h].resize(bytes(mine));
        return std::pair{from[h].data(), from[h].size()};
      });
      std::vector<const void*> parts(hcount);
      for (int h = 0; h < hcount; ++h)
        parts[h] =
            h == host_ ? at(static_cast<const void*>(d_.recv), begin(host_)) : from[h].data();
      combine_hosts(at(d_.recv, begin(host_)), parts, mine);
      exchange_with_leaders(
          kSecond, [&](int) { return chunk_of(host_); }, chunk_of);
    }
    local(local_desc(OpKind::broadcast, n, 0, d_.recv, d_.recv));
  }

  // Reduce inside each host to its representative, which sends the host's result to the root;
  // the root combines them in host order.
  void reduce() {
    compare_fingerprints_across_hosts();
    const size_t n = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const int rep = representative_local_rank(host_);
    Buffer partial;
    void* partial_at = d_.recv;
    if (me_ != d_.root && local_rank_ == rep) {
      partial.resize(bytes(n));
      partial_at = partial.data();
    }
    local(local_desc(OpKind::reduce, n, rep, d_.send, partial_at, partial_op()));
    std::vector<NetRequest> requests;
    if (me_ == d_.root) {
      std::vector<Buffer> from(hosts());
      std::vector<const void*> parts(hosts());
      for (int h = 0; h < hosts(); ++h) {
        if (h == root_host) {
          parts[h] = d_.recv;
          continue;
        }
        from[h].resize(bytes(n));
        parts[h] = from[h].data();
        requests.push_back(g_.network.recv(leader(h), tag(kFirst), from[h].data(), bytes(n)));
      }
      wait(requests);
      combine_hosts(d_.recv, parts, n);
    } else if (local_rank_ == rep && host_ != root_host) {
      requests.push_back(g_.network.send(d_.root, tag(kFirst), partial.data(), bytes(n)));
      wait(requests);
    }
  }

  // A pipelined chain across hosts, starting at the root's host: the root sends its data in
  // chunks to the next host's leader, which forwards each chunk as it arrives while the later
  // ones are still coming (every link carries the data once, so the per-link rate does not drop
  // with the number of hosts); then each host broadcasts from its representative.
  void broadcast() {
    compare_fingerprints_across_hosts();
    const size_t n = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const int position = (host_ - root_host + hosts()) % hosts();  // along the chain
    const bool in_chain = me_ == d_.root || (is_leader() && host_ != root_host);
    if (in_chain) {
      const int next = position + 1 < hosts() ? leader((host_ + 1) % hosts()) : -1;
      const int previous = position == 1 ? d_.root : leader((host_ - 1 + hosts()) % hosts());
      // Chunks of at least 1 MiB, and few enough that each has a phase number of its own.
      const size_t chunk = std::max(std::max<size_t>((size_t{1} << 20) / elem_, 1),
                                    (n + kMaxChunks - 1) / kMaxChunks);
      const size_t chunks = n == 0 ? 1 : (n + chunk - 1) / chunk;
      auto length = [&](size_t c) { return std::min(chunk, n - std::min(n, c * chunk)); };
      const void* data = me_ == d_.root ? d_.send : d_.recv;
      std::vector<NetRequest> received, sent;
      if (me_ != d_.root) {
        for (size_t c = 0; c < chunks; ++c) {
          received.push_back(
              g_.network.recv(previous, chunk_tag(c), at(d_.recv, c * chunk), bytes(length(c))));
        }
      }
      for (size_t c = 0; c < chunks; ++c) {
        if (me_ != d_.root) wait(received, c);
        if (next >= 0) {
          sent.push_back(
              g_.network.send(next, chunk_tag(c), at(data, c * chunk), bytes(length(c))));
        }
      }
      wait(sent);
    }
    const int rep = representative_local_rank(host_);
    const void* source = me_ == d_.root ? d_.send : d_.recv;
    local(local_desc(OpKind::broadcast, n, rep, source, d_.recv));
  }

  // Gather inside each host to the leader, leaders exchange their hosts' blocks, broadcast inside.
  void all_gather() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const std::vector<int>& mine = ranks_on(host_);
    Buffer host_blocks(is_leader() ? bytes(mine.size() * block) : 0);
    local(local_desc(OpKind::gather, block, 0, d_.send, host_blocks.data()));
    if (is_leader()) {
      std::vector<Buffer> from(hosts());
      exchange_with_leaders(
          kFirst,
          [&](int) {
            return std::pair{host_blocks.data(), host_blocks.size()};
          },
          [&](int h) {
            from[h].resize(bytes(ranks_on(h).size() * block));
            return std::pair{from[h].data(), from[h].size()};
          });
      for (int h = 0; h < hosts(); ++h)
        unpack(d_.recv, h == host_ ? host_blocks.data() : from[h].data(), ranks_on(h), block);
    }
    local(local_desc(OpKind::broadcast, block * g_.hosts.ranks(), 0, d_.recv, d_.recv));
  }

  // Reduce everything inside each host to the leader; each leader sends every other host the
  // blocks of that host's ranks and combines, in host order, those of its own; scatter inside.
  void reduce_scatter() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const size_t total = block * static_cast<size_t>(g_.hosts.ranks());
    Buffer host_sum(is_leader() ? bytes(total) : 0);
    local(local_desc(OpKind::reduce, total, 0, d_.send, host_sum.data(), partial_op()));
    Buffer combined;
    if (is_leader()) {
      const std::vector<int>& mine = ranks_on(host_);
      const size_t my_count = mine.size() * block;
      std::vector<Buffer> to(hosts()), from(hosts());
      exchange_with_leaders(
          kFirst,
          [&](int h) {
            pack(to[h], host_sum.data(), ranks_on(h), block);
            return std::pair{to[h].data(), to[h].size()};
          },
          [&](int h) {
            from[h].resize(bytes(my_count));
            return std::pair{from[h].data(), from[h].size()};
          });
      Buffer own;
      pack(own, host_sum.data(), mine, block);
      std::vector<const void*> parts(hosts());
      for (int h = 0; h < hosts(); ++h) parts[h] = h == host_ ? own.data() : from[h].data();
      combined.resize(bytes(my_count));
      combine_hosts(combined.data(), parts, my_count);
    }
    local(local_desc(OpKind::scatter, block, 0, combined.data(), d_.recv));
  }

  // Gather inside each host to its representative, which sends its host's blocks to the root.
  void gather() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const int rep = representative_local_rank(host_);
    Buffer host_blocks(local_rank_ == rep ? bytes(ranks_on(host_).size() * block) : 0);
    local(local_desc(OpKind::gather, block, rep, d_.send, host_blocks.data()));
    std::vector<NetRequest> requests;
    if (me_ == d_.root) {
      std::vector<Buffer> from(hosts());
      for (int h = 0; h < hosts(); ++h) {
        if (h == root_host) continue;
        from[h].resize(bytes(ranks_on(h).size() * block));
        requests.push_back(g_.network.recv(leader(h), tag(kFirst), from[h].data(), from[h].size()));
      }
      wait(requests);
      for (int h = 0; h < hosts(); ++h)
        unpack(d_.recv, h == root_host ? host_blocks.data() : from[h].data(), ranks_on(h), block);
    } else if (local_rank_ == rep && host_ != root_host) {
      requests.push_back(
          g_.network.send(d_.root, tag(kFirst), host_blocks.data(), host_blocks.size()));
      wait(requests);
    }
  }

  // The root sends every other host's leader the blocks of its ranks; each host scatters them
  // from its representative.
  void scatter() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const int root_host = g_.hosts.host_of(d_.root);
    const int rep = representative_local_rank(host_);
    Buffer host_blocks;
    std::vector<NetRequest> requests;
    std::vector<Buffer> to(hosts());
    if (me_ == d_.root) {
      for (int h = 0; h < hosts(); ++h) {
        if (h == root_host) continue;
        pack(to[h], d_.send, ranks_on(h), block);
        requests.push_back(g_.network.send(leader(h), tag(kFirst), to[h].data(), to[h].size()));
      }
      pack(host_blocks, d_.send, ranks_on(host_), block);
    } else if (local_rank_ == rep && host_ != root_host) {
      host_blocks.resize(bytes(ranks_on(host_).size() * block));
      requests.push_back(
          g_.network.recv(d_.root, tag(kFirst), host_blocks.data(), host_blocks.size()));
    }
    wait(requests);
    local(local_desc(OpKind::scatter, block, rep, host_blocks.data(), d_.recv));
  }

  // Through the leaders: gather every local rank's send buffer, exchange between leaders the
  // blocks that cross hosts, arrange every local rank's receive buffer, scatter.
  void all_to_all() {
    compare_fingerprints_across_hosts();
    const size_t block = d_.count;
    const int n = g_.hosts.ranks();
    const std::vector<int>& mine = ranks_on(host_);
    const size_t local_n = mine.size();
    const size_t row = block * static_cast<size_t>(n);  // one rank's whole send or receive buffer
    Buffer sends(is_leader() ? bytes(local_n * row) : 0);
    local(local_desc(OpKind::gather, row, 0, d_.send, sends.data()));
    Buffer receives(is_leader() ? bytes(local_n * row) : 0);
    if (is_leader()) {
      // receives[t][i]: block from communicator rank i to local rank t.
      auto received_block = [&](size_t t, int i) {
        return at(receives.data(), t * row + i * block);
      };
      auto sent_block = [&](size_t s, int j) { return at(sends.data(), s * row + j * block); };
      for (size_t t = 0; t < local_n; ++t)
        for (size_t s = 0; s < local_n; ++s)
          copy_bytes(received_block(t, mine[s]), sent_block(s, mine[t]), bytes(block));
      std::vector<Buffer> to(hosts()), from(hosts());
      exchange_with_leaders(
          kFirst,
          [&](int h) {
            // For each of my local ranks s, its blocks for each of h's ranks, in local order.
            const std::vector<int>& theirs = ranks_on(h);
            to[h].resize(bytes(local_n * theirs.size() * block));
            for (size_t s = 0; s < local_n; ++s)
              for (size_t j = 0; j < theirs.size(); ++j)
                copy_bytes(at(to[h].data(), (s * theirs.size() + j) * block),
                           sent_block(s, theirs[j]), bytes(block));
            return std::pair{to[h].data(), to[h].size()};
          },
          [&](int h) {
            from[h].resize(bytes(ranks_on(h).size() * local_n * block));
            return std::pair{from[h].data(), from[h].size()};
          });
      for (int h = 0; h < hosts(); ++h) {
        if (h == host_) continue;
        const std::vector<int>& theirs = ranks_on(h);
        for (size_t s = 0; s < theirs.size(); ++s)
          for (size_t t = 0; t < local_n; ++t)
            copy_bytes(received_block(t, theirs[s]), at(from[h].data(), (s * local_n + t) * block),
                       bytes(block));
      }
    }
    local(local_desc(OpKind::scatter, row, 0, receives.data(), d_.recv));
  }

  // Everyone on each host arrives, the leaders meet, and release their hosts.
  void barrier() {
    local(local_desc(OpKind::barrier, 0, 0, nullptr, nullptr));
    compare_fingerprints_across_hosts();
    local(local_desc(OpKind::barrier, 0, 0, nullptr, nullptr));
  }

  const HostGroup& g_;
  const OpDesc& d_;
  const uint64_t sequence_;
  const transport::WaitContext& ctx_;
  const CollectiveTuning& tuning_;
  const size_t elem_;
  const int me_;
  const int host_;
  const int local_rank_;
};

}  // namespace

void run_across_hosts(const HostGroup& group, const OpDesc& desc, uint64_t sequence,
                      const transport::WaitContext& ctx, const CollectiveTuning& tuning) {
  HostCollective(group, desc, sequence, ctx, tuning).run();
}

}  // namespace tpf::coll
