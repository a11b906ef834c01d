// Calibration of the network link class (coll::NetworkLinkCost) from `tpf bench all_reduce` and
// `tpf bench broadcast` runs across hosts with one rank per host (the leaders' part of a
// collective; coll/network_cost.h) and the network algorithm forced (TPF_NET_ALGO): read the
// benchmark's JSON files, fit call_us, step_us, link_gbps and reduce_gbps by least squares on
// relative error (plan/least_squares.h), and measure how well the fit predicts points it was not
// fitted on (other sizes, other host counts). Used by `tpf plan calibrate-network`.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coll/collective_kinds.h"
#include "coll/network_cost.h"
#include "plan/calibration.h"  // PointErrorOf, EvaluationOf

namespace tpf::plan {

// One timing from `tpf bench` across hosts: the time of one call, max over ranks.
struct NetworkMeasurement {
  coll::Collective collective = coll::Collective::all_reduce;
  coll::NetworkAlgorithm algorithm = coll::NetworkAlgorithm::one_shot;
  int hosts = 2;
  size_t bytes = 0;
  bool in_place = false;
  double measured_us = 0;
  // The smallest all_reduce slice the run used ("network_min_slice_bytes"; runs that do not
  // record it predate its dependence on the settings and used kNetworkMinChunkBytes).
  size_t min_slice_bytes = coll::kNetworkMinChunkBytes;
  // How the broadcast chain cut its buffer ("network_chain_round_us" and "network_chain_gbps";
  // runs that do not record them predate the cut's dependence on the settings: the fixed cut).
  coll::ChainCut chain;
  std::string source;  // "FILE rows[K].oop", for tables and messages
};

// Reads one `tpf bench --json` file: "collective" all_reduce or broadcast, "hosts" >= 2 with
// "nranks" equal to it (one rank per host: the shared-memory steps are not part of the network
// link class), "network_algorithm" one_shot, pipelined or (broadcast) tree (forced; an
// "automatic" run is refused: the fit must know which algorithm ran). Throws
// tpf::Error(invalid_argument) naming the file and what is wrong. Rows of 0 bytes are skipped.
std::vector<NetworkMeasurement> parse_network_bench_json(const std::string& text,
                                                         const std::string& path);
std::vector<NetworkMeasurement> read_network_bench_file(const std::string& path);

// One measurement per point (collective, algorithm, hosts, size, placement): the median of the
// runs that measured it, in the order of the points' first runs.
std::vector<NetworkMeasurement> median_of_repeats(const std::vector<NetworkMeasurement>& runs);

struct NetworkFit {
  coll::NetworkLinkCost cost;
  std::vector<std::string> fitted;  // the parameters the training set determined
  std::vector<std::string> notes;   // parameters kept from the prior or pinned, and why
  size_t points = 0;
  double train_median_rel_error = 0;
  double train_max_rel_error = 0;
};

// Fits `prior`'s parameters to `training` (coll::network_traffic gives each point's steps, bytes
// on the link and bytes combined: the model is linear in call_us, step_us, 1 / link_gbps and
// 1 / reduce_gbps). Throws tpf::Error(invalid_argument) when the points cannot separate them.
NetworkFit fit_network_link_cost(const std::vector<NetworkMeasurement>& training,
                                 const coll::NetworkLinkCost& prior = {});

using NetworkPointError = PointErrorOf<NetworkMeasurement>;
using NetworkEvaluation = EvaluationOf<NetworkMeasurement>;
NetworkEvaluation evaluate(const coll::NetworkLinkCost& cost,
                           const std::vector<NetworkMeasurement>& measurements);

}  // namespace tpf::plan
