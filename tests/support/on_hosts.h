// Runs a test body on ranks that say they are on given hosts (TPF_NODE_ID per rank), so layouts of
// several hosts run on one machine: shared memory inside each host, UCX (TCP over loopback)
// between hosts.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "tpf/comm.h"
#include "transport/net_protocol.h"

namespace tpf::testing {

using HostKeys = std::vector<std::string>;

// Sets rank r's own settings (environment) before it creates its communicator.
using RankSettings = std::function<void(int rank)>;

// A run whose rank r says it is on host keys[r], its data between hosts carried by `protocol`;
// each operation's deadline is 30 s.
std::vector<RankOutcome> run_on_hosts(
    const HostKeys& keys, const std::function<void(Communicator&)>& body,
    transport::NetProtocol protocol = transport::NetProtocol::automatic,
    const RankSettings& settings = {});

}  // namespace tpf::testing
