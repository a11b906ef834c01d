#include "model/train_layout.h"

#include <charconv>

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
         (zero1 ? ",zero1" : "");
}

TrainLayout parse_train_layout(const std::string& text) {
  TrainLayout layout;
  bool seen[3] = {false, false, false};
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
    int* size = key == "tp"   ? &layout.tp
                : key == "pp" ? &layout.pp
                : key == "dp" ? &layout.dp
                              : nullptr;
    if (size == nullptr) {
      if (key == "vp" || key == "mb" || key == "order" || key == "sp") {
        bad_layout("'" + key + "' is not supported by tpf train yet" +
                   (key == "sp" ? " in --layout; use --sequence-parallel" : ""));
      }
      bad_layout("'" + part + "' is not tp=N, pp=N, dp=N or zero1 (in '" + text + "')");
    }
    if (eq == std::string::npos) bad_layout("'" + key + "' needs a size, as in " + key + "=2");
    bool& was_seen = seen[size == &layout.tp ? 0 : size == &layout.pp ? 1 : 2];
    if (was_seen) bad_layout("'" + key + "' is given twice in '" + text + "'");
    was_seen = true;
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

StageSpan pipeline_stage(const ModelConfig& model, int stages, int stage) {
  const int64_t base = model.layers / stages, extra = model.layers % stages;
  // Stages P-1-extra .. P-2 take one more layer each (the first where extra = P - 1).
  auto layers_before = [&](int64_t s) {
    const int64_t first_long = stages - 1 - extra;
    return s * base + std::max<int64_t>(0, std::min(s, int64_t{stages} - 1) - first_long);
  };
  StageSpan span;
  span.first_layer = layers_before(stage);
  span.end_layer = stage == stages - 1 ? model.layers : layers_before(stage + 1);
  span.first = stage == 0;
  span.last = stage == stages - 1;
  return span;
}

LayoutCoords coords_of(const TrainLayout& l, int world_rank) {
  return {world_rank % l.tp, world_rank / l.tp % l.dp, world_rank / (l.tp * l.dp)};
}

}  // namespace tpf
