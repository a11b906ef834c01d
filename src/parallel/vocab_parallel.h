// The vocabulary-parallel ends of a language model (Megatron-LM): the token embedding table is
// split by rows (vocabulary entries) and the same table, tied, is the output layer, so each rank
// computes the logits of its own vocabulary slice and the cross-entropy is assembled from three
// small all-reduces (max, then the sum of exponentials and the target's logit, both in one call)
// without ever gathering the logits.
//
// The vocabulary is padded to a multiple of (64 x TP) rows (`padded_vocab`); padded rows are zero,
// never looked up, and masked out of the softmax, so the model computes the same function at every
// TP size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/parameter.h"
#include "parallel/placement.h"
#include "parallel/tp_group.h"

namespace tpf {

int64_t padded_vocab(int64_t vocab, int tp_size);

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(const std::string& name, int64_t vocab, int64_t width, int tp_size,
                         float init_std);
  // tokens: global ids, one per row of the (whole) batch. Output: [rows, width], replicated (or
  // this rank's rows with sequence parallelism).
  ParallelTensor forward(TpGroup& tp, const std::vector<int32_t>& tokens);
  // Accumulates the table's gradient; the gradient of the token ids is nothing.
  void backward(TpGroup& tp, const ParallelTensor& dy);
  void collect(std::vector<Parameter*>& out) { out.push_back(&weight); }

  int64_t vocab;     // real entries
  Parameter weight;  // global [padded_vocab, width], shard(0)

  // First global row this rank holds, and how many.
  int64_t first_row(int rank) const { return rank * weight.value.dim(0); }

  // What forward saved for backward, moved out and back in: a pipeline stage keeps several
  // micro-batches in flight between their forward and backward passes (model/gpt.h).
  struct Saved {
    std::vector<int32_t> tokens;
  };
  Saved take_saved() { return {std::exchange(tokens_, {})}; }
  void restore_saved(Saved s) { tokens_ = std::move(s.tokens); }

 private:
  std::vector<int32_t> tokens_;
};

// Cross-entropy of the tied output layer: logits = h wte^T, loss = mean over rows (scaled by
// `loss_scale`, e.g. 1 / micro-batches) of -log softmax(logits)[target].
class VocabParallelCrossEntropy {
 public:
  // h: [rows, width] replicated (or row-sharded). Returns the mean loss over the rows (identical
  // on every rank). `logits_out`, if given, receives this rank's [rows, padded_vocab / T] slice
  // of the logits (for tests and the PyTorch comparison).
  double forward(TpGroup& tp, const ParallelTensor& h, const VocabParallelEmbedding& embedding,
                 const std::vector<int32_t>& targets, double loss_scale,
                 Tensor* logits_out = nullptr);
  // Gradient of the loss w.r.t. h (same placement as h); accumulates the table's gradient.
  ParallelTensor backward(TpGroup& tp, VocabParallelEmbedding& embedding);

 private:
  Tensor hidden_;  // the whole h
  Tensor logits_;  // becomes the softmax during forward
  std::vector<int32_t> targets_;
  double loss_scale_ = 1;
  int64_t real_columns_ = 0;  // this rank's columns that are real vocabulary entries
};

// This rank's slice of the logits of replicated rows h ([rows, padded_vocab / T]; generation).
Tensor local_logits(const Tensor& h, const VocabParallelEmbedding& embedding);

}  // namespace tpf
