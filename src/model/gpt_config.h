// What a GPT is (ModelConfig) and how it is trained (TrainConfig), with named presets and a JSON
// file format:
//   {"preset": "small",                      optional: start from a preset
//    "model": {"layers": 4, "heads": 4, "width": 256, "context": 128, "vocab": 256,
//              "dropout": 0.0, "layer_norm_eps": 1e-5},
//    "train": {"batch_size": 16, "grad_accum": 1, "steps": 1000, "lr": 3e-3, "min_lr": 3e-4,
//              "warmup": 50, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8,
//              "clip": 1.0, "sequence_parallel": false, "tp_comm_overlap": false,
//              "dp_comm_overlap": true, "log_every": 10, "checkpoint_every": 200}}
// Every key is optional; unknown keys are errors (a typo must not silently train another model).
//
// Sizes are bounded (the kMax constants below) far above any model this CPU project trains, so
// that every size derived from them (parameter counts, activation elements, bytes) stays far from
// int64 overflow: a configuration or a file's metadata is small text and must not be able to make
// tpfabric overflow or allocate without bound. Whether a model fits this machine's memory is
// checked separately, against the memory it has (training_memory_lower_bound).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/json.h"

namespace tpf {

// Upper bounds of validate(). Together they keep parameters (< 2^49) and activation elements
// (< 2^57) of any valid configuration far from int64 overflow.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 16;
constexpr int64_t kMaxContext = int64_t{1} << 16;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxBatchSize = int64_t{1} << 20;
constexpr int64_t kMaxGradAccum = int64_t{1} << 16;
constexpr int64_t kMaxTokensPerMicroBatch = int64_t{1} << 24;  // batch_size x context
constexpr int64_t kMaxSteps = int64_t{1} << 40;
// Tensor-parallel sizes (a TP size must also divide the head count).
constexpr int64_t kMaxTpSize = 4096;

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
  // Overlap of communication with compute; the numbers are the same either way. The fabric
  // progresses an async collective on a thread of its own, which on a machine with a core per rank
  // competes with the GEMM it should hide behind: measured with bench/train/layouts.py (small,
  // tp=2, 2 cores) the TP overlap costs 5 %, so it is off by default; the DP overlap is even.
  bool tp_comm_overlap = false;  // input-gradient reduction during the weight-gradient GEMM
  bool dp_comm_overlap = true;   // DP gradient sums (buckets, ZeRO-1's reduces) during the
                                 // last backward pass
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
void validate(const ModelConfig& model);

// Elements of all parameters of the unsharded model (vocabulary not padded). Valid configs only.
int64_t parameter_count(const ModelConfig& model);
// Bytes one rank of a TP group of tp_size certainly needs to train `config` (weights, gradients,
// AdamW moments and the activations of one micro-batch, without any temporary): a run whose lower
// bound exceeds the machine's memory cannot succeed. Computed in double, so it cannot overflow.
double training_memory_lower_bound(const RunConfig& config, int tp_size);

}  // namespace tpf
