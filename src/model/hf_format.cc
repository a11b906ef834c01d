#include "model/hf_format.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "model/parse_number.h"
#include "tpf/error.h"

namespace tpf {

namespace {

// The metadata entry `key` as an integer in [lo, hi], or nullopt if absent.
std::optional<int64_t> metadata_int(const SafeTensorsFile& f, const std::string& key, int64_t lo,
                                    int64_t hi, const std::string& what) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) return std::nullopt;
  return parse_integer(it->second, lo, hi, what + ": metadata '" + key + "'");
}

// A dimension the tensors themselves give (`tensors_say` how); the metadata, if it names it, must
// agree.
int64_t dimension(const SafeTensorsFile& f, const std::string& key, int64_t from_tensors,
                  const std::string& tensors_say, int64_t hi, const std::string& what) {
  const std::optional<int64_t> v = metadata_int(f, key, 1, hi, what);
  if (v && *v != from_tensors) {
    throw Error(ErrorCode::invalid_argument,
                what + ": metadata '" + key + "' says " + std::to_string(*v) + " but " +
                    tensors_say + "; the metadata does not describe the tensors in the file");
  }
  return from_tensors;
}

// validate() with the file named.
template <typename Config>
void validate_from(const Config& config, const std::string& what) {
  try {
    validate(config);
  } catch (const Error& e) {
    throw Error(e.code(), what + ": " + e.what());
  }
}

}  // namespace

SafeTensorsFile export_hf(const GlobalCheckpoint& c) {
  const ModelConfig& m = c.config.model;
  SafeTensorsFile f;
  f.metadata["format"] = "pt";
  f.metadata["n_layer"] = std::to_string(m.layers);
  f.metadata["n_head"] = std::to_string(m.heads);
  f.metadata["n_embd"] = std::to_string(m.width);
  f.metadata["n_ctx"] = std::to_string(m.context);
  f.metadata["vocab_size"] = std::to_string(m.vocab);
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.9g", static_cast<double>(m.layer_norm_eps));
  f.metadata["layer_norm_epsilon"] = eps;
  f.metadata["tpfabric_config"] = config_to_json(c.config);
  f.metadata["tpfabric_step"] = std::to_string(c.step);
  f.metadata["tpfabric_seed"] = std::to_string(c.seed);
  for (const GlobalTensor& g : c.tensors) {
    if (g.name == "wte.weight") {
      Tensor rows({m.vocab, m.width});
      std::memcpy(rows.data(), g.value.data(), rows.bytes());
      f.tensors.push_back(to_safe_tensor(g.name, rows));
    } else {
      f.tensors.push_back(to_safe_tensor(g.name, g.value));
    }
  }
  return f;
}

GlobalCheckpoint import_hf(const SafeTensorsFile& file, std::optional<int64_t> heads,
                           const std::string& what) {
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : file.tensors) {
    std::string name = t.name;
    if (name.rfind("transformer.", 0) == 0) name = name.substr(12);
    if (name.size() > 10 && (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))) {
      continue;  // causal-mask buffers, not parameters
    }
    if (name == "lm_head.weight") continue;  // tied to wte
    by_name[name] = &t;
  }
  auto tensor = [&](const std::string& name) -> const SafeTensor& {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      throw Error(ErrorCode::invalid_argument, what + ": no tensor '" + name + "'");
    }
    if (it->second->dtype != DType::f32) {
      throw Error(ErrorCode::invalid_argument, what + ": tensor '" + name + "' is " +
                                                   dtype_name(it->second->dtype) +
                                                   "; only f32 checkpoints can be imported today");
    }
    return *it->second;
  };
  const SafeTensor& wte = tensor("wte.weight");
  const SafeTensor& wpe = tensor("wpe.weight");
  if (wte.shape.size() != 2 || wpe.shape.size() != 2) {
    throw Error(ErrorCode::invalid_argument, what + ": wte/wpe must be matrices");
  }
  if (wte.shape[0] < 1 || wte.shape[1] < 1 || wpe.shape[1] != wte.shape[1]) {
    throw Error(ErrorCode::invalid_argument, what + ": wte.weight " + shape_string(wte.shape) +
                                                 " and wpe.weight " + shape_string(wpe.shape) +
                                                 " do not describe one width");
  }
  GlobalCheckpoint c;
  ModelConfig& m = c.config.model;
  // Every size comes from the tensors present (so it is bounded by the file's size); the
  // metadata, where it names one, must agree before anything is allocated.
  int64_t layers = 0;
  while (by_name.count("h." + std::to_string(layers) + ".ln_1.weight") > 0) ++layers;
  const std::string wte_shape = "wte.weight is " + shape_string(wte.shape);
  m.layers = dimension(file, "n_layer", layers,
                       "the file holds the tensors of " + std::to_string(layers) + " layers",
                       kMaxLayers, what);
  m.width = dimension(file, "n_embd", wte.shape[1], wte_shape, kMaxWidth, what);
  m.context = dimension(file, "n_ctx", wpe.shape[0], "wpe.weight is " + shape_string(wpe.shape),
                        kMaxContext, what);
  m.vocab = dimension(file, "vocab_size", wte.shape[0], wte_shape, kMaxVocab, what);
  const std::optional<int64_t> h = metadata_int(file, "n_head", 1, kMaxWidth, what);
  if (!h && !heads) {
    throw Error(ErrorCode::invalid_argument,
                what + ": the head count is not in the file's metadata (n_head); give --heads");
  }
  m.heads = h ? *h : *heads;
  if (const auto it = file.metadata.find("layer_norm_epsilon"); it != file.metadata.end()) {
    m.layer_norm_eps = static_cast<float>(
        parse_real(it->second, 1e-30, 1.0, what + ": metadata 'layer_norm_epsilon'"));
  }
  validate_from(m, what);
  // What `tpf export` adds: the training configuration, step and seed, so that an exported and
  // re-imported checkpoint resumes as the original would.
  if (const auto it = file.metadata.find("tpfabric_config"); it != file.metadata.end()) {
    const RunConfig saved = parse_config(it->second, what + ": metadata 'tpfabric_config'");
    const ModelConfig& s = saved.model;
    if (s.layers != m.layers || s.heads != m.heads || s.width != m.width ||
        s.context != m.context || s.vocab != m.vocab || s.layer_norm_eps != m.layer_norm_eps) {
      throw Error(ErrorCode::invalid_argument,
                  what +
                      ": metadata 'tpfabric_config' describes another model than the tensors "
                      "and the GPT-2 metadata (n_layer, n_head, n_embd, n_ctx, vocab_size, "
                      "layer_norm_epsilon)");
    }
    c.config = saved;
  }
  if (const auto it = file.metadata.find("tpfabric_step"); it != file.metadata.end()) {
    c.step = parse_integer(it->second, 0, kMaxSteps, what + ": metadata 'tpfabric_step'");
  }
  if (const auto it = file.metadata.find("tpfabric_seed"); it != file.metadata.end()) {
    c.seed = parse_unsigned(it->second, UINT64_MAX, what + ": metadata 'tpfabric_seed'");
  }
  validate_from(c.config, what);
  // The tensors present must be exactly the model's, with its shapes, before the model is built.
  const std::vector<ParameterShape> expected = gpt_parameter_shapes(m, m.vocab);
  for (const ParameterShape& p : expected) {
    const SafeTensor& t = tensor(p.name);
    if (t.shape != p.shape) {
      throw Error(ErrorCode::invalid_argument, what + ": tensor '" + p.name + "' has shape " +
                                                   shape_string(t.shape) + ", the model expects " +
                                                   shape_string(p.shape));
    }
  }
  if (expected.size() != by_name.size()) {  // every expected name is present: there are extras
    for (const auto& [name, t] : by_name) {
      bool used = false;
      for (const ParameterShape& p : expected) used = used || p.name == name;
      if (!used) {
        throw Error(ErrorCode::invalid_argument, what + ": unexpected tensor '" + name +
                                                     "' (not part of a GPT-2 model with " +
                                                     std::to_string(m.layers) + " layers)");
      }
    }
  }
  // Build an unsharded model to learn names, shapes and shard specs, then fill it.
  Gpt shapes(m, 0, 1, 0);
  for (const Parameter* p : shapes.parameters()) {
    const SafeTensor& s = tensor(p->name);
    Shape want = p->global_shape;
    if (p->name == "wte.weight") want[0] = m.vocab;
    if (s.shape != want) {
      throw Error(ErrorCode::invalid_argument, what + ": tensor '" + p->name + "' has shape " +
                                                   shape_string(s.shape) + ", the model expects " +
                                                   shape_string(want));
    }
    GlobalTensor g;
    g.name = p->name;
    g.shard = p->shard;
    g.value = Tensor(s.shape);
    std::memcpy(g.value.data(), s.data.data(), g.value.bytes());
    c.tensors.push_back(std::move(g));
  }
  c.tp_size = 1;
  return c;
}

}  // namespace tpf
