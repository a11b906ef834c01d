// How the planner's answers are shown: aligned text tables for people, JSON for programs, and an
// SVG chart of a layout ranking with each layout's step broken down.
#pragma once

#include <string>

#include "formats/json.h"
#include "plan/collective_planner.h"
#include "plan/layout_search.h"
#include "plan/model_spec.h"
#include "plan/step_model.h"

namespace tpf::plan {

std::string describe_cluster(const ClusterSpec& cluster, const FabricTopology& topology);
std::string describe_model(const ModelSpec& model);

std::string step_table(const StepEstimate& estimate, const ClusterSpec& cluster);
json::Value step_json(const StepEstimate& estimate);
json::Value cluster_json(const ClusterSpec& cluster, const FabricTopology& topology);
json::Value model_json(const ModelSpec& model);

// The first `rows` layouts of a search.
std::string search_table(const SearchResult& result, size_t rows);
json::Value search_json(const SearchResult& result, size_t rows);
// Horizontal bars, one per layout (best at the top): time per million tokens, split into
// compute, TP comm, PP comm, bubble, exposed DP comm and optimizer.
std::string search_svg(const SearchResult& result, size_t rows, const std::string& title);

json::Value collective_json(const CollectiveEstimate& estimate);

}  // namespace tpf::plan
