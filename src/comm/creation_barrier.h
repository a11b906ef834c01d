// The end of a communicator's creation across hosts: no rank goes on (starts its heartbeat,
// returns the communicator) before every rank has made its part. Without it a rank whose creation
// ended first watched (comm/heartbeat.h) ranks of the next host still in theirs, which beat only
// once made: their silence counted against them, and a healthy rank held up in its creation (by a
// host-mate that stopped before publishing its segment, say) was named lost in place of the one
// that held it up. With it, a rank held up in its creation holds everyone's, where its failure
// reaches them (comm/creation_watch.h). Communicators of one host need none: their shared-memory
// setup ends once every rank has mapped every segment.
#pragma once

#include <chrono>
#include <string>

#include "tpf/store.h"
#include "transport/rank_names.h"

namespace tpf::detail {

// Rank 0 waits for every other rank's "made/<rank>" and then sets "all_made", which the others
// wait for; within `timeout` (then Error(timeout) naming the ranks not made as `names` does,
// `label` in front).
void await_every_rank_made(Store& store, int rank, int size, std::chrono::milliseconds timeout,
                           const std::string& label, const transport::RankNames& names);

}  // namespace tpf::detail
