// A small key-value store that ranks use to find each other (rendezvous). The TCP server is hosted
// by the launcher (tpf run) or by rank 0 (torchrun convention); clients must present the job's
// secret when the server has one, or are refused.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tpf {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until key exists or the timeout expires (then throws Error(timeout) naming the key).
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds delta to the integer stored at key (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True if key exists now; never blocks.
  virtual bool check(const std::string& key) = 0;
};

// Keys of `inner` seen under "prefix/": lets sub-communicators share one store connection.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;

 private:
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

// Serves the store on a TCP port from a background thread until destroyed.
class TcpStoreServer {
 public:
  // port 0 picks a free port; an empty secret accepts every client.
  TcpStoreServer(const std::string& bind_host, uint16_t port, std::string secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  uint16_t port() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A connection to a TcpStoreServer. Thread-safe: calls are serialized on one socket.
class TcpStoreClient : public Store {
 public:
  // Retries connecting until connect_timeout expires; throws Error(bootstrap) if the server is
  // unreachable or refuses the secret.
  TcpStoreClient(const std::string& host, uint16_t port, const std::string& secret,
                 std::chrono::milliseconds connect_timeout);
  ~TcpStoreClient() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpf
