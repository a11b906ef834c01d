// A decoder-only transformer as the planner sees it: sizes and the choices that change them
// (GPT: multi-head attention, GeLU MLP, LayerNorm, biases, learned positions, tied embeddings;
// Llama: grouped-query attention, SwiGLU, RMSNorm, no biases, rotary positions, untied). Presets
// follow the published configurations (GPT-3 paper, Table 2.1; Narayanan et al. 2021, Table 1;
// Smith et al. 2022 for 530B; Llama 3, Dubey et al. 2024, Table 3; Mixtral, Jiang et al. 2024);
// files give custom ones. A mixture-of-experts model (experts > 1) replaces every layer's MLP by
// `experts` MLPs of width ffn_hidden and a router that sends each token to top_k of them.
#pragma once

#include <string>
#include <vector>

namespace tpf::plan {

// Parameters of one transformer layer: those tensor parallelism splits (the GEMM weights and the
// column-parallel biases) and those every TP rank keeps whole (norms, row-parallel biases, the
// router); of a mixture of experts, the experts' MLPs apart, which expert parallelism splits too.
struct LayerParameters {
  double sharded = 0, replicated = 0;
  double experts = 0;  // all experts' MLP weights and biases (TP splits them as well)
  double total() const { return sharded + replicated + experts; }
};

struct ModelSpec {
  std::string name = "custom";
  int layers = 24;
  int hidden = 2048;
  int heads = 16;
  int kv_heads = 0;    // key/value heads (grouped-query attention); 0 = heads
  int ffn_hidden = 0;  // 0 = 4 * hidden
  int seq_len = 2048;
  int vocab = 51200;
  int global_batch = 512;         // sequences per step, unless the layout overrides it
  bool gated_mlp = false;         // SwiGLU: gate and up projections, three h x f matrices
  bool rms_norm = false;          // RMSNorm (a scale only) instead of LayerNorm (scale and bias)
  bool biases = true;             // the linear layers have biases
  bool learned_positions = true;  // a learned position embedding (false: rotary, no weights)
  bool tied_embeddings = true;    // the output layer reuses the token embedding
  int experts = 0;                // MLPs per layer of a mixture of experts; 0 or 1 = dense
  int top_k = 0;                  // experts each token is routed to (1..experts; 0 = 2)
  int ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  bool moe() const { return experts > 1; }
  // Experts a token passes through: 1 for a dense model.
  int active_experts() const { return moe() ? (top_k > 0 ? top_k : 2) : 1; }
  int query_groups() const { return kv_heads > 0 ? kv_heads : heads; }
  // The width of K (and of V): query groups x head size.
  double kv_width() const { return static_cast<double>(hidden) / heads * query_groups(); }
  // Multiply-accumulates of a token through one layer's weight GEMMs (QKV, projection, MLP; of a
  // mixture of experts the router and the top_k experts' MLPs).
  double layer_gemm_weights() const;
  // Weights of one MLP (one expert's).
  double mlp_weights() const;
  LayerParameters layer_parameters() const;
  // All parameters (the tied embedding counted once; the final norm left out, as Narayanan et
  // al. 2021 do).
  double parameters() const;
  // Those a token passes through: of a mixture of experts only top_k experts' (Mixtral 8x7B:
  // 12.9e9 of 46.7e9).
  double active_parameters() const;
  // Model FLOPs of one training step of `sequences` (forward + backward, no recomputation; the
  // attention scores counted in full, s x s, as Megatron-LM counts them).
  double step_flops(double sequences) const;
};

// Throws Error(invalid_argument) naming the field (non-positive sizes, hidden not divisible by
// heads, ...).
void validate(const ModelSpec& model);
// gpt-1.3b, gpt-7b, gpt-22b, gpt-70b, gpt-175b, ..., llama3-8b, llama3-70b, llama3-405b
std::vector<std::string> model_preset_names();
ModelSpec model_preset(const std::string& name);
// YAML text; unknown keys are errors; `origin` names the file in messages.
ModelSpec parse_model_yaml(const std::string& text, const std::string& origin);
ModelSpec load_model(const std::string& name_or_path);
std::string model_to_yaml(const ModelSpec& model);

}  // namespace tpf::plan
