// How send() and recv() travel between hosts (transport/ucx_network.h):
// - tag: tagged messages, what TCP serves best;
// - put: put + signal into registered slots, what RDMA serves best (transport/put_protocol.h);
// - automatic: put where UCX has an RDMA transport (InfiniBand / RoCE), tag where it has TCP only.
// A pair of ranks uses put + signal only if both chose it. Setting: TPF_NET_PROTOCOL.
#pragma once

#include <optional>
#include <string_view>

namespace tpf::transport {

enum class NetProtocol { automatic, tag, put };

inline const char* net_protocol_name(NetProtocol protocol) {
  switch (protocol) {
    case NetProtocol::automatic: return "auto";
    case NetProtocol::tag: return "tag";
    case NetProtocol::put: return "put";
  }
  return "?";
}

inline std::optional<NetProtocol> parse_net_protocol(std::string_view text) {
  for (NetProtocol p : {NetProtocol::automatic, NetProtocol::tag, NetProtocol::put})
    if (text == net_protocol_name(p)) return p;
  return std::nullopt;
}

}  // namespace tpf::transport
