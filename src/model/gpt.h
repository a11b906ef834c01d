// A GPT-2-style decoder sharded over a tensor-parallel group: pre-LayerNorm blocks of causal
// self-attention and a 4x GELU MLP, learned positions, a final LayerNorm and an output layer tied
// to the token embedding. Every layer has an explicit backward pass (parallel/); this class strings
// them together and owns the parameters (this rank's slices).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "model/gpt_config.h"
#include "parallel/layer_norm.h"
#include "parallel/mlp.h"
#include "parallel/self_attention.h"
#include "parallel/vocab_parallel.h"

namespace tpf {

// One parameter's name and global shape, as Gpt builds it.
struct ParameterShape {
  std::string name;
  Shape shape;
};

// The parameters of a Gpt of `config` in Gpt::parameters() order, with their global shapes and the
// embedding given `vocab_rows` rows (padded_vocab(vocab, T) for a model at TP size T, vocab for the
// Hugging Face layout), computed without allocating: files are checked against it before their
// sizes are trusted. `config` must be valid (validate()).
std::vector<ParameterShape> gpt_parameter_shapes(const ModelConfig& config, int64_t vocab_rows);

class GptBlock {
 public:
  GptBlock(const ModelConfig& config, int64_t index, int tp_size);
  ParallelTensor forward(TpGroup& tp, const ParallelTensor& x, int64_t batch, int64_t seq,
                         RngKey dropout_key);
  ParallelTensor backward(TpGroup& tp, const ParallelTensor& dy);
  ParallelTensor forward_cached(TpGroup& tp, const ParallelTensor& x, KvCache& cache);
  void collect(std::vector<Parameter*>& out);

  struct Saved {
    ReplicatedLayerNorm::Saved ln_1, ln_2;
    ParallelSelfAttention::Saved attn;
    ParallelMlp::Saved mlp;
    RngKey attn_key, mlp_key;
  };
  Saved take_saved() {
    return {ln_1.take_saved(), ln_2.take_saved(), attn.take_saved(),
            mlp.take_saved(),  attn_key_,         mlp_key_};
  }
  void restore_saved(Saved s);

  ReplicatedLayerNorm ln_1;
  ParallelSelfAttention attn;
  ReplicatedLayerNorm ln_2;
  ParallelMlp mlp;

 private:
  float dropout_;
  RngKey attn_key_, mlp_key_;
};

// The part of the model a pipeline stage holds: blocks [first_layer, end_layer), the embedding
// (tokens and positions) on the first stage, the final LayerNorm and the output layer on the last.
// The output layer is tied to the token embedding, so a last stage that is not also the first keeps
// its own copy of it; the two copies' gradients are summed before every update (as Megatron-LM's
// embedding group does), which keeps them identical.
//
// With interleaved pipeline stages a rank holds `chunks` such ranges of layers, chunk c being
// [first_layer + c chunk_stride, end_layer + c chunk_stride): the embedding goes with chunk 0 of
// the first stage, the output layer with the last chunk of the last.
struct StageSpan {
  int64_t first_layer = 0;
  int64_t end_layer = -1;  // -1: the model's last layer
  bool first = true;
  bool last = true;
  int chunks = 1;
  int64_t chunk_stride = 0;  // layers from one chunk's start to the next's
  int64_t layers_per_chunk() const { return end_layer - first_layer; }
};

class Gpt {
 public:
  // Builds this rank's slices of the model (of the stage's part of it) initialized from `seed`:
  // every parameter's values depend only on its name, so they are the same at any layout.
  Gpt(const ModelConfig& config, int tp_rank, int tp_size, uint64_t seed, StageSpan stage = {});

  // One micro-batch: inputs and targets are [batch * seq] token ids (row-major). Returns the mean
  // loss; backward() then accumulates gradients of loss * loss_scale. dropout_key selects the
  // dropout masks (derive it from the step and micro-batch). logits_out: this rank's logits.
  double forward(TpGroup& tp, const std::vector<int32_t>& inputs,
                 const std::vector<int32_t>& targets, int64_t batch, double loss_scale,
                 RngKey dropout_key, Tensor* logits_out = nullptr);
  void backward(TpGroup& tp);

  // The same pass split at the stage's boundaries, for pipeline parallelism: begin() a micro-batch,
  // then embed() on the first stage, forward_blocks(), forward_head() on the last stage (returns
  // the loss); backward_head() on the last stage, backward_blocks(), backward_embedding() on the
  // first. Activations between stages are this rank's [rows, width] slice.
  void begin(int64_t batch, int64_t seq, RngKey dropout_key);
  ParallelTensor embed(TpGroup& tp, const std::vector<int32_t>& inputs);
  // `chunk`: which of the stage's chunks of layers (StageSpan) the pass goes through.
  ParallelTensor forward_blocks(TpGroup& tp, ParallelTensor x, int chunk = 0);
  double forward_head(TpGroup& tp, const ParallelTensor& x, const std::vector<int32_t>& targets,
                      double loss_scale, Tensor* logits_out = nullptr);
  // `ready`, if given, is called with each group of parameters as the pass finishes their
  // gradients (the output layer's, each block's, the embedding's), so that their reduction can
  // start while the pass goes on.
  using GradientsReady = std::function<void(const std::vector<Parameter*>&)>;
  ParallelTensor backward_head(TpGroup& tp, const GradientsReady& ready = {});
  ParallelTensor backward_blocks(TpGroup& tp, ParallelTensor dy, const GradientsReady& ready = {},
                                 int chunk = 0);
  void backward_embedding(TpGroup& tp, const ParallelTensor& dx, const GradientsReady& ready = {});

  // Everything the stage's forward pass of a micro-batch saved for its backward pass (its blocks
  // and embedding; not the output layer, whose backward run_pipeline runs right after its
  // forward), moved out so that the forwards of later micro-batches can run before this one's
  // backward, and moved back in before it (1F1B, model/parallel_step.h). Per chunk of layers:
  // the embedding's part goes with chunk 0.
  struct Activations {
    int64_t batch = 0, seq = 0, first_row = 0;
    RngKey dropout_key, embed_key;
    VocabParallelEmbedding::Saved embedding;
    std::vector<GptBlock::Saved> blocks;
  };
  Activations stash_activations(int chunk = 0);
  void restore_activations(Activations a, int chunk = 0);

  const StageSpan& stage() const { return stage_; }
  // The last stage's copy of the tied embedding (nullptr where this stage holds the original or
  // none): its gradient is summed with the first stage's, and it is left out of the norm.
  Parameter* tied_embedding_copy();

  // Generation: feed one token at the next position; returns the logits over the real vocabulary
  // (replicated: identical on every rank).
  void start_generation();
  std::vector<float> next_logits(TpGroup& tp, int32_t token);
  int64_t generated_length() const { return caches_.empty() ? 0 : caches_.front().length; }

  const ModelConfig& config() const { return config_; }
  // Every parameter, in a fixed order (the same at every TP size).
  const std::vector<Parameter*>& parameters() const { return params_; }
  Parameter& parameter(const std::string& name);
  void zero_grad();

 private:
  ParallelTensor add_positions(TpGroup& tp, ParallelTensor x, int64_t seq);
  // The indices in blocks_ of chunk `chunk`'s blocks, [first, second).
  std::pair<size_t, size_t> chunk_blocks(int chunk) const;

  ModelConfig config_;
  StageSpan stage_;
  VocabParallelEmbedding wte_;
  Parameter wpe_;
  std::vector<std::unique_ptr<GptBlock>> blocks_;
  ReplicatedLayerNorm ln_f_;
  VocabParallelCrossEntropy loss_;
  std::vector<Parameter*> params_;

  // Saved by forward for backward.
  int64_t batch_ = 0, seq_ = 0;
  int64_t first_row_ = 0;  // global row of the first local activation row
  RngKey dropout_key_, embed_key_;
  std::vector<KvCache> caches_;
};

}  // namespace tpf
