#include "plan/layout.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <utility>
#include <vector>

#include "plan/invalid_input.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

const char* dim_name(ParallelDim dim) {
  switch (dim) {
    case ParallelDim::tp: return "tp";
    case ParallelDim::cp: return "cp";
    case ParallelDim::dp: return "dp";
    case ParallelDim::pp: return "pp";
  }
  return "?";
}

// The ranks one position of the order spans: tp's spans CP's ranks too.
int degree_of(const Layout& layout, ParallelDim dim) {
  switch (dim) {
    case ParallelDim::tp: return layout.tp * layout.cp;
    case ParallelDim::cp: return layout.cp;
    case ParallelDim::dp: return layout.dp;
    case ParallelDim::pp: return layout.pp;
  }
  return 1;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

const char* kKeys =
    "tp cp ep etp pp dp mb gb sp vp recompute order zero precision attention overlap first last "
    "capacity bucket";

// overlap= names, each with the flag it sets.
constexpr std::pair<const char*, bool Overlap::*> kOverlapParts[] = {
    {"tp", &Overlap::tp},
    {"pp", &Overlap::pp},
    {"dp_grads", &Overlap::dp_grads},
    {"dp_params", &Overlap::dp_params},
};

Overlap parse_overlap(const std::string& value) {
  Overlap overlap;
  for (const auto& [name, flag] : kOverlapParts) overlap.*flag = false;
  if (value == "none") return overlap;
  for (const std::string& part : split(value, '+')) {
    bool known = false;
    for (const auto& [name, flag] : kOverlapParts) {
      if (part == name) {
        overlap.*flag = true;
        known = true;
      }
    }
    if (!known) {
      invalid("layout: overlap=" + value + ": '" + part +
              "' is not one of tp, pp, dp_grads, dp_params (join them with '+', or none)");
    }
  }
  return overlap;
}

std::string overlap_text(const Overlap& overlap) {
  std::string text;
  for (const auto& [name, flag] : kOverlapParts) {
    if (!(overlap.*flag)) continue;
    if (!text.empty()) text += '+';
    text += name;
  }
  return text.empty() ? "none" : text;
}

int parse_int(const std::string& key, const std::string& value, int minimum) {
  int out = 0;
  const char* first = value.data();
  const char* last = first + value.size();
  const auto [end, error] = std::from_chars(first, last, out);
  if (value.empty() || error != std::errc() || end != last) {
    invalid("layout: " + key + "=" + value + ": expected a whole number");
  }
  if (out < minimum) {
    invalid("layout: " + key + "=" + value + ": must be at least " + std::to_string(minimum));
  }
  return out;
}

double parse_positive_number(const std::string& key, const std::string& value) {
  double out = 0;
  const char* first = value.data();
  const char* last = first + value.size();
  const auto [end, error] = std::from_chars(first, last, out);
  if (value.empty() || error != std::errc() || end != last || !(out > 0) || !std::isfinite(out)) {
    invalid("layout: " + key + "=" + value + ": expected a positive number");
  }
  return out;
}

bool parse_flag(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "on") return true;
  if (value == "0" || value == "false" || value == "off") return false;
  invalid("layout: " + key + "=" + value + ": expected 0 or 1");
}

Precision parse_precision(const std::string& value) {
  for (Precision p : {Precision::bf16, Precision::fp8, Precision::fp32}) {
    if (value == to_string(p)) return p;
  }
  invalid("layout: precision=" + value + ": expected bf16, fp8 or fp32");
}

AttentionKernel parse_attention(const std::string& value) {
  for (AttentionKernel a : {AttentionKernel::flash, AttentionKernel::materialized}) {
    if (value == to_string(a)) return a;
  }
  invalid("layout: attention=" + value + ": expected flash or materialized");
}

Recompute parse_recompute(const std::string& value) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    if (value == to_string(r)) return r;
  }
  invalid("layout: recompute=" + value + ": expected none, selective or full");
}

std::array<ParallelDim, 3> parse_order(const std::string& value) {
  const std::vector<std::string> names = split(value, '-');
  std::array<ParallelDim, 3> order{};
  std::set<std::string> seen;
  bool ok = names.size() == 3;
  for (size_t i = 0; ok && i < names.size(); ++i) {
    if (names[i] == "tp") {
      order[i] = ParallelDim::tp;
    } else if (names[i] == "dp") {
      order[i] = ParallelDim::dp;
    } else if (names[i] == "pp") {
      order[i] = ParallelDim::pp;
    } else {
      ok = false;
    }
    ok = ok && seen.insert(names[i]).second;
  }
  if (!ok) {
    invalid("layout: order=" + value +
            ": expected tp, dp and pp once each, innermost (fastest varying) first, e.g. "
            "order=tp-dp-pp");
  }
  return order;
}

}  // namespace

const char* to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

const char* to_string(AttentionKernel attention) {
  switch (attention) {
    case AttentionKernel::flash: return "flash";
    case AttentionKernel::materialized: return "materialized";
  }
  return "?";
}

// Mixed-radix rank numbering with order[0] fastest: GPU g has coordinate
// (g / stride(d)) % degree(d) in dimension d, where stride(order[0]) = 1 and each next
// dimension's stride is the product of the degrees before it.
GroupShape Layout::group_of(ParallelDim dim) const {
  int stride = 1;
  for (ParallelDim d : order) {
    if (d == ParallelDim::tp && dim == ParallelDim::tp) return GroupShape{tp, stride};
    if (d == ParallelDim::tp && dim == ParallelDim::cp) return GroupShape{cp, stride * tp};
    if (d == dim) return GroupShape{degree_of(*this, d), stride};
    stride *= degree_of(*this, d);
  }
  return GroupShape{degree_of(*this, dim), stride};
}

GroupShape Layout::gradient_group() const {
  if (cp == 1) return group_of(ParallelDim::dp);
  const GroupShape cp_group = group_of(ParallelDim::cp), dp_group = group_of(ParallelDim::dp);
  if (dp_group.size > 1 && dp_group.stride != cp_group.stride * cp) {
    invalid("layout " + to_string() +
            ": with cp > 1, dp must come right after tp in the order (the gradients reduce "
            "over DP x CP as one group, as in Megatron's tp-cp-dp-pp)");
  }
  return GroupShape{cp * dp, cp_group.stride};
}

GroupShape Layout::expert_group() const {
  if (folded()) return GroupShape{ep, expert_tp()};
  return GroupShape{ep, gradient_group().stride};
}

GroupShape Layout::expert_tp_group() const {
  if (folded()) return GroupShape{expert_tp(), 1};
  return group_of(ParallelDim::tp);
}

GroupShape Layout::expert_gradient_group() const {
  if (folded()) {
    const int expert_ranks = expert_tp() * ep;
    return GroupShape{tp * cp * dp / expert_ranks, expert_ranks};
  }
  const GroupShape gradients = gradient_group();
  return GroupShape{gradients.size / ep, gradients.stride * ep};
}

std::string Layout::to_string() const {
  // Appended piece by piece: GCC 12 gives a false -Wrestrict for long operator+ chains.
  std::string text;
  auto add = [&text](const char* key, const std::string& value) {
    if (!text.empty()) text += ',';
    text += key;
    text += '=';
    text += value;
  };
  add("tp", std::to_string(tp));
  add("pp", std::to_string(pp));
  add("dp", std::to_string(dp));
  add("mb", std::to_string(micro_batch));
  add("gb", std::to_string(global_batch));
  add("sp", sequence_parallel ? "1" : "0");
  add("vp", std::to_string(virtual_stages));
  add("recompute", plan::to_string(recompute));
  std::string dims;
  for (ParallelDim dim : order) {
    if (!dims.empty()) dims += '-';
    dims += dim_name(dim);
  }
  add("order", dims);
  add("zero", std::to_string(zero));
  add("precision", plan::to_string(precision));
  add("attention", plan::to_string(attention));
  add("overlap", overlap_text(overlap));
  if (cp > 1) add("cp", std::to_string(cp));
  if (ep > 1) add("ep", std::to_string(ep));
  if (folded()) add("etp", std::to_string(etp));
  if (capacity != 1) {
    char number[32];
    std::snprintf(number, sizeof number, "%g", capacity);
    add("capacity", number);
  }
  if (first_stage_layers > 0) add("first", std::to_string(first_stage_layers));
  if (last_stage_layers > 0) add("last", std::to_string(last_stage_layers));
  if (bucket_params > 0) add("bucket", std::to_string(bucket_params));
  return text;
}

Layout parse_layout(const std::string& text) {
  Layout layout;
  if (text.empty()) return layout;
  std::set<std::string> seen;
  for (const std::string& part : split(text, ',')) {
    const size_t eq = part.find('=');
    if (part.empty() || eq == std::string::npos) {
      invalid("layout: '" + part + "' in '" + text + "': expected key=value (keys: " + kKeys + ")");
    }
    const std::string key = part.substr(0, eq);
    const std::string value = part.substr(eq + 1);
    if (!seen.insert(key).second) invalid("layout: " + key + " is given twice in '" + text + "'");
    if (key == "tp") {
      layout.tp = parse_int(key, value, 1);
    } else if (key == "pp") {
      layout.pp = parse_int(key, value, 1);
    } else if (key == "cp") {
      layout.cp = parse_int(key, value, 1);
    } else if (key == "ep") {
      layout.ep = parse_int(key, value, 1);
    } else if (key == "etp") {
      layout.etp = parse_int(key, value, 1);
    } else if (key == "capacity") {
      layout.capacity = parse_positive_number(key, value);
    } else if (key == "dp") {
      layout.dp = parse_int(key, value, 1);
    } else if (key == "mb") {
      layout.micro_batch = parse_int(key, value, 1);
    } else if (key == "gb") {
      layout.global_batch = parse_int(key, value, 0);
    } else if (key == "sp") {
      layout.sequence_parallel = parse_flag(key, value);
    } else if (key == "vp") {
      layout.virtual_stages = parse_int(key, value, 1);
    } else if (key == "recompute") {
      layout.recompute = parse_recompute(value);
    } else if (key == "order") {
      layout.order = parse_order(value);
    } else if (key == "zero") {
      layout.zero = parse_int(key, value, 0);
      if (layout.zero > 3) invalid("layout: zero=" + value + ": expected 0, 1, 2 or 3");
    } else if (key == "zero1") {  // the key before ZeRO-2 and -3
      layout.zero = parse_flag(key, value) ? 1 : 0;
    } else if (key == "precision") {
      layout.precision = parse_precision(value);
    } else if (key == "attention") {
      layout.attention = parse_attention(value);
    } else if (key == "overlap") {
      layout.overlap = parse_overlap(value);
    } else if (key == "first") {
      layout.first_stage_layers = parse_int(key, value, 1);
    } else if (key == "last") {
      layout.last_stage_layers = parse_int(key, value, 1);
    } else if (key == "bucket") {
      layout.bucket_params = parse_int(key, value, 1);
    } else {
      invalid("layout: unknown key '" + key + "' in '" + text + "' (keys: " + kKeys + ")");
    }
  }
  if (layout.gpus() > kMaxClusterGpus) {
    invalid("layout: '" + text + "' uses " + std::to_string(layout.gpus()) +
            " GPUs, more than the planner's limit of " + std::to_string(kMaxClusterGpus));
  }
  return layout;
}

}  // namespace tpf::plan
