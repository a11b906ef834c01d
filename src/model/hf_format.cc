#include "model/hf_format.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "tpf/error.h"

namespace tpf {

namespace {

int64_t metadata_int(const SafeTensorsFile& f, const std::string& key, int64_t fallback) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw Error(ErrorCode::invalid_argument,
                "metadata '" + key + "' is not an integer: '" + it->second + "'");
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
  GlobalCheckpoint c;
  ModelConfig& m = c.config.model;
  int64_t layers = 0;
  while (by_name.count("h." + std::to_string(layers) + ".ln_1.weight") > 0) ++layers;
  m.layers = metadata_int(file, "n_layer", layers);
  m.width = metadata_int(file, "n_embd", wte.shape[1]);
  m.context = metadata_int(file, "n_ctx", wpe.shape[0]);
  m.vocab = metadata_int(file, "vocab_size", wte.shape[0]);
  const int64_t h = metadata_int(file, "n_head", heads.value_or(0));
  if (h <= 0) {
    throw Error(ErrorCode::invalid_argument,
                what + ": the head count is not in the file's metadata (n_head); give --heads");
  }
  m.heads = h;
  if (const auto it = file.metadata.find("layer_norm_epsilon"); it != file.metadata.end()) {
    m.layer_norm_eps = std::stof(it->second);
  }
  validate(c.config);
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
  if (c.tensors.size() != by_name.size()) {
    for (const auto& [name, t] : by_name) {
      bool used = false;
      for (const GlobalTensor& g : c.tensors) used = used || g.name == name;
      if (!used) {
        throw Error(ErrorCode::invalid_argument, what + ": unexpected tensor '" + name +
                                                     "' (not part of a GPT-2 model with " +
                                                     std::to_string(m.layers) + " layers)");
      }
    }
  }
  c.tp_size = 1;
  return c;
}

}  // namespace tpf
