#include "plan/layout_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "plan/invalid_input.h"
#include "plan/text_format.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

// Layers of each end stage where pp does not divide the layers: the end stages, which also hold
// the embedding and the output layer, get the most layers k < L/pp that leaves the other stages
// an even share (Llama 3: 126 layers on 16 stages as 7, 14 x 8, 7). 0 where pp divides L, -1
// where no such split exists.
int end_stage_layers(int layers, int pp) {
  if (layers % pp == 0) return 0;
  if (pp < 3) return -1;
  for (int k = layers / pp; k >= 1; --k) {
    const int rest = layers - 2 * k;
    if (rest >= pp - 2 && rest % (pp - 2) == 0 && rest / (pp - 2) > k) return k;
  }
  return -1;
}

// The (ep, etp) pairs to try: a mixture of experts splits its experts over any ep dividing the
// experts and dp, with the experts' GEMMs split as the layers' (etp = 0, i.e. tp); where tp > 1
// also folded, whole experts (etp = 1) over any ep dividing tp x dp. A dense model: (1, 0).
std::vector<std::pair<int, int>> expert_splits(const ModelSpec& model, int tp, int dp) {
  if (!model.moe()) return {{1, 0}};
  std::vector<std::pair<int, int>> splits;
  for (int ep : divisors(std::gcd(dp, model.experts))) splits.emplace_back(ep, 0);
  if (tp > 1) {
    for (int ep : divisors(std::gcd(tp * dp, model.experts))) splits.emplace_back(ep, 1);
  }
  return splits;
}

// Context-parallel degrees to try among `ranks` (what TP and PP leave): 1, and with fused
// attention each cp dividing them that leaves every rank at least kMinContextChunk tokens (two
// balanced chunks) of the sequence: a block's attention grows with the square of its length and
// its K/V transfer linearly, so shorter chunks hide less of the ring's traffic.
std::vector<int> context_splits(const ModelSpec& model, int ranks, AttentionKernel attention) {
  constexpr int kMinContextChunk = 4096;
  std::vector<int> splits = {1};
  if (attention != AttentionKernel::flash) return splits;
  for (int cp : divisors(ranks)) {
    if (cp > 1 && model.seq_len % (2 * cp) == 0 && model.seq_len / cp >= kMinContextChunk)
      splits.push_back(cp);
  }
  return splits;
}

// Why `best` beats `other`: the parts of the step that differ most, per token (batches differ).
std::string compare(const StepEstimate& best, const StepEstimate& other, const std::string& choice,
                    bool all_else_equal) {
  std::string text =
      choice + (all_else_equal ? " (all else equal)" : "") + ": " + other.layout.to_string();
  if (!other.fits)
    return text + format(" does not fit (%.1f GB per GPU).", other.memory.total_gb());
  text += format(" runs at %.0f%% of the best's tokens/s",
                 100.0 * other.tokens_per_s / best.tokens_per_s);
  const double best_tokens = best.tokens_per_s * best.step_s;
  const double other_tokens = other.tokens_per_s * other.step_s;
  struct Delta {
    const char* name;
    double ms_per_million_tokens;
  };
  std::vector<Delta> deltas;
  for (const BreakdownPart& part : kBreakdownParts) {
    const double a = best.breakdown.*part.seconds / best_tokens * 1e9;
    const double b = other.breakdown.*part.seconds / other_tokens * 1e9;
    deltas.push_back({part.name, b - a});
  }
  std::sort(deltas.begin(), deltas.end(), [](const Delta& x, const Delta& y) {
    return std::abs(x.ms_per_million_tokens) > std::abs(y.ms_per_million_tokens);
  });
  // Per million tokens, since layouts may run different global batches.
  text += ": per million tokens it spends";
  for (size_t i = 0; i < 2 && i < deltas.size(); ++i) {
    const double ms = deltas[i].ms_per_million_tokens;
    text += std::string(i ? " and" : "") + format(" %.1f ms ", std::abs(ms)) +
            (ms >= 0 ? "more" : "less") + " on " + deltas[i].name;
  }
  text += ".";
  return text;
}

}  // namespace

Layout parse_framework_options(const std::string& text) {
  const Layout parsed = parse_layout(text);
  Layout framework;
  framework.precision = parsed.precision;
  framework.attention = parsed.attention;
  framework.overlap = parsed.overlap;
  if (parsed.to_string() != framework.to_string()) {
    invalid("'" + text +
            "': the search's framework options are precision, attention and "
            "overlap only (it chooses the rest)");
  }
  return framework;
}

SearchResult search_layouts(const ModelSpec& model, CollectivePlanner& planner,
                            const SearchOptions& options) {
  validate(model);
  const ClusterSpec& cluster = planner.cluster();
  // An FP8 search needs an FP8 peak: the error a layout gets, before any layout is tried.
  const ComputeModel precision_check(cluster.gpu, options.framework.precision);
  const int gpus = cluster.total_gpus();
  const int max_tp = options.max_tp > 0 ? options.max_tp : 2 * cluster.gpus_per_node;
  const int wanted_batch = options.global_batch > 0 ? options.global_batch : model.global_batch;
  SearchResult result;
  result.asked_batch = wanted_batch;
  std::vector<StepEstimate> fitting, too_big;
  std::vector<int> dp_sizes;  // those the TP, CP and PP degrees that fit the model leave
  struct Degrees {
    int tp, cp, pp, dp, end_layers;
  };
  std::vector<Degrees> degrees;
  for (int tp : divisors(gpus)) {
    if (tp > max_tp || model.heads % tp != 0 || model.query_groups() % tp != 0) continue;
    for (int pp : divisors(gpus / tp)) {
      if (pp > model.layers) continue;
      const int end_layers = end_stage_layers(model.layers, pp);
      if (end_layers < 0) continue;
      for (int cp : context_splits(model, gpus / tp / pp, options.framework.attention)) {
        const int dp = gpus / tp / pp / cp;
        if (std::find(dp_sizes.begin(), dp_sizes.end(), dp) == dp_sizes.end())
          dp_sizes.push_back(dp);
        degrees.push_back({tp, cp, pp, dp, end_layers});
      }
    }
  }
  for (const auto& [tp, cp, pp, dp, end_layers] : degrees) {
    for (int mb : options.micro_batches) {
      // The batch must split into whole micro-batches on every DP rank. Rounded, it goes up to
      // a multiple of DP (the same for every micro-batch size, so those compare fairly).
      const int batch = options.allow_batch_rounding ? round_up(wanted_batch, dp) : wanted_batch;
      if (batch % (dp * mb) != 0) {
        ++result.batch_skipped;
        continue;
      }
      for (int vp : options.virtual_stages) {
        if (vp > 1 && (pp == 1 || (batch / dp / mb) % pp != 0 ||
                       (end_layers == 0 && model.layers % (pp * vp) != 0) ||
                       (end_layers > 0 && end_layers < vp))) {
          continue;
        }
        for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full}) {
          // With fused attention selective recomputation has nothing to drop: as none.
          if (recompute == Recompute::selective &&
              options.framework.attention == AttentionKernel::flash) {
            continue;
          }
          for (bool sp : {false, true}) {
            if (sp && tp == 1) continue;
            for (const auto& [ep, etp] : expert_splits(model, tp, dp * cp)) {
              // ZeRO-1 always beside none; 2 and 3 move more for less memory, so only where the
              // stage below does not fit.
              bool below_fits = false;
              for (int zero = 0; zero <= 3; ++zero) {
                if ((zero > 0 && dp * cp == 1) || (zero >= 2 && below_fits)) break;
                Layout layout;
                layout.precision = options.framework.precision;
                layout.attention = options.framework.attention;
                layout.overlap = options.framework.overlap;
                layout.tp = tp;
                layout.cp = cp;
                layout.pp = pp;
                layout.dp = dp;
                layout.ep = ep;
                layout.etp = etp;
                layout.micro_batch = mb;
                layout.global_batch = batch;
                layout.virtual_stages = vp;
                layout.recompute = recompute;
                layout.sequence_parallel = sp;
                layout.zero = zero;
                layout.first_stage_layers = layout.last_stage_layers = end_layers;
                try {
                  validate_layout(model, layout, cluster);
                } catch (const Error&) {
                  ++result.rejected;  // an impossible combination, not a failure
                  break;              // (whatever the ZeRO stage)
                }
                // Anything wrong from here on (a cut-off network, ...) is the user's to see.
                StepEstimate estimate = estimate_step(model, layout, planner);
                ++result.evaluated;
                if (batch != wanted_batch) ++result.rounded_up;
                below_fits = estimate.fits;
                (estimate.fits ? fitting : too_big).push_back(std::move(estimate));
              }
            }
          }
        }
      }
    }
  }
  if (result.evaluated == 0 && result.batch_skipped > 0) {
    std::sort(dp_sizes.begin(), dp_sizes.end());
    std::string sizes;
    for (int dp : dp_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(dp);
    throw Error(ErrorCode::invalid_argument,
                "no layout of " + model.name + " on " + std::to_string(gpus) +
                    " GPUs splits the global batch of " + std::to_string(wanted_batch) +
                    " sequences: the data-parallel sizes the GPU count leaves (with TP dividing "
                    "the heads and PP splitting the layers) are " +
                    sizes + ", and none of them divides it (times a micro-batch of " +
                    std::to_string(options.micro_batches.front()) +
                    " or more); ask for a batch one of them divides (--global-batch), another "
                    "GPU count, or --allow-batch-rounding to run each layout at the batch "
                    "rounded up to a multiple of its DP size");
  }
  if (result.evaluated == 0) {
    throw Error(ErrorCode::invalid_argument,
                "no layout of " + model.name + " runs on " + std::to_string(gpus) +
                    " GPUs: TP must divide the heads (" + std::to_string(model.heads) +
                    ") and key/value heads, PP must split the layers (" +
                    std::to_string(model.layers) +
                    ") evenly or with lighter end stages, and TP x PP x DP must equal the GPU "
                    "count");
  }
  auto faster = [](const StepEstimate& a, const StepEstimate& b) {
    return a.tokens_per_s > b.tokens_per_s;
  };
  std::stable_sort(fitting.begin(), fitting.end(), faster);
  std::stable_sort(too_big.begin(), too_big.end(),
                   [](const StepEstimate& a, const StepEstimate& b) {
                     return a.memory.total_gb() < b.memory.total_gb();
                   });
  result.fitting = static_cast<int>(fitting.size());
  result.ranked = std::move(fitting);
  result.ranked.insert(result.ranked.end(), std::make_move_iterator(too_big.begin()),
                       std::make_move_iterator(too_big.end()));

  const StepEstimate& best = result.ranked.front();
  if (!best.fits) {
    result.why_best.push_back(
        format("No layout fits in %.0f GB per GPU; the smallest needs %.1f GB.",
               cluster.gpu.memory_gb, best.memory.total_gb()));
    return result;
  }
  std::string parts;
  for (const BreakdownPart& part : kBreakdownParts) {
    const double seconds = best.breakdown.*part.seconds;
    if (seconds <= 0) continue;
    parts += (parts.empty() ? "" : ", ") + std::string(part.name) +
             format(" %.1f%%", 100 * seconds / best.step_s);
  }
  result.why_best.push_back("Best: " + best.layout.to_string() +
                            format(": %.0f tokens/s, MFU %.1f%%, %.1f GB per GPU.",
                                   best.tokens_per_s, 100 * best.mfu, best.memory.total_gb()) +
                            format(" Of its %.3f s step: ", best.step_s) + parts + ".");
  // Against the best layout that differs in one choice only (all else equal), or, where no such
  // layout exists, the best that differs in that choice at all.
  using Key = std::function<std::string(const Layout&)>;
  const std::pair<const char*, Key> choices[] = {
      {"TP degree", [](const Layout& l) { return std::to_string(l.tp); }},
      {"PP degree", [](const Layout& l) { return std::to_string(l.pp); }},
      {"micro-batch", [](const Layout& l) { return std::to_string(l.micro_batch); }},
      {"interleaving", [](const Layout& l) { return std::to_string(l.virtual_stages); }},
      {"recomputation", [](const Layout& l) { return std::string(to_string(l.recompute)); }},
      {"sequence parallelism", [](const Layout& l) { return std::to_string(l.sequence_parallel); }},
      {"context parallelism", [](const Layout& l) { return std::to_string(l.cp); }},
      {"ZeRO stage", [](const Layout& l) { return std::to_string(l.zero); }},
      {"expert parallelism", [](const Layout& l) { return std::to_string(l.ep); }},
      // "tp" where the experts split as the layers do (always, for a dense model).
      {"expert TP", [](const Layout& l) { return l.folded() ? std::to_string(l.etp) : "tp"; }},
  };
  auto same_except = [&](const Layout& a, const Layout& b, size_t skip) {
    for (size_t i = 0; i < std::size(choices); ++i) {
      // DP follows from TP and PP; the batch may be rounded per layout.
      if (i != skip && choices[i].second(a) != choices[i].second(b)) {
        return false;
      }
    }
    return true;
  };
  for (size_t c = 0; c < std::size(choices); ++c) {
    const auto& [choice, key] = choices[c];
    const std::string mine = key(best.layout);
    const StepEstimate* alternative = nullptr;
    bool all_else_equal = false;
    for (const StepEstimate& other : result.ranked) {
      if (key(other.layout) == mine) continue;
      if (same_except(best.layout, other.layout, c)) {
        alternative = &other;
        all_else_equal = true;
        break;
      }
      if (!alternative) alternative = &other;
    }
    if (alternative) {
      result.why_best.push_back(
          compare(best, *alternative,
                  std::string(choice) + " " + key(alternative->layout) + " instead of " + mine,
                  all_else_equal));
    }
  }
  return result;
}

}  // namespace tpf::plan
