#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "parallel/dropout.h"
#include "parallel/region_ops.h"
#include "tensor/kernels.h"
#include "tpf/error.h"

namespace tpf {

namespace {

constexpr float kInitStd = 0.02f;  // GPT-2's initializer range
constexpr float kPositionInitStd =
    0.01f;  // GPT-2 (Radford et al. 2019) initializes positions smaller

// GPT-2 scales the residual projections by 1/sqrt(2 * layers) so the residual stream's variance
// does not grow with depth.
float projection_std(const ModelConfig& c) {
  return kInitStd / std::sqrt(2.0f * static_cast<float>(c.layers));
}

std::string block_name(int64_t index) { return "h." + std::to_string(index); }

ParallelTensor add(ParallelTensor a, const ParallelTensor& b, const char* who) {
  if (!(a.placement == b.placement) || a.local.shape() != b.local.shape()) {
    throw Error(ErrorCode::invalid_argument,
                std::string(who) + ": cannot add a " + b.placement.to_string() + " tensor " +
                    shape_string(b.local.shape()) + " to a " + a.placement.to_string() +
                    " tensor " + shape_string(a.local.shape()));
  }
  add_into(a.local.f32(), b.local.f32(), a.local.numel());
  return a;
}

}  // namespace

std::vector<ParameterShape> gpt_parameter_shapes(const ModelConfig& c, int64_t vocab_rows) {
  const int64_t w = c.width, h = c.mlp_width();
  std::vector<ParameterShape> out;
  out.reserve(static_cast<size_t>(4 + 12 * c.layers));
  out.push_back({"wte.weight", {vocab_rows, w}});
  out.push_back({"wpe.weight", {c.context, w}});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string b = block_name(i);
    out.push_back({b + ".ln_1.weight", {w}});
    out.push_back({b + ".ln_1.bias", {w}});
    out.push_back({b + ".attn.c_attn.weight", {w, 3 * w}});
    out.push_back({b + ".attn.c_attn.bias", {3 * w}});
    out.push_back({b + ".attn.c_proj.weight", {w, w}});
    out.push_back({b + ".attn.c_proj.bias", {w}});
    out.push_back({b + ".ln_2.weight", {w}});
    out.push_back({b + ".ln_2.bias", {w}});
    out.push_back({b + ".mlp.c_fc.weight", {w, h}});
    out.push_back({b + ".mlp.c_fc.bias", {h}});
    out.push_back({b + ".mlp.c_proj.weight", {h, w}});
    out.push_back({b + ".mlp.c_proj.bias", {w}});
  }
  out.push_back({"ln_f.weight", {w}});
  out.push_back({"ln_f.bias", {w}});
  return out;
}

GptBlock::GptBlock(const ModelConfig& c, int64_t index, int tp_size)
    : ln_1(block_name(index) + ".ln_1", c.width, c.layer_norm_eps),
      attn(block_name(index) + ".attn", c.width, c.heads, tp_size, kInitStd, projection_std(c)),
      ln_2(block_name(index) + ".ln_2", c.width, c.layer_norm_eps),
      mlp(block_name(index) + ".mlp", c.width, c.mlp_width(), kInitStd, projection_std(c)),
      dropout_(c.dropout) {}

void GptBlock::collect(std::vector<Parameter*>& out) {
  ln_1.collect(out);
  attn.collect(out);
  ln_2.collect(out);
  mlp.collect(out);
}

ParallelTensor GptBlock::forward(TpGroup& tp, const ParallelTensor& x, int64_t batch, int64_t seq,
                                 RngKey dropout_key) {
  attn_key_ = dropout_key.derive(stream_of(attn.qkv.weight.name));
  mlp_key_ = dropout_key.derive(stream_of(mlp.fc.weight.name));
  ParallelTensor o =
      attn.forward(tp, ln_1.forward(tp, x), batch, seq, dropout_, attn_key_.derive(1));
  apply_dropout(tp, o, dropout_, attn_key_.derive(2));
  ParallelTensor x1 = add(x, o, "attention residual");
  ParallelTensor f = mlp.forward(tp, ln_2.forward(tp, x1));
  apply_dropout(tp, f, dropout_, mlp_key_);
  return add(std::move(x1), f, "MLP residual");
}

ParallelTensor GptBlock::backward(TpGroup& tp, const ParallelTensor& dy) {
  ParallelTensor df = dy;
  apply_dropout(tp, df, dropout_, mlp_key_);
  ParallelTensor dx1 = add(ln_2.backward(tp, mlp.backward(tp, df)), dy, "MLP residual gradient");
  ParallelTensor d_attn = dx1;
  apply_dropout(tp, d_attn, dropout_, attn_key_.derive(2));
  return add(ln_1.backward(tp, attn.backward(tp, d_attn)), dx1, "attention residual gradient");
}

void GptBlock::restore_saved(Saved s) {
  ln_1.restore_saved(std::move(s.ln_1));
  ln_2.restore_saved(std::move(s.ln_2));
  attn.restore_saved(std::move(s.attn));
  mlp.restore_saved(std::move(s.mlp));
  attn_key_ = s.attn_key;
  mlp_key_ = s.mlp_key;
}

ParallelTensor GptBlock::forward_cached(TpGroup& tp, const ParallelTensor& x, KvCache& cache) {
  ParallelTensor x1 = add(x, attn.forward_cached(tp, ln_1.forward(tp, x), cache), "residual");
  ParallelTensor f = mlp.forward(tp, ln_2.forward(tp, x1));
  return add(std::move(x1), f, "residual");
}

namespace {

StageSpan resolved(const StageSpan& span, int64_t layers) {
  StageSpan s = span;
  if (s.end_layer < 0) s.end_layer = layers;
  if (s.chunks < 1 || (s.chunks > 1 && s.chunk_stride < s.layers_per_chunk())) {
    throw Error(ErrorCode::invalid_argument,
                "GPT stage: " + std::to_string(s.chunks) + " chunks of " +
                    std::to_string(s.layers_per_chunk()) + " layers " +
                    std::to_string(s.chunk_stride) + " apart overlap or are none");
  }
  const int64_t end_of_last_chunk = s.end_layer + (s.chunks - 1) * s.chunk_stride;
  if (s.first_layer < 0 || s.first_layer >= s.end_layer || end_of_last_chunk > layers) {
    throw Error(ErrorCode::invalid_argument,
                "GPT stage: layers [" + std::to_string(s.first_layer) + ", " +
                    std::to_string(s.end_layer) + ")" +
                    (s.chunks > 1 ? " and " + std::to_string(s.chunks - 1) + " more chunks " +
                                        std::to_string(s.chunk_stride) + " layers apart"
                                  : "") +
                    " are not non-empty ranges of the model's " + std::to_string(layers) +
                    " layers");
  }
  if (s.first != (s.first_layer == 0) || s.last != (end_of_last_chunk == layers)) {
    throw Error(
        ErrorCode::invalid_argument,
        "GPT stage: the first stage must start at layer 0 and the last end at the last layer");
  }
  return s;
}

}  // namespace

Gpt::Gpt(const ModelConfig& config, int tp_rank, int tp_size, uint64_t seed, StageSpan stage)
    : config_(config),
      stage_(resolved(stage, config.layers)),
      wte_("wte.weight", config.vocab, config.width, tp_size, kInitStd),
      ln_f_("ln_f", config.width, config.layer_norm_eps) {
  wpe_.name = "wpe.weight";
  wpe_.global_shape = {config.context, config.width};
  wpe_.init = Init::normal;
  wpe_.init_std = kPositionInitStd;
  wpe_.weight_decay = true;
  for (int c = 0; c < stage_.chunks; ++c) {
    const int64_t offset = c * stage_.chunk_stride;
    for (int64_t i = stage_.first_layer; i < stage_.end_layer; ++i) {
      blocks_.push_back(std::make_unique<GptBlock>(config, i + offset, tp_size));
    }
  }
  // The global parameter order (gpt_parameter_shapes), restricted to the stage; the last stage's
  // tied copy goes last.
  if (stage_.first) {
    wte_.collect(params_);
    params_.push_back(&wpe_);
  }
  for (auto& b : blocks_) b->collect(params_);
  if (stage_.last) {
    ln_f_.collect(params_);
    if (!stage_.first) wte_.collect(params_);
  }
  for (Parameter* p : params_) initialize(*p, seed, tp_rank, tp_size);
  if (!stage_.first && !stage_.last) return;
  // Padded vocabulary rows stay zero: they are never looked up and masked out of the softmax.
  const int64_t width = config.width;
  float* table = wte_.weight.value.f32();
  for (int64_t r = 0; r < wte_.weight.value.dim(0); ++r) {
    if (wte_.first_row(tp_rank) + r >= config.vocab) std::fill_n(table + r * width, width, 0.0f);
  }
}

std::pair<size_t, size_t> Gpt::chunk_blocks(int chunk) const {
  if (chunk < 0 || chunk >= stage_.chunks) {
    throw Error(ErrorCode::invalid_argument, "GPT: chunk " + std::to_string(chunk) +
                                                 " of a stage with " +
                                                 std::to_string(stage_.chunks) + " chunks");
  }
  const auto n = static_cast<size_t>(stage_.layers_per_chunk());
  return {static_cast<size_t>(chunk) * n, static_cast<size_t>(chunk + 1) * n};
}

Gpt::Activations Gpt::stash_activations(int chunk) {
  Activations a{batch_, seq_, first_row_, dropout_key_, embed_key_, {}, {}};
  if (chunk == 0) a.embedding = wte_.take_saved();
  const auto [begin, end] = chunk_blocks(chunk);
  for (size_t i = begin; i < end; ++i) a.blocks.push_back(blocks_[i]->take_saved());
  return a;
}

void Gpt::restore_activations(Activations a, int chunk) {
  batch_ = a.batch;
  seq_ = a.seq;
  dropout_key_ = a.dropout_key;
  if (chunk == 0) {
    first_row_ = a.first_row;
    embed_key_ = a.embed_key;
    wte_.restore_saved(std::move(a.embedding));
  }
  const auto [begin, end] = chunk_blocks(chunk);
  for (size_t i = begin; i < end; ++i) blocks_[i]->restore_saved(std::move(a.blocks[i - begin]));
}

Parameter* Gpt::tied_embedding_copy() {
  return stage_.last && !stage_.first ? &wte_.weight : nullptr;
}

Parameter& Gpt::parameter(const std::string& name) {
  for (Parameter* p : params_) {
    if (p->name == name) return *p;
  }
  throw Error(ErrorCode::invalid_argument, "the model has no parameter named '" + name + "'");
}

void Gpt::zero_grad() {
  for (Parameter* p : params_) p->grad.zero();
}

ParallelTensor Gpt::add_positions(TpGroup& tp, ParallelTensor x, int64_t seq) {
  const int64_t rows = x.local.dim(0), width = x.local.dim(1);
  first_row_ = x.placement == Placement::shard(0) ? tp.rank() * rows : 0;
  float* y = x.local.f32();
  const float* pos = wpe_.value.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p = (first_row_ + r) % seq;
    add_into(y + r * width, pos + p * width, width);
  }
  return x;
}

double Gpt::forward(TpGroup& tp, const std::vector<int32_t>& inputs,
                    const std::vector<int32_t>& targets, int64_t batch, double loss_scale,
                    RngKey dropout_key, Tensor* logits_out) {
  const int64_t tokens = static_cast<int64_t>(inputs.size());
  if (batch <= 0 || tokens % batch != 0) {
    throw Error(ErrorCode::invalid_argument, "GPT forward: " + std::to_string(tokens) +
                                                 " tokens do not form a batch of " +
                                                 std::to_string(batch) + " sequences");
  }
  begin(batch, tokens / batch, dropout_key);
  return forward_head(tp, forward_blocks(tp, embed(tp, inputs)), targets, loss_scale, logits_out);
}

void Gpt::backward(TpGroup& tp) { backward_embedding(tp, backward_blocks(tp, backward_head(tp))); }

void Gpt::begin(int64_t batch, int64_t seq, RngKey dropout_key) {
  if (seq > config_.context) {
    throw Error(ErrorCode::invalid_argument, "GPT forward: sequence length " + std::to_string(seq) +
                                                 " exceeds the context " +
                                                 std::to_string(config_.context));
  }
  batch_ = batch;
  seq_ = seq;
  dropout_key_ = dropout_key;
}

namespace {

void require_stage(bool holds, const char* what) {
  if (!holds) {
    throw Error(ErrorCode::invalid_argument,
                std::string("GPT: ") + what + " is not on this pipeline stage");
  }
}

}  // namespace

ParallelTensor Gpt::embed(TpGroup& tp, const std::vector<int32_t>& inputs) {
  require_stage(stage_.first, "the embedding");
  if (static_cast<int64_t>(inputs.size()) != batch_ * seq_) {
    throw Error(ErrorCode::invalid_argument, "GPT forward: " + std::to_string(inputs.size()) +
                                                 " tokens, expected " + std::to_string(batch_) +
                                                 " x " + std::to_string(seq_));
  }
  embed_key_ = dropout_key_.derive(stream_of(wte_.weight.name));
  ParallelTensor x = add_positions(tp, wte_.forward(tp, inputs), seq_);
  apply_dropout(tp, x, config_.dropout, embed_key_);
  return x;
}

ParallelTensor Gpt::forward_blocks(TpGroup& tp, ParallelTensor x, int chunk) {
  const auto [begin, end] = chunk_blocks(chunk);
  for (size_t i = begin; i < end; ++i) x = blocks_[i]->forward(tp, x, batch_, seq_, dropout_key_);
  return x;
}

double Gpt::forward_head(TpGroup& tp, const ParallelTensor& x, const std::vector<int32_t>& targets,
                         double loss_scale, Tensor* logits_out) {
  require_stage(stage_.last, "the output layer");
  return loss_.forward(tp, ln_f_.forward(tp, x), wte_, targets, loss_scale, logits_out);
}

ParallelTensor Gpt::backward_head(TpGroup& tp, const GradientsReady& ready) {
  require_stage(stage_.last, "the output layer");
  ParallelTensor dx = ln_f_.backward(tp, loss_.backward(tp, wte_));
  if (ready) {
    // On a stage that also embeds, the embedding's gradient is not final until the embedding's
    // backward has added to it.
    std::vector<Parameter*> done;
    ln_f_.collect(done);
    if (tied_embedding_copy() != nullptr) done.push_back(tied_embedding_copy());
    ready(done);
  }
  return dx;
}

ParallelTensor Gpt::backward_blocks(TpGroup& tp, ParallelTensor dy, const GradientsReady& ready,
                                    int chunk) {
  const auto [begin, end] = chunk_blocks(chunk);
  for (size_t i = end; i-- > begin;) {
    dy = blocks_[i]->backward(tp, dy);
    if (ready) {
      std::vector<Parameter*> done;
      blocks_[i]->collect(done);
      ready(done);
    }
  }
  return dy;
}

void Gpt::backward_embedding(TpGroup& tp, const ParallelTensor& dx_in,
                             const GradientsReady& ready) {
  require_stage(stage_.first, "the embedding");
  ParallelTensor dx = dx_in;
  apply_dropout(tp, dx, config_.dropout, embed_key_);
  const int64_t rows = dx.local.dim(0), width = dx.local.dim(1);
  const float* g = dx.local.f32();
  float* dpos = wpe_.grad.f32();
  for (int64_t r = 0; r < rows; ++r)
    add_into(dpos + ((first_row_ + r) % seq_) * width, g + r * width, width);
  wpe_.grad_summed_over_tp = tp.sequence_parallel;
  wte_.backward(tp, dx);
  if (ready) ready({&wte_.weight, &wpe_});
}

void Gpt::start_generation() {
  caches_.clear();
  for (auto& b : blocks_) caches_.push_back(b->attn.make_cache(config_.context));
}

std::vector<float> Gpt::next_logits(TpGroup& tp, int32_t token) {
  require_stage(stage_.first && stage_.last, "the whole model (generation)");
  if (caches_.empty()) start_generation();
  // One row cannot be split by rows: generation runs without sequence parallelism.
  TpGroup g = tp;
  g.sequence_parallel = false;
  const int64_t position = caches_.front().length;
  if (position >= config_.context) {
    throw Error(
        ErrorCode::invalid_argument,
        "generation: the context of " + std::to_string(config_.context) + " positions is full");
  }
  ParallelTensor x = wte_.forward(g, {token});
  add_into(x.local.f32(), wpe_.value.f32() + position * config_.width, config_.width);
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward_cached(g, x, caches_[i]);
  const ParallelTensor h = ln_f_.forward(g, x);
  const Tensor local = local_logits(h.local, wte_);
  Tensor whole = g.timed([&] { return all_gather_along(*g.comm, local, 1); });
  tp.comm_seconds = g.comm_seconds;
  return std::vector<float>(whole.f32(), whole.f32() + config_.vocab);
}

}  // namespace tpf
