#include "plan/model_spec.h"

#include <yaml-cpp/yaml.h>

#include <array>
#include <filesystem>

#include "formats/text_files.h"
#include "plan/invalid_input.h"
#include "plan/yaml_fields.h"
#include "tpf/error.h"

namespace tpf::plan {
namespace {

ModelSpec make(const char* name, int layers, int hidden, int heads, int ffn_hidden, int seq_len,
               int vocab, int global_batch) {
  ModelSpec m;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.ffn_hidden = ffn_hidden;
  m.seq_len = seq_len;
  m.vocab = vocab;
  m.global_batch = global_batch;
  return m;
}

// Llama 3 (Dubey et al. 2024, Table 3): 8 key/value heads, SwiGLU, RMSNorm, no biases, rotary
// positions, untied output layer, 8192-token context; the vocabulary of the released tokenizer
// (128,256; the table rounds it to 128,000). Batch: the 16M tokens (2048 sequences) of the 405B
// model's Table 4 runs, used for all three sizes.
ModelSpec llama3(const char* name, int layers, int hidden, int heads, int ffn_hidden) {
  ModelSpec m = make(name, layers, hidden, heads, ffn_hidden, 8192, 128256, 2048);
  m.kv_heads = 8;
  m.gated_mlp = true;
  m.rms_norm = true;
  m.biases = false;
  m.learned_positions = false;
  m.tied_embeddings = false;
  return m;
}

// Mixtral (Jiang et al. 2024, Table 1; 8x22B from its released configuration): Llama-style
// layers (8 key/value heads, SwiGLU, RMSNorm, no biases, rotary, untied) whose MLP is 8 experts,
// 2 per token; 32,000-token vocabulary (8x22B: 32,768). Sequence 4096 and batch 256 as in
// Megatron-Core's Mixtral benchmarks (the model's own context is 32k).
ModelSpec mixtral(const char* name, int layers, int hidden, int heads, int ffn_hidden, int vocab) {
  ModelSpec m = llama3(name, layers, hidden, heads, ffn_hidden);
  m.vocab = vocab;
  m.seq_len = 4096;
  m.global_batch = 256;
  m.experts = 8;
  m.top_k = 2;
  return m;
}

// Every preset uses Megatron's GPT-2 vocabulary padded to 51,200 (a multiple of 1024, so each of
// up to 8 TP ranks gets a multiple of 128), as Narayanan et al. 2021 and Korthikanti et al. 2022
// do, except the LLaMA-2-sized ones (32,000).
constexpr int kMegatronVocab = 51200;

// The presets, with where each number comes from.
std::vector<ModelSpec> presets() {
  return {
      // GPT-3 XL (Brown et al. 2020, Table 2.1): 24 layers, d_model 2048, batch 1M tokens = 512 x
      // 2048. The table prints 24 heads of 128, which does not multiply to 2048; 16 heads of 128
      // (d_head as printed) is used.
      make("gpt-1.3b", 24, 2048, 16, 0, 2048, kMegatronVocab, 512),
      // LLaMA-2 7B's depth, width, heads, context and vocabulary (Touvron et al. 2023: 32 x 4096,
      // 32 heads, 4096 tokens, 32k vocabulary, batch 4M tokens = 1024 sequences), as a GPT: the
      // SwiGLU MLP's three 4096 x 11008 matrices become two 4096 x 16512 ones (same parameters
      // and GEMM FLOPs per token). 6.63e9 parameters (LLaMA-2: 6.74e9 with an untied output).
      make("gpt-7b", 32, 4096, 32, 16512, 4096, 32000, 1024),
      // Korthikanti et al. 2022, Table 3: 48 x 6144, 64 heads, s = 2048. Their batch of 4 is a
      // single-node benchmark; for planning, the 1024 sequences Narayanan et al. 2021 (Table 1)
      // train their 18.4B model with.
      make("gpt-22b", 48, 6144, 64, 0, 2048, kMegatronVocab, 1024),
      // LLaMA-2 70B's shape (80 x 8192, 64 heads, FFN 28672 SwiGLU, 8 KV heads, 4096 tokens, 32k
      // vocabulary, 4M-token batches) as a GPT with full multi-head attention: the MLP width
      // 35840 gives each layer LLaMA-2's parameters and GEMM FLOPs (4h^2 + 2h*f = 2.25h^2 +
      // 3h*28672). 68.7e9 parameters (LLaMA-2: 69.0e9).
      make("gpt-70b", 80, 8192, 64, 35840, 4096, 32000, 1024),
      // GPT-3 (Brown et al. 2020, Table 2.1): 96 x 12288, 96 heads; batch 3.2M tokens, which
      // Narayanan et al. 2021 run as 1536 sequences.
      make("gpt-175b", 96, 12288, 96, 0, 2048, kMegatronVocab, 1536),
      // MT-NLG (Smith et al. 2022): 105 x 20480, 128 heads, s = 2048, global batch 1920.
      make("gpt-530b", 105, 20480, 128, 0, 2048, kMegatronVocab, 1920),
      // Narayanan et al. 2021, Table 1: 128 x 25600, 160 heads, batch 3072.
      make("gpt-1t", 128, 25600, 160, 0, 2048, kMegatronVocab, 3072),
      llama3("llama3-8b", 32, 4096, 32, 14336),
      llama3("llama3-70b", 80, 8192, 64, 28672),
      llama3("llama3-405b", 126, 16384, 128, 53248),
      mixtral("mixtral-8x7b", 32, 4096, 32, 14336, 32000),
      mixtral("mixtral-8x22b", 56, 6144, 48, 16384, 32768),
  };
}

// A key that names one of two choices; true for the second. Absent: `current`.
bool read_choice(const YamlFields& fields, const char* key, std::array<const char*, 2> choices,
                 bool current) {
  if (!fields.has(key)) return current;
  std::string text;
  fields.read(key, text);
  if (text == choices[0]) return false;
  if (text == choices[1]) return true;
  fields.fail(key, "'" + text + "': expected " + choices[0] + " or " + choices[1]);
}

}  // namespace

double ModelSpec::mlp_weights() const { return (gated_mlp ? 3.0 : 2.0) * hidden * ffn(); }

// QKV h x (h + 2 kv), projection h x h, MLP 2 (3 gated) h x f, top_k of them behind a router
// of h x experts.
double ModelSpec::layer_gemm_weights() const {
  const double h = hidden;
  const double router = moe() ? h * experts : 0;
  return h * (h + 2 * kv_width()) + h * h + router + active_experts() * mlp_weights();
}

// Narayanan et al. 2021, eq. (2) for a GPT: per layer QKV (3h^2 + 3h), projection (h^2 + h),
// MLP (8h^2 + 5h), two LayerNorms (4h): 4h^2 + 2hf + 9h + f with an MLP of width f, of which the
// projection and second MLP biases and the norms (6h) are replicated over TP.
// A mixture of experts holds `experts` such MLPs (each with its own row-parallel bias, kept with
// its expert) and a router of h x experts, which Megatron replicates over TP.
LayerParameters ModelSpec::layer_parameters() const {
  const double h = hidden, f = ffn();
  LayerParameters p;
  p.sharded = h * (h + 2 * kv_width()) + h * h;
  double mlp = mlp_weights();
  if (biases) {
    p.sharded += h + 2 * kv_width();
    mlp += (gated_mlp ? 2 : 1) * f;
  }
  p.replicated = (biases ? 2 * h : 0) + 2 * (rms_norm ? h : 2 * h);
  if (moe()) {
    // The MLP's row-parallel bias (h, counted as replicated above) belongs to each expert.
    const double down_bias = biases ? h : 0;
    p.experts = experts * (mlp + down_bias);
    p.replicated += h * experts - down_bias;
  } else {
    p.sharded += mlp;
  }
  return p;
}

// Layers plus token embedding (twice when untied) and learned positions; with GPT's choices
// 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), Narayanan et al. 2021, eq. (2).
double ModelSpec::parameters() const {
  const double h = hidden;
  return layers * layer_parameters().total() +
         static_cast<double>(vocab) * h * (tied_embeddings ? 1 : 2) +
         (learned_positions ? seq_len * h : 0);
}

double ModelSpec::active_parameters() const {
  const LayerParameters layer = layer_parameters();
  const double inactive = moe() ? layer.experts * (experts - active_experts()) / experts : 0;
  return parameters() - layers * inactive;
}

// Narayanan et al. 2021 (appendix; eq. (3) without the recomputed forward pass): per token and
// layer the forward GEMMs take 2 FLOPs per weight and attention 4 s h (scores and values); the
// logits 2 h V. Backward is twice the forward. For a GPT (f = 4h) this is
// 72 B s l h^2 (1 + s/(6h) + V/(12 h l)).
double ModelSpec::step_flops(double sequences) const {
  const double h = hidden, s = seq_len, l = layers, v = vocab;
  const double layer_forward = 2 * layer_gemm_weights() + 4 * s * h;
  const double forward_per_token = l * layer_forward + 2 * h * v;
  return 3 * sequences * s * forward_per_token;
}

void validate(const ModelSpec& m) {
  const std::string who = "model '" + m.name + "': ";
  auto positive = [&](int value, const char* field) {
    if (value < 1) invalid(who + field + " must be at least 1, got " + std::to_string(value));
  };
  positive(m.layers, "layers");
  positive(m.hidden, "hidden");
  positive(m.heads, "heads");
  positive(m.seq_len, "seq_len");
  positive(m.vocab, "vocab");
  positive(m.global_batch, "global_batch");
  if (m.ffn_hidden < 0) {
    invalid(who + "ffn_hidden must be 0 (4 x hidden) or positive, got " +
            std::to_string(m.ffn_hidden));
  }
  if (m.hidden % m.heads != 0) {
    invalid(who + "hidden (" + std::to_string(m.hidden) + ") must be divisible by heads (" +
            std::to_string(m.heads) + ")");
  }
  if (m.experts < 0)
    invalid(who + "experts must be at least 0 (0 or 1: a dense model), got " +
            std::to_string(m.experts));
  if (!m.moe() && m.top_k > 1) {
    invalid(who + "top_k (" + std::to_string(m.top_k) +
            ") applies to a mixture of experts, and experts (" + std::to_string(m.experts) +
            ") makes this one dense");
  }
  if (m.top_k < 0 || (m.moe() && m.top_k > m.experts)) {
    invalid(who + "top_k (" + std::to_string(m.top_k) +
            ") must be 0 (2) or between 1 and experts (" + std::to_string(m.experts) + ")");
  }
  if (m.kv_heads < 0 || (m.kv_heads > 0 && m.heads % m.kv_heads != 0)) {
    invalid(who + "kv_heads (" + std::to_string(m.kv_heads) +
            ") must be 0 (one per head) or divide heads (" + std::to_string(m.heads) + ")");
  }
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelSpec& m : presets()) names.push_back(m.name);
  return names;
}

ModelSpec model_preset(const std::string& name) {
  for (const ModelSpec& m : presets()) {
    if (m.name == name) return m;
  }
  std::string names;
  for (const std::string& known : model_preset_names()) names += " " + known;
  invalid("unknown model '" + name + "': not a file, and not a preset (presets:" + names + ")");
}

ModelSpec parse_model_yaml(const std::string& text, const std::string& origin) {
  const YAML::Node root = parse_yaml_document(text, origin);
  YamlFields top(root, origin, "",
                 {"name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab",
                  "global_batch", "mlp", "norm", "biases", "positions", "tied_embeddings",
                  "experts", "top_k"});
  // The sizes that define a model have no sensible default.
  for (const char* key : {"layers", "hidden", "heads"}) {
    if (!top.has(key)) top.fail(key, "missing (a model file must give layers, hidden and heads)");
  }
  ModelSpec m;
  top.read("name", m.name);
  top.read("layers", m.layers);
  top.read("hidden", m.hidden);
  top.read("heads", m.heads);
  top.read("kv_heads", m.kv_heads);
  top.read("ffn_hidden", m.ffn_hidden);
  top.read("seq_len", m.seq_len);
  top.read("vocab", m.vocab);
  top.read("global_batch", m.global_batch);
  m.gated_mlp = read_choice(top, "mlp", {"gelu", "swiglu"}, m.gated_mlp);
  m.rms_norm = read_choice(top, "norm", {"layernorm", "rmsnorm"}, m.rms_norm);
  m.learned_positions = !read_choice(top, "positions", {"learned", "rope"}, !m.learned_positions);
  top.read("biases", m.biases);
  top.read("tied_embeddings", m.tied_embeddings);
  top.read("experts", m.experts);
  top.read("top_k", m.top_k);
  try {
    validate(m);
  } catch (const Error& e) {
    invalid(origin + ": " + e.what());
  }
  return m;
}

ModelSpec load_model(const std::string& name_or_path) {
  // A name that is no file is a preset's; an existing file that cannot be read is an error.
  std::error_code ignored;
  if (!std::filesystem::exists(name_or_path, ignored)) return model_preset(name_or_path);
  return parse_model_yaml(read_text_file(name_or_path, "model file"), name_or_path);
}

std::string model_to_yaml(const ModelSpec& m) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << m.name;
  out << YAML::Key << "layers" << YAML::Value << m.layers;
  out << YAML::Key << "hidden" << YAML::Value << m.hidden;
  out << YAML::Key << "heads" << YAML::Value << m.heads;
  out << YAML::Key << "kv_heads" << YAML::Value << m.kv_heads;
  out << YAML::Key << "ffn_hidden" << YAML::Value << m.ffn_hidden;
  out << YAML::Key << "seq_len" << YAML::Value << m.seq_len;
  out << YAML::Key << "vocab" << YAML::Value << m.vocab;
  out << YAML::Key << "global_batch" << YAML::Value << m.global_batch;
  out << YAML::Key << "mlp" << YAML::Value << (m.gated_mlp ? "swiglu" : "gelu");
  out << YAML::Key << "norm" << YAML::Value << (m.rms_norm ? "rmsnorm" : "layernorm");
  out << YAML::Key << "biases" << YAML::Value << m.biases;
  out << YAML::Key << "positions" << YAML::Value << (m.learned_positions ? "learned" : "rope");
  out << YAML::Key << "tied_embeddings" << YAML::Value << m.tied_embeddings;
  out << YAML::Key << "experts" << YAML::Value << m.experts;
  out << YAML::Key << "top_k" << YAML::Value << m.top_k;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace tpf::plan
