#include "model/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "formats/json.h"
#include "formats/text_files.h"
#include "model/parse_number.h"
#include "model/safetensors.h"
#include "parallel/vocab_parallel.h"
#include "tpf/error.h"

namespace tpf {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tpfabric-checkpoint-v1";
constexpr const char* kManifest = "checkpoint.json";
constexpr const char* kEmbedding = "wte.weight";

std::string rank_file(int rank, int tp_size) {
  return "rank-" + std::to_string(rank) + "-of-" + std::to_string(tp_size) + ".safetensors";
}

json::Value shape_json(const Shape& shape) {
  json::Value a = json::Array{};
  for (int64_t d : shape) a.push_back(d);
  return a;
}

// The same tensor with `rows` rows: the vocabulary's padding depends on the TP size.
Tensor with_rows(const Tensor& t, int64_t rows) {
  if (t.dim(0) == rows) return t;
  Shape shape = t.shape();
  shape[0] = rows;
  Tensor out(shape, t.dtype());
  const size_t row_bytes = t.bytes() / static_cast<size_t>(t.dim(0));
  std::memcpy(out.data(), t.data(), row_bytes * static_cast<size_t>(std::min(rows, t.dim(0))));
  return out;
}

std::string manifest_text(const GlobalCheckpoint& c, int tp_size) {
  json::Value files = json::Array{};
  for (int r = 0; r < tp_size; ++r) files.push_back(rank_file(r, tp_size));
  json::Value m;
  m.set("format", kFormat);
  m.set("step", c.step);
  m.set("tp_size", tp_size);
  m.set("seed", static_cast<int64_t>(c.seed));
  m.set("config", config_to_json_value(c.config));
  m.set("files", std::move(files));
  return json::dump(m) + "\n";
}

// One rank's file from that rank's slices (value and, if given, moments) of each tensor.
struct Slice {
  std::string name;
  Shape global_shape;
  ShardSpec shard;
  const Tensor* value;
  const Tensor* exp_avg;
  const Tensor* exp_avg_sq;
};

void write_rank_file(const std::string& dir, int rank, int tp_size, const GlobalCheckpoint& header,
                     const std::vector<Slice>& slices) {
  SafeTensorsFile file;
  json::Value shards;
  for (const Slice& s : slices) {
    file.tensors.push_back(to_safe_tensor(s.name, *s.value));
    if (s.exp_avg != nullptr) {
      file.tensors.push_back(to_safe_tensor(s.name + ".exp_avg", *s.exp_avg));
      file.tensors.push_back(to_safe_tensor(s.name + ".exp_avg_sq", *s.exp_avg_sq));
    }
    json::Value info;
    info.set("global_shape", shape_json(s.global_shape));
    info.set("dim", s.shard.dim);
    info.set("blocks", s.shard.blocks);
    shards.set(s.name, std::move(info));
  }
  file.metadata["format"] = kFormat;
  file.metadata["rank"] = std::to_string(rank);
  file.metadata["tp_size"] = std::to_string(tp_size);
  file.metadata["step"] = std::to_string(header.step);
  file.metadata["seed"] = std::to_string(header.seed);
  file.metadata["config"] = config_to_json(header.config);
  file.metadata["shards"] = json::dump(shards);
  write_safetensors((fs::path(dir) / rank_file(rank, tp_size)).string(), file);
}

}  // namespace

const GlobalTensor& GlobalCheckpoint::at(const std::string& name) const {
  for (const GlobalTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw Error(ErrorCode::invalid_argument, "the checkpoint has no tensor '" + name + "'");
}

namespace {

// Pipeline stages other than the first send their slices to it, so that a checkpoint is the same
// files at every layout: first a JSON list of the slices (name, global shape, sharding), then each
// slice's value and moments. The last stage's copy of the tied embedding is not sent.
struct ReceivedSlice {
  Slice slice;
  Tensor value, exp_avg, exp_avg_sq;
};

std::vector<Slice> own_slices(Gpt& model, AdamW* optimizer) {
  std::vector<Slice> slices;
  const auto& params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = *params[i];
    if (&p == model.tied_embedding_copy()) continue;
    slices.push_back({p.name, p.global_shape, p.shard, &p.value,
                      optimizer ? &optimizer->first_moments()[i] : nullptr,
                      optimizer ? &optimizer->second_moments()[i] : nullptr});
  }
  return slices;
}

void send_slices(Communicator& pipeline, const std::vector<Slice>& slices) {
  json::Value list = json::Array{};
  for (const Slice& s : slices) {
    json::Value info;
    info.set("name", s.name);
    info.set("global_shape", shape_json(s.global_shape));
    info.set("local_shape", shape_json(s.value->shape()));
    info.set("dim", s.shard.dim);
    info.set("blocks", s.shard.blocks);
    list.push_back(std::move(info));
  }
  const std::string text = json::dump(list);
  int64_t length = static_cast<int64_t>(text.size());
  pipeline.send(&length, 1, DType::i64, 0);
  pipeline.send(text.data(), text.size(), DType::u8, 0);
  for (const Slice& s : slices) {
    for (const Tensor* t : {s.value, s.exp_avg, s.exp_avg_sq}) {
      if (t != nullptr) pipeline.send(t->data(), static_cast<size_t>(t->numel()), DType::f32, 0);
    }
  }
}

Shape shape_of(const json::Value& a) {
  Shape shape;
  for (const json::Value& d : a.as_array()) shape.push_back(d.as_int());
  return shape;
}

void receive_slices(Communicator& pipeline, int stage, bool with_moments,
                    std::vector<std::unique_ptr<ReceivedSlice>>& out) {
  int64_t length = 0;
  pipeline.recv(&length, 1, DType::i64, stage);
  std::string text(static_cast<size_t>(length), '\0');
  pipeline.recv(text.data(), text.size(), DType::u8, stage);
  const json::Value list = json::parse(text, "stage " + std::to_string(stage) + "'s slices");
  for (const json::Value& info : list.as_array()) {
    auto r = std::make_unique<ReceivedSlice>();
    const Shape local = shape_of(info.at("local_shape"));
    r->value = Tensor(local);
    pipeline.recv(r->value.data(), static_cast<size_t>(r->value.numel()), DType::f32, stage);
    if (with_moments) {
      r->exp_avg = Tensor(local);
      r->exp_avg_sq = Tensor(local);
      pipeline.recv(r->exp_avg.data(), static_cast<size_t>(r->exp_avg.numel()), DType::f32, stage);
      pipeline.recv(r->exp_avg_sq.data(), static_cast<size_t>(r->exp_avg_sq.numel()), DType::f32,
                    stage);
    }
    r->slice = {info.at("name").as_string(),
                shape_of(info.at("global_shape")),
                ShardSpec{static_cast<int>(info.at("dim").as_int()),
                          static_cast<int>(info.at("blocks").as_int())},
                &r->value,
                with_moments ? &r->exp_avg : nullptr,
                with_moments ? &r->exp_avg_sq : nullptr};
    out.push_back(std::move(r));
  }
}

}  // namespace

void save_checkpoint(TpGroup& tp, const std::string& dir, const RunConfig& config, uint64_t seed,
                     Gpt& model, AdamW* optimizer, Communicator* pipeline) {
  std::vector<Slice> slices = own_slices(model, optimizer);
  if (pipeline != nullptr && pipeline->rank() > 0) {
    send_slices(*pipeline, slices);
    return;
  }
  std::vector<std::unique_ptr<ReceivedSlice>> received;
  for (int stage = 1; pipeline != nullptr && stage < pipeline->size(); ++stage) {
    receive_slices(*pipeline, stage, optimizer != nullptr, received);
  }
  for (const auto& r : received) slices.push_back(r->slice);
  fs::create_directories(dir);
  GlobalCheckpoint header;
  header.config = config;
  header.seed = seed;
  header.step = optimizer != nullptr ? optimizer->steps_taken() : 0;
  write_rank_file(dir, tp.rank(), tp.size(), header, slices);
  tp.comm->barrier();  // every file is complete before the manifest says so
  if (tp.rank() == 0) {
    write_text_file_atomically((fs::path(dir) / kManifest).string(),
                               manifest_text(header, tp.size()));
  }
  tp.comm->barrier();
}

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::exists(fs::path(path) / kManifest)) return path;
  const fs::path latest = fs::path(path) / "checkpoints" / "latest";
  if (fs::exists(latest)) {
    std::string name = read_text_file(latest.string(), "checkpoint pointer");
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const fs::path dir = fs::path(path) / "checkpoints" / name;
    if (fs::exists(dir / kManifest)) return dir.string();
  }
  throw Error(ErrorCode::invalid_argument,
              "'" + path + "' is neither a checkpoint (no " + kManifest +
                  ") nor a training output directory with checkpoints/latest");
}

namespace {

// A rank file's metadata entry `key` as an integer in [lo, hi], naming the file.
int64_t rank_file_int(const SafeTensorsFile& f, const std::string& file, const std::string& key,
                      int64_t lo, int64_t hi) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) {
    throw Error(ErrorCode::invalid_argument, file + ": no '" + key + "' in its metadata");
  }
  return parse_integer(it->second, lo, hi, file + ": metadata '" + key + "'");
}

// The tensors the shards metadata lists must be exactly those the configuration's model has, with
// the same global shapes: otherwise a small file with a large configuration would make the reader
// build a model the files do not hold.
void check_tensors_match_config(const json::Value& shards, const ModelConfig& model, int tp_size,
                                const std::string& config_file, const std::string& rank0_file) {
  const std::vector<ParameterShape> expected =
      gpt_parameter_shapes(model, padded_vocab(model.vocab, tp_size));
  if (!shards.is_object()) {
    throw Error(ErrorCode::invalid_argument, rank0_file + ": 'shards' metadata is not an object");
  }
  auto summary = [&] {
    return " (" + config_file + " describes " + std::to_string(model.layers) + " layers, width " +
           std::to_string(model.width) + ", context " + std::to_string(model.context) + ", vocab " +
           std::to_string(model.vocab) + ": " + std::to_string(expected.size()) + " tensors; " +
           rank0_file + " holds " + std::to_string(shards.size()) + ")";
  };
  for (const ParameterShape& p : expected) {
    const json::Value* info = shards.find(p.name);
    if (info == nullptr) {
      throw Error(ErrorCode::invalid_argument, rank0_file + " has no tensor '" + p.name +
                                                   "' of the configured model" + summary());
    }
    Shape got;
    for (const json::Value& d : info->at("global_shape").as_array()) got.push_back(d.as_int());
    if (got != p.shape) {
      throw Error(ErrorCode::invalid_argument,
                  rank0_file + ": tensor '" + p.name + "' has global shape " + shape_string(got) +
                      ", the configured model's is " + shape_string(p.shape) + summary());
    }
    const int64_t dim = info->at("dim").as_int(), blocks = info->at("blocks").as_int();
    if (dim < -1 || dim >= static_cast<int64_t>(got.size()) || blocks < 1 || blocks > 3) {
      throw Error(ErrorCode::invalid_argument,
                  rank0_file + ": tensor '" + p.name + "' has an invalid sharding (dim " +
                      std::to_string(dim) + ", blocks " + std::to_string(blocks) + ")");
    }
  }
  if (shards.size() != expected.size()) {
    for (const auto& [name, info] : shards.as_object()) {
      bool known = false;
      for (const ParameterShape& p : expected) known = known || p.name == name;
      if (!known) {
        throw Error(
            ErrorCode::invalid_argument,
            rank0_file + ": tensor '" + name + "' is not part of the configured model" + summary());
      }
    }
  }
}

}  // namespace

GlobalCheckpoint read_checkpoint(const std::string& path) {
  const std::string dir = resolve_checkpoint_dir(path);
  const std::string manifest_path = (fs::path(dir) / kManifest).string();
  const json::Value manifest =
      json::parse(read_text_file(manifest_path, "checkpoint manifest"), manifest_path);
  if (!manifest.is_object() || !manifest.find("format") ||
      manifest.at("format").as_string() != kFormat) {
    throw Error(ErrorCode::invalid_argument, manifest_path + ": not a " + kFormat + " manifest");
  }
  GlobalCheckpoint c;
  c.step = manifest.at("step").as_int();
  const int64_t tp_size = manifest.at("tp_size").as_int();
  c.seed = static_cast<uint64_t>(manifest.at("seed").as_int());
  if (c.step < 0 || c.step > kMaxSteps) {
    throw Error(ErrorCode::invalid_argument,
                manifest_path + ": step " + std::to_string(c.step) + " is out of range");
  }
  if (tp_size < 1 || tp_size > kMaxTpSize) {
    throw Error(ErrorCode::invalid_argument, manifest_path + ": tp_size " +
                                                 std::to_string(tp_size) + " is not in [1, " +
                                                 std::to_string(kMaxTpSize) + "]");
  }
  c.tp_size = static_cast<int>(tp_size);
  c.config = config_from_json(manifest.at("config"), manifest_path + " config");
  const json::Value& files = manifest.at("files");
  if (!files.is_array() || files.size() != static_cast<size_t>(c.tp_size)) {
    throw Error(ErrorCode::invalid_argument,
                manifest_path + ": tp_size " + std::to_string(c.tp_size) + " but " +
                    std::to_string(files.is_array() ? files.size() : 0) + " files are listed");
  }
  std::vector<SafeTensorsFile> ranks;
  std::vector<std::string> names;
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string file = (fs::path(dir) / files.at(r).as_string()).string();
    SafeTensorsFile f = read_safetensors(file);
    // Each file says which rank and TP size it was written for: a file copied over another
    // rank's would otherwise load silently into the wrong slices.
    const auto format = f.metadata.find("format");
    if (format == f.metadata.end() || format->second != kFormat) {
      throw Error(ErrorCode::invalid_argument, file + ": not a " + kFormat + " rank file");
    }
    const int64_t rank = rank_file_int(f, file, "rank", 0, kMaxTpSize - 1);
    const int64_t saved_tp = rank_file_int(f, file, "tp_size", 1, kMaxTpSize);
    const int64_t step = rank_file_int(f, file, "step", 0, kMaxSteps);
    if (rank != static_cast<int64_t>(r) || saved_tp != c.tp_size) {
      throw Error(ErrorCode::invalid_argument,
                  file + " holds rank " + std::to_string(rank) + " of TP size " +
                      std::to_string(saved_tp) + ", but " + manifest_path + " lists it as rank " +
                      std::to_string(r) + " of " + std::to_string(c.tp_size) +
                      "; the checkpoint's files were swapped or mixed: restore them");
    }
    if (step != c.step) {
      throw Error(ErrorCode::invalid_argument,
                  file + " was saved at step " + std::to_string(step) + ", but " + manifest_path +
                      " is of step " + std::to_string(c.step) +
                      "; the checkpoint's files were mixed from different checkpoints");
    }
    if (r > 0 && f.metadata["shards"] != ranks.front().metadata["shards"]) {
      throw Error(ErrorCode::invalid_argument,
                  file + ": its 'shards' metadata differs from " + names.front() + "'s");
    }
    ranks.push_back(std::move(f));
    names.push_back(file);
  }
  const auto it = ranks.front().metadata.find("shards");
  if (it == ranks.front().metadata.end()) {
    throw Error(ErrorCode::invalid_argument, names.front() + ": no 'shards' metadata");
  }
  const json::Value shards = json::parse(it->second, names.front() + " shards metadata");
  check_tensors_match_config(shards, c.config.model, c.tp_size, manifest_path, names.front());
  for (const auto& [name, info] : shards.as_object()) {
    GlobalTensor g;
    g.name = name;
    g.shard = ShardSpec{static_cast<int>(info.at("dim").as_int()),
                        static_cast<int>(info.at("blocks").as_int())};
    auto assemble = [&](const std::string& key) {
      std::vector<Tensor> slices;
      for (size_t r = 0; r < ranks.size(); ++r) {
        const SafeTensor* t = ranks[r].find(key);
        if (t == nullptr) {
          throw Error(ErrorCode::invalid_argument, names[r] + ": no tensor '" + key + "'");
        }
        slices.push_back(tensor_of(*t));
      }
      return global_from_slices(slices, g.shard);
    };
    g.value = assemble(name);
    if (ranks.front().find(name + ".exp_avg") != nullptr) {
      g.exp_avg = assemble(name + ".exp_avg");
      g.exp_avg_sq = assemble(name + ".exp_avg_sq");
    }
    Shape want;
    for (const json::Value& d : info.at("global_shape").as_array()) want.push_back(d.as_int());
    if (g.value.shape() != want) {
      throw Error(ErrorCode::invalid_argument, dir + ": tensor '" + name + "' assembles to " +
                                                   shape_string(g.value.shape()) +
                                                   " but its metadata says " + shape_string(want));
    }
    c.tensors.push_back(std::move(g));
  }
  return c;
}

void load_into(const GlobalCheckpoint& c, int rank, int tp_size, Gpt& model, AdamW* optimizer) {
  const auto& params = model.parameters();
  const bool with_moments = optimizer != nullptr;
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    const GlobalTensor& g = c.at(p.name);
    if (g.shard.dim != p.shard.dim || g.shard.blocks != p.shard.blocks) {
      throw Error(ErrorCode::invalid_argument,
                  "checkpoint tensor '" + p.name + "' is sharded differently from the model's");
    }
    const int64_t rows = p.global_shape[0];
    auto local = [&](const Tensor& global) {
      Tensor t = slice_of_global(p.name == kEmbedding ? with_rows(global, rows) : global, p.shard,
                                 rank, tp_size);
      if (t.shape() != p.value.shape()) {
        throw Error(ErrorCode::invalid_argument,
                    "checkpoint tensor '" + p.name + "' has global shape " +
                        shape_string(global.shape()) + ", the model expects " +
                        shape_string(p.global_shape));
      }
      return t;
    };
    p.value = local(g.value);
    if (with_moments && !g.exp_avg.empty()) {
      optimizer->first_moments()[i] = local(g.exp_avg);
      optimizer->second_moments()[i] = local(g.exp_avg_sq);
    }
  }
  if (with_moments) optimizer->set_steps_taken(c.step);
}

void write_checkpoint_files(const std::string& dir, const GlobalCheckpoint& c, int tp_size) {
  const int64_t heads = c.config.model.heads;
  if (tp_size < 1 || tp_size > kMaxTpSize || heads % tp_size != 0) {
    throw Error(ErrorCode::invalid_argument,
                "TP size " + std::to_string(tp_size) + ": the model's " + std::to_string(heads) +
                    " heads do not split over " + std::to_string(tp_size) +
                    " tensor-parallel ranks (whole heads per rank); use a TP size that divides " +
                    std::to_string(heads));
  }
  fs::create_directories(dir);
  const int64_t vocab_rows = padded_vocab(c.config.model.vocab, tp_size);
  for (int r = 0; r < tp_size; ++r) {
    std::vector<Tensor> owned;  // keeps the slices alive while the file is written
    owned.reserve(c.tensors.size() * 3);
    std::vector<Slice> slices;
    for (const GlobalTensor& g : c.tensors) {
      auto cut = [&](const Tensor& t) -> const Tensor* {
        if (t.empty()) return nullptr;
        try {
          owned.push_back(slice_of_global(g.name == kEmbedding ? with_rows(t, vocab_rows) : t,
                                          g.shard, r, tp_size));
        } catch (const Error& e) {
          throw Error(e.code(), "tensor '" + g.name + "': " + e.what());
        }
        return &owned.back();
      };
      Shape global_shape = g.value.shape();
      if (g.name == kEmbedding) global_shape[0] = vocab_rows;
      const Tensor* value = cut(g.value);
      const Tensor* m = cut(g.exp_avg);
      const Tensor* v = m != nullptr ? cut(g.exp_avg_sq) : nullptr;
      slices.push_back({g.name, global_shape, g.shard, value, m, v});
    }
    write_rank_file(dir, r, tp_size, c, slices);
  }
  write_text_file_atomically((fs::path(dir) / kManifest).string(), manifest_text(c, tp_size));
}

std::string checkpoint_dir_for_step(const std::string& out_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%07lld", static_cast<long long>(step));
  return (fs::path(out_dir) / "checkpoints" / name).string();
}

void mark_latest(const std::string& out_dir, int64_t step, int keep) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  write_text_file_atomically(
      (root / "latest").string(),
      fs::path(checkpoint_dir_for_step(out_dir, step)).filename().string() + "\n");
  // Keep the newest `keep` checkpoints: names sort by step.
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) {
      dirs.push_back(e.path());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < dirs.size(); ++i) fs::remove_all(dirs[i]);
}

}  // namespace tpf
