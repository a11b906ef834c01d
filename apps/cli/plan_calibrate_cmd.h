// `tpf plan calibrate`: fits the shared-memory link class (coll::ShmLinkCost) from `tpf bench
// all_reduce --json` files and reports how well it predicts the measurements it was not fitted on.
#pragma once

#include "cli/commands.h"

namespace tpf::cli {

// Adds `tpf plan calibrate` to `plan`. Bad flags are UsageErrors; unreadable or malformed bench
// files and training sets that cannot be fitted throw tpf::Error.
void add_plan_calibrate_command(Command& plan);

}  // namespace tpf::cli
