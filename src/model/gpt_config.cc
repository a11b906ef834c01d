#include "model/gpt_config.h"

#include <cmath>
#include <functional>

#include "formats/json.h"
#include "formats/text_files.h"
#include "model/parse_number.h"
#include "tpf/error.h"

namespace tpf {

namespace {

struct Preset {
  const char* name;
  const char* purpose;
  RunConfig config;
};

RunConfig make(int64_t layers, int64_t heads, int64_t width, int64_t context, int64_t batch,
               int64_t steps, double lr, int64_t warmup) {
  RunConfig c;
  c.model.layers = layers;
  c.model.heads = heads;
  c.model.width = width;
  c.model.context = context;
  c.train.batch_size = batch;
  c.train.steps = steps;
  c.train.lr = lr;
  c.train.min_lr = lr / 10;
  c.train.warmup = warmup;
  return c;
}

// Sizes are chosen for a 2-core machine: `tiny` trains in seconds (tests), `small` learns
// recognizable English words in a few minutes (the main job), `gpt-6x768` is the GEMM-bound
// model of the performance benchmark (GPT-2 small's width, 6 layers).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = [] {
    std::vector<Preset> p;
    p.push_back({"tiny", "2 layers, width 64: trains in seconds at TP 1, 2 and 4 (tests)",
                 make(2, 4, 64, 32, 8, 200, 3e-3, 10)});
    p.push_back({"small", "4 layers, width 128, context 128: the main job, ~2.5 min on 2 cores",
                 make(4, 4, 128, 128, 16, 1500, 3e-3, 50)});
    p.back().config.train.checkpoint_every = 500;
    p.push_back({"gpt-6x768", "6 layers, width 768, 12 heads: GEMM-bound benchmark model",
                 make(6, 12, 768, 256, 8, 50, 6e-4, 5)});
    for (auto& preset : p) preset.config.preset = preset.name;
    return p;
  }();
  return kPresets;
}

std::string context_of(const std::string& what, const std::string& key) {
  return what + ": \"" + key + "\"";
}

// Applies the members of `section` to the fields registered in `setters`; unknown keys are errors.
using Setter = std::function<void(const json::Value&)>;
void apply_section(const json::Value& section,
                   const std::vector<std::pair<std::string, Setter>>& setters,
                   const std::string& what) {
  if (!section.is_object()) {
    throw Error(ErrorCode::invalid_argument, what + " must be a JSON object");
  }
  for (const auto& [key, value] : section.as_object()) {
    bool known = false;
    for (const auto& [name, set] : setters) {
      if (name != key) continue;
      known = true;
      try {
        set(value);
      } catch (const Error& e) {
        throw Error(ErrorCode::invalid_argument, context_of(what, key) + ": " + e.what());
      }
    }
    if (!known) {
      std::string names;
      for (const auto& s : setters) names += (names.empty() ? "" : ", ") + s.first;
      throw Error(ErrorCode::invalid_argument,
                  context_of(what, key) + " is not a known setting (known: " + names + ")");
    }
  }
}

Setter int_setter(int64_t& field) {
  return [&field](const json::Value& v) { field = v.as_int(); };
}
Setter double_setter(double& field) {
  return [&field](const json::Value& v) { field = v.as_double(); };
}
Setter float_setter(float& field) {
  return [&field](const json::Value& v) { field = static_cast<float>(v.as_double()); };
}
Setter bool_setter(bool& field) {
  return [&field](const json::Value& v) { field = v.as_bool(); };
}

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorCode::invalid_argument, "configuration: " + message);
}

// " (got v)", for the range errors of validate(). Appended rather than " (got " + ...: GCC 12
// warns -Wrestrict on that form, wrongly.
std::string got(int64_t v) { return std::string(" (got ").append(std::to_string(v)).append(")"); }

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.name);
  return names;
}

RunConfig preset_config(const std::string& name) {
  std::string known;
  for (const auto& p : presets()) {
    if (p.name == name) return p.config;
    known += std::string(known.empty() ? "" : "\n  ") + p.name + ": " + p.purpose;
  }
  throw Error(ErrorCode::invalid_argument,
              "unknown preset '" + name + "'; the presets are:\n  " + known);
}

RunConfig parse_config(const std::string& text, const std::string& what) {
  return config_from_json(json::parse(text, what), what);
}

RunConfig config_from_json(const json::Value& root, const std::string& what) {
  RunConfig c;
  if (const json::Value* preset = root.is_object() ? root.find("preset") : nullptr) {
    c = preset_config(preset->as_string());
  }
  ModelConfig& m = c.model;
  TrainConfig& t = c.train;
  const std::vector<std::pair<std::string, Setter>> model_keys = {
      {"layers", int_setter(m.layers)},
      {"heads", int_setter(m.heads)},
      {"width", int_setter(m.width)},
      {"context", int_setter(m.context)},
      {"vocab", int_setter(m.vocab)},
      {"dropout", float_setter(m.dropout)},
      {"layer_norm_eps", float_setter(m.layer_norm_eps)}};
  const std::vector<std::pair<std::string, Setter>> train_keys = {
      {"batch_size", int_setter(t.batch_size)},
      {"grad_accum", int_setter(t.grad_accum)},
      {"steps", int_setter(t.steps)},
      {"lr", double_setter(t.lr)},
      {"min_lr", double_setter(t.min_lr)},
      {"warmup", int_setter(t.warmup)},
      {"weight_decay", double_setter(t.weight_decay)},
      {"beta1", double_setter(t.beta1)},
      {"beta2", double_setter(t.beta2)},
      {"adam_eps", double_setter(t.adam_eps)},
      {"clip", double_setter(t.clip)},
      {"sequence_parallel", bool_setter(t.sequence_parallel)},
      {"tp_comm_overlap", bool_setter(t.tp_comm_overlap)},
      {"dp_comm_overlap", bool_setter(t.dp_comm_overlap)},
      {"log_every", int_setter(t.log_every)},
      {"checkpoint_every", int_setter(t.checkpoint_every)}};
  const std::vector<std::pair<std::string, Setter>> top_keys = {
      {"preset", [](const json::Value&) {}},
      {"model", [&](const json::Value& v) { apply_section(v, model_keys, what + " model"); }},
      {"train", [&](const json::Value& v) { apply_section(v, train_keys, what + " train"); }}};
  apply_section(root, top_keys, what);
  try {
    validate(c);
  } catch (const Error& e) {
    throw Error(e.code(), what + ": " + e.what());  // name the file the setting came from
  }
  return c;
}

RunConfig load_config_file(const std::string& path) {
  return parse_config(read_text_file(path, "config file"), path);
}

json::Value config_to_json_value(const RunConfig& c) {
  json::Value model;
  model.set("layers", c.model.layers);
  model.set("heads", c.model.heads);
  model.set("width", c.model.width);
  model.set("context", c.model.context);
  model.set("vocab", c.model.vocab);
  model.set("dropout", static_cast<double>(c.model.dropout));
  model.set("layer_norm_eps", static_cast<double>(c.model.layer_norm_eps));
  json::Value train;
  train.set("batch_size", c.train.batch_size);
  train.set("grad_accum", c.train.grad_accum);
  train.set("steps", c.train.steps);
  train.set("lr", c.train.lr);
  train.set("min_lr", c.train.min_lr);
  train.set("warmup", c.train.warmup);
  train.set("weight_decay", c.train.weight_decay);
  train.set("beta1", c.train.beta1);
  train.set("beta2", c.train.beta2);
  train.set("adam_eps", c.train.adam_eps);
  train.set("clip", c.train.clip);
  train.set("sequence_parallel", c.train.sequence_parallel);
  train.set("tp_comm_overlap", c.train.tp_comm_overlap);
  train.set("dp_comm_overlap", c.train.dp_comm_overlap);
  train.set("log_every", c.train.log_every);
  train.set("checkpoint_every", c.train.checkpoint_every);
  json::Value root;
  if (!c.preset.empty()) root.set("preset", c.preset);
  root.set("model", std::move(model));
  root.set("train", std::move(train));
  return root;
}

std::string config_to_json(const RunConfig& c) { return json::dump(config_to_json_value(c)); }

void validate(const ModelConfig& m) {
  auto in_range = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
  require(in_range(m.layers, 1, kMaxLayers),
          "model.layers must be " + range_text(1, kMaxLayers) + got(m.layers));
  require(in_range(m.width, 1, kMaxWidth),
          "model.width must be " + range_text(1, kMaxWidth) + got(m.width));
  require(m.heads >= 1 && m.heads <= m.width && m.width % m.heads == 0,
          "model.width (" + std::to_string(m.width) + ") must be a positive multiple of heads (" +
              std::to_string(m.heads) + ")");
  require(in_range(m.context, 2, kMaxContext),
          "model.context must be " + range_text(2, kMaxContext) + got(m.context));
  require(in_range(m.vocab, 2, kMaxVocab), "model.vocab must be in [2, 2^24]" + got(m.vocab));
  require(m.dropout >= 0 && m.dropout < 1, "model.dropout must be in [0, 1)");
  require(m.layer_norm_eps > 0 && std::isfinite(m.layer_norm_eps),
          "model.layer_norm_eps must be positive and finite");
}

void validate(const RunConfig& c) {
  const ModelConfig& m = c.model;
  const TrainConfig& t = c.train;
  validate(m);
  require(t.batch_size >= 1 && t.batch_size <= kMaxBatchSize,
          "train.batch_size must be " + range_text(1, kMaxBatchSize) + got(t.batch_size));
  // Both factors are bounded above, so the product cannot overflow.
  require(t.batch_size * m.context <= kMaxTokensPerMicroBatch,
          "train.batch_size x model.context (" + std::to_string(t.batch_size) + " x " +
              std::to_string(m.context) + ") must be at most " +
              std::to_string(kMaxTokensPerMicroBatch) +
              " tokens per micro-batch; use train.grad_accum for larger batches");
  require(t.grad_accum >= 1 && t.grad_accum <= kMaxGradAccum,
          "train.grad_accum must be " + range_text(1, kMaxGradAccum) + got(t.grad_accum));
  require(t.steps >= 1 && t.steps <= kMaxSteps,
          "train.steps must be " + range_text(1, kMaxSteps) + got(t.steps));
  require(t.lr > 0 && t.min_lr >= 0 && t.min_lr <= t.lr, "train.lr > 0 and 0 <= min_lr <= lr");
  require(t.warmup >= 0, "train.warmup must not be negative");
  require(t.weight_decay >= 0, "train.weight_decay must not be negative");
  require(t.beta1 >= 0 && t.beta1 < 1 && t.beta2 >= 0 && t.beta2 < 1,
          "train.beta1 and beta2 must be in [0, 1)");
  require(t.adam_eps > 0, "train.adam_eps must be positive");
  require(t.clip >= 0, "train.clip must not be negative (0 disables clipping)");
  require(t.log_every >= 1, "train.log_every must be at least 1");
  require(t.checkpoint_every >= 0, "train.checkpoint_every must not be negative");
}

int64_t parameter_count(const ModelConfig& m) {
  // Per block: two LayerNorms (2 x 2w), QKV (w x 3w + 3w), projection (w x w + w), MLP
  // (w x 4w + 4w, 4w x w + w): 12 w^2 + 13 w. Bounded by the kMax limits: below 2^49.
  const int64_t w = m.width;
  return m.layers * (12 * w * w + 13 * w) + m.vocab * w + m.context * w + 2 * w;
}

double training_memory_lower_bound(const RunConfig& c, int tp_size) {
  const ModelConfig& m = c.model;
  const double tp = tp_size;
  const double params = static_cast<double>(parameter_count(m)) / tp;
  const double tokens = static_cast<double>(c.train.batch_size) * static_cast<double>(m.context);
  const double w = static_cast<double>(m.width);
  const double heads = static_cast<double>(m.heads) / tp;
  const double ctx = static_cast<double>(m.context);
  // Saved for backward per block, at least: attention probabilities [batch, heads, ctx, ctx], the
  // QKV output (3w) and the MLP's hidden activations (4w) of this rank's columns; then the logits.
  const double per_block =
      static_cast<double>(c.train.batch_size) * heads * ctx * ctx + tokens * 7.0 * w / tp;
  const double activations =
      static_cast<double>(m.layers) * per_block + tokens * static_cast<double>(m.vocab) / tp;
  return 4.0 * (4.0 * params + activations);  // f32: weights, gradients, two AdamW moments
}

}  // namespace tpf
