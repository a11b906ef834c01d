// `tpf train --trace FILE`: every rank's timeline (parallel/timeline.h) in one file of Chrome's
// trace event format (JSON; opens in Perfetto, ui.perfetto.dev, and chrome://tracing), one
// process per rank named with its place in the layout, so a user sees the pipeline bubble and what
// overlaps what.
#pragma once

#include <string>

#include "parallel/timeline.h"
#include "tpf/comm.h"

namespace tpf {

// Collective over world: each rank sends its spans to rank 0, which writes `path`.
// process_name: this rank's label, e.g. "rank 3 (tp 1, dp 1, stage 0)".
void write_chrome_trace(Communicator& world, const Timeline& timeline,
                        const std::string& process_name, const std::string& path);

}  // namespace tpf
