#include "coll/alpha_beta.h"

#include <algorithm>
#include <cmath>

#include "tpf/error.h"

namespace tpf::coll {
namespace {

// Microseconds to move `bytes` at `gbps` GB/s; a zero rate is "not a bottleneck".
double transfer_us(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e3) : 0.0; }

double log2_ceil(int n) { return std::ceil(std::log2(static_cast<double>(n))); }

// Per-rank work of each (op, algorithm) pair; nullopt where the pair does not exist. Formulas are
// the textbook ones (Thakur et al. 2005; NCCL's ring and double binary tree), counted per rank.
std::optional<StepTraffic> traffic_or_none(Collective op, Algorithm algorithm, double b,
                                           int nranks, bool staged, double chunks) {
  const double n = nranks;
  const double share = (n - 1) / n;  // the part of a buffer that lives on other ranks
  auto with_staging = [&](StepTraffic t, double staged_bytes) {
    t.staged_bytes = staged ? staged_bytes : 0.0;
    return t;
  };
  switch (op) {
    case Collective::all_reduce:
      switch (algorithm) {
        case Algorithm::one_shot:  // everyone reads all n inputs
          return with_staging({1, 0, (n - 1) * b, n * b}, b);
        case Algorithm::two_shot:  // reduce-scatter then all-gather, pipelined in chunks
          return with_staging({chunks + 1, 0, 2 * share * b, b}, b + b / n + share * b);
        case Algorithm::ring:
          return with_staging({2 * (n - 1), 0, 2 * share * b, 2 * share * b}, 2 * share * b);
        case Algorithm::tree:  // double binary tree: reduce up, broadcast down, pipelined
          return with_staging({2 * log2_ceil(nranks), 0, 2 * b, 2 * b}, 2 * b);
      }
      break;
    case Collective::all_gather:
      if (algorithm == Algorithm::ring) return with_staging({n - 1, 0, share * b, 0}, share * b);
      if (algorithm == Algorithm::one_shot) return with_staging({1, 0, share * b, 0}, b);
      break;
    case Collective::reduce_scatter:
      // A ring step reads the incoming piece and the rank's own: 2(n-1)/n of the buffer in all,
      // as in the ring all-reduce's first half.
      if (algorithm == Algorithm::ring) {
        return with_staging({n - 1, 0, share * b, 2 * share * b}, share * b);
      }
      if (algorithm == Algorithm::one_shot) return with_staging({1, 0, share * b, b}, b);
      break;
    case Collective::broadcast:
      if (algorithm == Algorithm::ring) return with_staging({n - 1 + chunks - 1, 0, b, 0}, b);
      if (algorithm == Algorithm::tree) return with_staging({log2_ceil(nranks), 0, b, 0}, b);
      if (algorithm == Algorithm::one_shot) return with_staging({1, 0, b, 0}, b);
      break;
    case Collective::all_to_all:
      if (algorithm == Algorithm::one_shot)
        return with_staging({1, 0, share * b, 0}, 2 * share * b);
      break;
    case Collective::send_recv:
      if (algorithm == Algorithm::one_shot) return with_staging({1, 0, b, 0}, 2 * b);
      break;
    case Collective::reduce:  // not priced (has_cost_model)
    case Collective::gather:
    case Collective::scatter:
    case Collective::barrier: break;
  }
  return std::nullopt;
}

constexpr Algorithm kAlgorithms[] = {Algorithm::one_shot, Algorithm::two_shot, Algorithm::ring,
                                     Algorithm::tree};

}  // namespace

const char* to_string(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::one_shot: return "one_shot";
    case Algorithm::two_shot: return "two_shot";
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
  }
  return "?";
}

bool has_cost_model(Collective op) noexcept {
  switch (op) {
    case Collective::all_reduce:
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::broadcast:
    case Collective::all_to_all:
    case Collective::send_recv: return true;
    case Collective::reduce:
    case Collective::gather:
    case Collective::scatter:
    case Collective::barrier: break;
  }
  return false;
}

Collective parse_collective_op(const std::string& name) {
  const std::optional<Collective> op = parse_collective(name);
  if (op && has_cost_model(*op)) return *op;
  std::vector<const char*> priced;
  for (const CollectiveInfo& info : all_collectives()) {
    if (has_cost_model(info.id)) priced.push_back(info.name);
  }
  std::string expected;
  for (size_t i = 0; i < priced.size(); ++i) {
    expected += (i == 0 ? "" : i + 1 == priced.size() ? " or " : ", ") + std::string(priced[i]);
  }
  throw Error(ErrorCode::invalid_argument,
              "unknown collective '" + name + "': expected " + expected);
}

Algorithm parse_algorithm(const std::string& name) {
  for (Algorithm algorithm : kAlgorithms) {
    if (name == to_string(algorithm)) return algorithm;
  }
  throw Error(ErrorCode::invalid_argument,
              "unknown algorithm '" + name + "': expected one_shot, two_shot, ring or tree");
}

StepTraffic traffic_of(Collective op, Algorithm algorithm, double bytes, int nranks, bool staged,
                       double pipeline_chunks) {
  auto traffic = traffic_or_none(op, algorithm, bytes, nranks, staged, pipeline_chunks);
  if (!traffic) {
    throw Error(ErrorCode::invalid_argument,
                std::string("no ") + to_string(algorithm) + " " + collective_name(op) + " algorithm");
  }
  return *traffic;
}

double traffic_us(const StepTraffic& traffic, const LinkClass& link) {
  return traffic.steps * link.alpha_us + transfer_us(traffic.staged_bytes, link.stage_gbps) +
         transfer_us(traffic.wire_bytes, link.port_gbps) +
         transfer_us(traffic.reduced_bytes, link.reduce_gbps);
}

std::optional<double> predict_us(Collective op, Algorithm algorithm, double bytes, int nranks,
                                 const LinkClass& link, double pipeline_chunks) {
  if (nranks < 1 || !(bytes >= 0)) {
    throw Error(ErrorCode::invalid_argument, "collective cost of " + std::to_string(nranks) +
                                                 " ranks and " + std::to_string(bytes) + " bytes");
  }
  if (nranks == 1 && op != Collective::send_recv) return 0.0;  // nothing leaves the rank
  auto traffic =
      traffic_or_none(op, algorithm, bytes, nranks, link.stage_gbps > 0, pipeline_chunks);
  if (!traffic) return std::nullopt;
  return traffic_us(*traffic, link);
}

std::vector<AlgorithmTime> rank_algorithms(Collective op, double bytes, int nranks,
                                           const LinkClass& link,
                                           const std::vector<Algorithm>& allowed) {
  std::vector<AlgorithmTime> ranked;
  for (Algorithm algorithm : kAlgorithms) {
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), algorithm) == allowed.end()) {
      continue;
    }
    // Two-shot pipelines in pieces of at most 1 MiB, as a fabric with bounded slots does.
    const double chunks = std::max(1.0, std::ceil(bytes / (1 << 20)));
    if (auto us = predict_us(op, algorithm, bytes, nranks, link, chunks)) {
      ranked.push_back({algorithm, *us});
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const AlgorithmTime& a, const AlgorithmTime& b) { return a.us < b.us; });
  return ranked;
}

double predict_hierarchical_all_reduce_us(double bytes, const std::vector<HierarchyLevel>& levels,
                                          Algorithm* outer_algorithm) {
  if (levels.empty()) throw Error(ErrorCode::invalid_argument, "a hierarchy needs a level");
  auto cheapest = [](Collective op, double b, const HierarchyLevel& level) {
    auto ranked = rank_algorithms(op, b, level.ranks, level.link, level.allowed);
    if (ranked.empty()) {
      throw Error(ErrorCode::invalid_argument, std::string("no allowed ") + collective_name(op) +
                                                   " algorithm over " + level.link.name);
    }
    return ranked.front();
  };
  double us = 0;
  double share = bytes;
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    // Reduce-scatter of `share` going out, all-gather of the same buffer coming back.
    us += cheapest(Collective::reduce_scatter, share, levels[i]).us +
          cheapest(Collective::all_gather, share, levels[i]).us;
    share /= levels[i].ranks;
  }
  const AlgorithmTime outer = cheapest(Collective::all_reduce, share, levels.back());
  if (outer_algorithm) *outer_algorithm = outer.algorithm;
  return us + outer.us;
}

}  // namespace tpf::coll
