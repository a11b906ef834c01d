// `tpf plan calibrate-network`: fits the network link class (coll::NetworkLinkCost) from `tpf
// bench --json` runs across hosts and reports how well it predicts the runs it was not fitted on
// (other sizes, other host counts) and whether the algorithm it would choose is the faster one.
#pragma once

#include "cli/commands.h"

namespace tpf::cli {

// Adds `tpf plan calibrate-network` to `plan`. Bad flags are UsageErrors; unreadable or
// malformed bench files and training sets that cannot be fitted throw tpf::Error.
void add_plan_calibrate_network_command(Command& plan);

}  // namespace tpf::cli
