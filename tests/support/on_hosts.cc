#include "support/on_hosts.h"

#include <stdlib.h>

#include <chrono>

namespace tpf::testing {

std::vector<RankOutcome> run_on_hosts(const HostKeys& keys,
                                      const std::function<void(Communicator&)>& body,
                                      transport::NetProtocol protocol,
                                      const RankSettings& settings) {
  RunOptions options;
  options.comm_options.timeout = std::chrono::milliseconds(30000);
  return run_ranks_raw(
      static_cast<int>(keys.size()),
      [&](const RankContext& ctx) {
        ::setenv("TPF_NODE_ID", keys[ctx.rank].c_str(), 1);
        ::setenv("TPF_NET_PROTOCOL", transport::net_protocol_name(protocol), 1);
        if (settings) settings(ctx.rank);
        Communicator comm = Communicator::create(ctx.rank, ctx.size, ctx.store_address, ctx.secret,
                                                 ctx.comm_options);
        body(comm);
      },
      options);
}

}  // namespace tpf::testing
