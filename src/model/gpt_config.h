// What a GPT is (ModelConfig) and how it is trained (TrainConfig), with named presets and a JSON
// file format:
//   {"preset": "small",                      optional: start from a preset
//    "model": {"layers": 4, "heads": 4, "width": 256, "context": 128, "vocab": 256,
//              "dropout": 0.0, "layer_norm_eps": 1e-5},
//    "train": {"batch_size": 16, "grad_accum": 1, "steps": 1000, "lr": 3e-3, "min_lr": 3e-4,
//              "warmup": 50, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8,
//              "clip": 1.0, "sequence_parallel": false, "log_every": 10,
//              "checkpoint_every": 200}}
// Every key is optional; unknown keys are errors (a typo must not silently train another model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"

namespace tpf {

struct ModelConfig {
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t width = 64;
  int64_t context = 32;
  int64_t vocab = 256;  // bytes
  float dropout = 0.0f;
  float layer_norm_eps = 1e-5f;
  int64_t mlp_width() const { return 4 * width; }
};

struct TrainConfig {
  int64_t batch_size = 8;  // sequences per micro-batch
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  int64_t steps = 100;
  double lr = 3e-3;
  double min_lr = 3e-4;  // the cosine decays to this at the last step
  int64_t warmup = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double clip = 1.0;  // global gradient norm; 0 disables clipping
  bool sequence_parallel = false;
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;  // 0: only at the end
};

struct RunConfig {
  std::string preset;  // the preset it started from, "" if none
  ModelConfig model;
  TrainConfig train;
};

std::vector<std::string> preset_names();
// Throws tpf::Error(invalid_argument) listing the presets if the name is unknown.
RunConfig preset_config(const std::string& name);
// Reads the JSON format above; errors name the file and the key.
RunConfig load_config_file(const std::string& path);
RunConfig parse_config(const std::string& json_text, const std::string& what);
RunConfig config_from_json(const json::Value& root, const std::string& what);
std::string config_to_json(const RunConfig& config);
json::Value config_to_json_value(const RunConfig& config);
// Throws if the model cannot be built or trained as configured (naming the setting).
void validate(const RunConfig& config);

}  // namespace tpf
