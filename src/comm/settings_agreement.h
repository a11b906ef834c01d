// Whether the ranks of a new communicator agree on the settings each derives its choices from
// (comm/settings.h: shared_settings). Each rank's shared settings travel as one line of text with
// its host key (comm/host_discovery.h); every rank checks the same list of lines, so every rank
// fails alike, while the communicator is created, instead of sending or waiting for messages
// that the others' choices do not match.
#pragma once

#include <string>
#include <vector>

#include "comm/settings.h"
#include "topo/hosts.h"

namespace tpf::detail {

// One line (no tab, newline or control character): "c:NAME=value;h:NAME=value;...".
std::string encode_shared_settings(const std::vector<SharedSetting>& settings);

// `encoded_by_rank[r]`: rank r's line. Throws Error(mismatch) naming the first setting on which
// the ranks of the communicator (a network setting) or of one host (a shared-memory setting)
// differ: each value with the ranks that have it. `label` names the communicator.
void check_shared_settings(const std::vector<std::string>& encoded_by_rank,
                           const topo::HostMap& hosts, const std::string& label);

}  // namespace tpf::detail
