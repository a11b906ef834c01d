// A small key-value store that ranks use to find each other (rendezvous). The TCP server is hosted
// by the launcher (tpf run) or by rank 0 (torchrun convention); clients must present the job's
// secret when the server has one, or are refused. A server reachable from other hosts must have a
// secret.
//
// Dead ranks: a client may say which job rank it is. When such a client's connection closes without
// the goodbye its destructor sends (the process died), every get that waits for a missing key fails
// at once with Error(peer_died) naming that rank (and its pid), instead of at its deadline (a
// get_many_from only where the rank is one of those it waits on). A rank that finds another lost
// (stopped, or on a host cut off: its connection stays open, so the server cannot tell) reports it
// (Store::report_lost), and the waits end the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tpf/export.h"

namespace TPF_API tpf {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until key exists or the timeout expires (then throws Error(timeout) naming the key);
  // Error(peer_died) if a rank of the job died meanwhile (stores that can tell, see above).
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True if key exists now; never blocks.
  virtual bool check(const std::string& key) = 0;
  // The values of `keys`, in their order, once every one exists, within one timeout for all
  // (then Error(timeout) naming a key still missing); Error(peer_died) as get. By default a get
  // per key; TcpStoreClient asks for them all in one request: a rank that reads every peer's
  // address makes one round trip, not one per peer (what a job of many ranks waited for at setup).
  virtual std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout);
  // As get_many, for keys that only the job ranks `awaited_ranks` set (a communicator's own setup):
  // a death or loss of another rank of the job does not end the wait (stores that can tell; by
  // default get_many, which any death ends). Empty `awaited_ranks`: any rank, as get_many.
  virtual std::vector<std::string> get_many_from(const std::vector<int>& awaited_ranks,
                                                 const std::vector<std::string>& keys,
                                                 std::chrono::milliseconds timeout);
  // Tells the store that `job_rank` was found lost (`reason` says how), so that every get that
  // waits, or would wait, for a missing key fails with Error(peer_died) naming it, as for a rank
  // that died (not with the heartbeat's timeout: a store read's timeout means its own deadline
  // passed, and callers wait on in slices until theirs). Within `timeout`, whatever other calls
  // are in flight; throws Error where the store did not take the report. False for a store that
  // cannot tell its waiters (the default).
  virtual bool report_lost(int job_rank, const std::string& reason,
                           std::chrono::milliseconds timeout);
  // The job ranks the store knows dead (connection closed without a goodbye) or reported lost,
  // ascending, as of now; never blocks. Empty for a store that cannot tell (the default).
  virtual std::vector<int> dead_ranks();
  // While the token returned lives, this process tells the store it is alive, every tenth of
  // `silence_limit`, and a store that can judge silence (TcpStoreServer) takes this rank for lost
  // once it has heard nothing for `silence_limit` (a stopped process, a host cut off): the waits
  // then end as for a death, naming it (see "Dead ranks" above). tpfabric asks for it while a
  // communicator is made, before its ranks watch each other. nullptr where the store cannot (the
  // default) or the client is no rank.
  virtual std::shared_ptr<void> keep_alive(std::chrono::milliseconds silence_limit);
};

// Keys of `inner` seen under "prefix/": lets sub-communicators share one store connection.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  std::vector<std::string> get_many_from(const std::vector<int>& awaited_ranks,
                                         const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) override;
  bool report_lost(int job_rank, const std::string& reason,
                   std::chrono::milliseconds timeout) override;
  std::vector<int> dead_ranks() override;
  std::shared_ptr<void> keep_alive(std::chrono::milliseconds silence_limit) override;

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

// What a TcpStoreServer grants to connections, so that strangers who reach the port cannot
// exhaust its memory, descriptors or CPU.
struct StoreServerLimits {
  // Connections that have not presented a valid hello yet. At this many the server accepts no
  // more (they wait in the listener's backlog) until one says hello or goes, or the oldest has
  // had hello_grace to say it, which is then dropped to make room: a flood of strangers is cut,
  // while the ranks of a large job that connect at once all get their turn.
  size_t max_unauthenticated = 64;
  // How long a stranger keeps its place before a newer connection may take it. Real clients say
  // hello right after connecting, but on a loaded machine a rank of a large job can be scheduled
  // late: with the oldest stranger dropped at once for each connection past the limit, ranks of
  // `tpf run -n 128` on 2 cores lost their connections before their hello.
  std::chrono::milliseconds hello_grace{2000};
  // All connections; at the limit the server stops accepting until one closes. A rank making a
  // communicator holds two (its calls, its beats: Store::keep_alive).
  size_t max_connections = 32768;
  // A connection that has not sent its hello by then is closed.
  std::chrono::milliseconds hello_timeout{10000};
  // When the process is out of descriptors and no stranger can be dropped, the server stops
  // accepting until a connection closes or this much time has passed (no busy loop on accept).
  std::chrono::milliseconds accept_retry{250};
  // Job rank and pid of the process that serves the store (-1: not a rank, e.g. a launcher);
  // clients name it when the connection drops.
  int host_rank = -1;
};

// Serves the store on a TCP port from a background thread until destroyed.
class TcpStoreServer {
 public:
  // port 0 picks a free port; an empty secret accepts every client, and is refused
  // (Error(bootstrap)) unless the server listens on loopback only.
  TcpStoreServer(const std::string& bind_host, uint16_t port, std::string secret,
                 StoreServerLimits limits = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  uint16_t port() const noexcept;

  // Called on the server's thread for each rank first reported lost (Store::report_lost), or taken
  // for lost by the server when its beats stopped (Store::keep_alive; found_by -1): its job rank,
  // the job rank that found it and the report. For a supervisor that serves the store:
  // `tpf run --keep-going` ends the process the ranks that go on gave up. Must not block (the
  // server waits for it); replaces the handler set before.
  using LostRankHandler =
      std::function<void(int job_rank, int found_by, const std::string& reason)>;
  void on_rank_lost(LostRankHandler handler);

  // Counters for monitoring and tests; updated by the server thread once per round.
  struct Stats {
    size_t connections = 0;      // open now
    size_t unauthenticated = 0;  // open now, no valid hello yet
    size_t buffered_bytes = 0;   // memory held by connection buffers now
    size_t waiting = 0;          // gets (and get_manys) waiting for a key now
    size_t peak_buffered_bytes = 0;
    uint64_t accepted = 0;           // connections accepted so far
    uint64_t dropped_strangers = 0;  // unauthenticated connections dropped to make room
    uint64_t hello_timeouts = 0;     // connections closed for not saying hello in time
    uint64_t accept_failures = 0;    // accept() found the process out of descriptors or memory
    uint64_t dead_ranks = 0;  // ranks whose connection closed without a goodbye, or reported lost
  };
  Stats stats() const;

 private:
  struct TPF_LOCAL Impl;  // hidden: the implementation is not part of the ABI
  std::unique_ptr<Impl> impl_;
};

// A connection to a TcpStoreServer. Thread-safe: calls are serialized on one socket, but for
// report_lost, which takes a connection of its own so that a call waiting for a key (a rank
// blocked in a rendezvous) does not hold the report back.
class TcpStoreClient : public Store {
 public:
  // Retries connecting until connect_timeout expires; throws Error(bootstrap) if the server is
  // unreachable or refuses the secret. job_rank: this process's rank in the job (see "Dead ranks"
  // above), or -1 for a client that is not a rank.
  TcpStoreClient(const std::string& host, uint16_t port, const std::string& secret,
                 std::chrono::milliseconds connect_timeout, int job_rank = -1);
  // Says goodbye, so that the server does not take this rank for dead.
  ~TcpStoreClient() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::vector<std::string> get_many(const std::vector<std::string>& keys,
                                    std::chrono::milliseconds timeout) override;
  std::vector<std::string> get_many_from(const std::vector<int>& awaited_ranks,
                                         const std::vector<std::string>& keys,
                                         std::chrono::milliseconds timeout) override;
  bool report_lost(int job_rank, const std::string& reason,
                   std::chrono::milliseconds timeout) override;
  std::vector<int> dead_ranks() override;
  // Beats on a connection of their own, from a thread of their own; nullptr where that
  // connection cannot be made.
  std::shared_ptr<void> keep_alive(std::chrono::milliseconds silence_limit) override;

 private:
  struct TPF_LOCAL Impl;  // hidden: the implementation is not part of the ABI
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpf
