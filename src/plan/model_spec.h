// A GPT-style model as the planner sees it: sizes only. Presets follow the published
// configurations (GPT-3 paper, Table 2.1; Narayanan et al. 2021, Table 1; Smith et al. 2022 for
// 530B); files give custom ones.
#pragma once

#include <string>
#include <vector>

namespace tpf::plan {

struct ModelSpec {
  std::string name = "custom";
  int layers = 24;
  int hidden = 2048;
  int heads = 16;
  int ffn_hidden = 0;  // 0 = 4 * hidden
  int seq_len = 2048;
  int vocab = 51200;
  int global_batch = 512;  // sequences per step, unless the layout overrides it
  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  // Parameters (weights and biases, tied embedding counted once, learned positions).
  double parameters() const;
  // Model FLOPs of one training step of `sequences` (forward + backward, no recomputation).
  double step_flops(double sequences) const;
};

// Throws Error(invalid_argument) naming the field (non-positive sizes, hidden not divisible by
// heads, ...).
void validate(const ModelSpec& model);
std::vector<std::string> model_preset_names();  // gpt-1.3b, gpt-7b, gpt-22b, gpt-70b, gpt-175b, ...
ModelSpec model_preset(const std::string& name);
// YAML text; unknown keys are errors; `origin` names the file in messages.
ModelSpec parse_model_yaml(const std::string& text, const std::string& origin);
ModelSpec load_model(const std::string& name_or_path);
std::string model_to_yaml(const ModelSpec& model);

}  // namespace tpf::plan
