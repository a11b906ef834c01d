// A client of torch.distributed's TCPStore, just enough for torchrun's agent store: under
// `torchrun` with its static rendezvous the elastic agent on the first node serves a TCPStore on
// MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so rank 0 cannot listen there;
// it serves the tpf store on a free port and announces that port through the agent's store.
//
// Wire format of torch 1.13's TCPStore (checked against Debian's python3-torch): one query byte,
// strings and values as a little-endian u64 length then the bytes; SET (0) has no reply, GET (2)
// answers with a string and closes the connection if the key is missing, WAIT (5) answers one
// byte once every key exists. torch's own clients put "/" in front of every key, so a key set
// here as "/k" reads as "k" through torch.distributed.TCPStore in Python.
#pragma once

#include <cstdint>
#include <string>

#include "bootstrap/socket.h"

namespace tpf::bootstrap {

class TorchStoreClient {
 public:
  // Connects (retrying until `deadline`: the agent may start its store after its workers' rank 0
  // asks) or throws Error(bootstrap) naming the address.
  TorchStoreClient(std::string host, uint16_t port, Deadline deadline);

  void set(const std::string& key, const std::string& value, Deadline deadline);
  // Waits until the key exists, then returns its value; Error(timeout) at the deadline.
  std::string get(const std::string& key, Deadline deadline);

 private:
  void send_or_throw(const std::string& bytes, Deadline deadline, const std::string& what);
  void recv_or_throw(void* data, size_t n, Deadline deadline, const std::string& what);
  std::string where() const;

  std::string host_;
  uint16_t port_ = 0;
  Socket socket_;
};

}  // namespace tpf::bootstrap
