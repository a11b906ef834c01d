// `tpf plan calibrate`: fits the shared-memory link class (coll::ShmLinkCost) from `tpf bench
// all_reduce --json` files and reports how well it predicts the measurements it was not fitted on.
#pragma once

namespace tpf::cli {

// argv starts after "calibrate". Bad flags throw UsageError; unreadable or malformed bench files
// and training sets that cannot be fitted throw tpf::Error.
int cmd_plan_calibrate(int argc, char** argv);

}  // namespace tpf::cli
