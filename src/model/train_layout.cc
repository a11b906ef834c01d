#include "model/train_layout.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "tpf/error.h"

namespace tpf {

namespace {

[[noreturn]] void bad_layout(const std::string& why) {
  throw Error(ErrorCode::invalid_argument, "--layout: " + why);
}

int parse_size(const std::string& key, const std::string& value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < 1 || v > kMaxTpSize) {
    bad_layout(key + "=" + value + " is not a size between 1 and " + std::to_string(kMaxTpSize));
  }
  return v;
}

}  // namespace

std::string TrainLayout::to_string() const {
  return "tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) + ",dp=" + std::to_string(dp) +
         (vp > 1 ? ",vp=" + std::to_string(vp) : "") + (zero1 ? ",zero1" : "") +
         (first_layers > 0 ? ",first=" + std::to_string(first_layers) : "") +
         (last_layers > 0 ? ",last=" + std::to_string(last_layers) : "");
}

TrainLayout parse_train_layout(const std::string& text) {
  TrainLayout layout;
  bool seen[6] = {false, false, false, false, false, false};
  size_t at = 0;
  if (text.empty()) bad_layout("empty; give sizes such as tp=2,pp=2,dp=2");
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string part = text.substr(at, comma - at);
    at = comma + 1;
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq);
    if (part == "zero1") {
      if (layout.zero1) bad_layout("'zero1' is given twice in '" + text + "'");
      layout.zero1 = true;
      continue;
    }
    int* const sizes[6] = {&layout.tp,           &layout.pp,          &layout.dp,
                           &layout.first_layers, &layout.last_layers, &layout.vp};
    const char* const keys[6] = {"tp", "pp", "dp", "first", "last", "vp"};
    int* size = nullptr;
    bool* was_seen = nullptr;
    for (int i = 0; i < 6; ++i) {
      if (key == keys[i]) {
        size = sizes[i];
        was_seen = &seen[i];
      }
    }
    if (size == nullptr) {
      if (key == "mb" || key == "order" || key == "sp") {
        bad_layout("'" + key + "' is not supported by tpf train yet" +
                   (key == "sp" ? " in --layout; use --sequence-parallel" : ""));
      }
      bad_layout("'" + part + "' is not tp=N, pp=N, dp=N, vp=N, zero1, first=N or last=N (in '" +
                 text + "')");
    }
    if (eq == std::string::npos) bad_layout("'" + key + "' needs a size, as in " + key + "=2");
    if (*was_seen) bad_layout("'" + key + "' is given twice in '" + text + "'");
    *was_seen = true;
    *size = parse_size(key, part.substr(eq + 1));
  }
  return layout;
}

void check_train_layout(const TrainLayout& l, int world_size, const RunConfig& config) {
  const ModelConfig& m = config.model;
  const TrainConfig& t = config.train;
  if (l.ranks() != world_size) {
    bad_layout(l.to_string() + " needs " + std::to_string(l.ranks()) + " ranks (tp x pp x dp), " +
               "but the job has " + std::to_string(world_size) + "; start it with `tpf run -n " +
               std::to_string(l.ranks()) + "` or change the sizes");
  }
  if (l.pp > m.layers) {
    bad_layout("pp=" + std::to_string(l.pp) + " pipeline stages, but the model has only " +
               std::to_string(m.layers) + " layer" + (m.layers == 1 ? "" : "s") +
               "; a stage needs at least one");
  }
  if ((l.first_layers > 0 || l.last_layers > 0) && l.pp < 2) {
    bad_layout("first= and last= size the end stages of a pipeline; give pp=2 or more");
  }
  if (l.first_layers > 0 || l.last_layers > 0) {
    // What the end stages leave must give every other stage a layer (and where no stage is
    // left, be nothing).
    const int64_t first = l.first_layers, last = l.last_layers;
    const int64_t ends_given = (first > 0 ? 1 : 0) + (last > 0 ? 1 : 0);
    const int64_t others = l.pp - ends_given;  // stages sized by the default split
    const int64_t rest = m.layers - first - last;
    const std::string given = std::string(first > 0 ? "first=" + std::to_string(first) : "") +
                              (ends_given == 2 ? " and " : "") +
                              (last > 0 ? "last=" + std::to_string(last) : "");
    const std::string model_layers = "the model's " + std::to_string(m.layers) + " layers";
    if (rest < 0 || (others == 0 && rest != 0)) {
      bad_layout(given + (ends_given == 1 ? " is " : " add up to ") + std::to_string(first + last) +
                 " layers" +
                 (others == 0 ? "; with pp=2 they must add up to " + model_layers
                              : ", more than " + model_layers));
    }
    if (rest < others) {
      bad_layout(given + " leave" + (ends_given == 1 ? "s " : " ") + std::to_string(rest) + " of " +
                 model_layers + " for the other " + std::to_string(others) + " stage" +
                 (others == 1 ? "" : "s") + ", which need at least one each");
    }
  }
  if (l.vp > 1) {
    const std::string vp = "vp=" + std::to_string(l.vp);
    if (l.pp < 2) bad_layout(vp + " interleaves the stages of a pipeline; give pp=2 or more");
    if (l.first_layers > 0 || l.last_layers > 0) {
      bad_layout(vp +
                 " gives every chunk of every stage the same number of layers; leave out "
                 "first= and last=");
    }
    if (m.layers % (l.pp * l.vp) != 0) {
      bad_layout("pp=" + std::to_string(l.pp) + " x " + vp + " = " + std::to_string(l.pp * l.vp) +
                 " chunks of equal size, but the model has " + std::to_string(m.layers) +
                 " layers; choose sizes whose product divides them");
    }
    if (t.grad_accum % l.dp == 0 && (t.grad_accum / l.dp) % l.pp != 0) {
      bad_layout(vp + ": each data-parallel rank's " + std::to_string(t.grad_accum / l.dp) +
                 " micro-batches (train.grad_accum / dp) must be a multiple of pp=" +
                 std::to_string(l.pp) +
                 ", as the interleaved schedule runs them in groups of one per stage");
    }
  }
  if (m.heads % l.tp != 0) {
    bad_layout("tp=" + std::to_string(l.tp) + " does not divide the model's " +
               std::to_string(m.heads) + " attention heads");
  }
  if (t.grad_accum % l.dp != 0) {
    bad_layout("dp=" + std::to_string(l.dp) + " does not divide train.grad_accum (" +
               std::to_string(t.grad_accum) +
               " micro-batches per step): each data-parallel rank runs an equal share of them; "
               "set train.grad_accum to a multiple of dp");
  }
  if (t.sequence_parallel && (t.batch_size * m.context) % l.tp != 0) {
    bad_layout("with sequence parallelism, tp=" + std::to_string(l.tp) +
               " must divide the rows of a micro-batch (train.batch_size x model.context = " +
               std::to_string(t.batch_size * m.context) + ")");
  }
}

namespace {

// The layers of each stage (see pipeline_stage).
std::vector<int64_t> stage_layer_counts(const ModelConfig& model, const TrainLayout& layout) {
  const int stages = layout.pp;
  std::vector<int64_t> counts(stages, 0);
  if (layout.first_layers > 0) counts.front() = layout.first_layers;
  if (layout.last_layers > 0) counts.back() = layout.last_layers;
  // The stages not given share the rest equally; where it does not divide, the extra layers go
  // one each to the last of them but the last stage, counting back (that one computes the output
  // layer, so it takes none while another stage can).
  std::vector<int> open;
  int64_t rest = model.layers;
  for (int s = 0; s < stages; ++s) {
    if (counts[s] == 0) open.push_back(s);
    rest -= counts[s];
  }
  if (open.empty()) return counts;
  const int64_t n = static_cast<int64_t>(open.size());
  int64_t extra = rest % n;
  for (const int s : open) counts[s] = rest / n;
  for (int64_t i = n - 1; i >= 0 && extra > 0; --i) {
    if (open[i] == stages - 1 && n > 1) continue;
    ++counts[open[i]];
    --extra;
  }
  return counts;
}

}  // namespace

StageSpan pipeline_stage(const ModelConfig& model, const TrainLayout& layout, int stage) {
  if (layout.vp > 1) {  // chunk c holds virtual stage c pp + stage
    const int64_t per_chunk = model.layers / (layout.pp * layout.vp);
    StageSpan span;
    span.first_layer = stage * per_chunk;
    span.end_layer = span.first_layer + per_chunk;
    span.first = stage == 0;
    span.last = stage == layout.pp - 1;
    span.chunks = layout.vp;
    span.chunk_stride = layout.pp * per_chunk;
    return span;
  }
  const std::vector<int64_t> counts = stage_layer_counts(model, layout);
  StageSpan span;
  span.first_layer = 0;
  for (int s = 0; s < stage; ++s) span.first_layer += counts[s];
  span.end_layer = span.first_layer + counts[stage];
  span.first = stage == 0;
  span.last = stage == layout.pp - 1;
  return span;
}

LayoutCoords coords_of(const TrainLayout& l, int world_rank) {
  return {world_rank % l.tp, world_rank / l.tp % l.dp, world_rank / (l.tp * l.dp)};
}

}  // namespace tpf
