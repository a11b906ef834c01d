#include "parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "parallel/linear.h"
#include "parallel/region_ops.h"
#include "tensor/blas.h"
#include "tpf/error.h"

namespace tpf {

int64_t padded_vocab(int64_t vocab, int tp_size) {
  const int64_t multiple = 64 * static_cast<int64_t>(tp_size);
  return (vocab + multiple - 1) / multiple * multiple;
}

namespace {

void check_tokens(const std::vector<int32_t>& tokens, int64_t vocab, const char* what) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw Error(ErrorCode::invalid_argument, std::string(what) + " " + std::to_string(tokens[i]) +
                                                   " at position " + std::to_string(i) +
                                                   " is outside the vocabulary [0, " +
                                                   std::to_string(vocab) + ")");
    }
  }
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const std::string& name, int64_t vocab_,
                                               int64_t width, int tp_size, float init_std)
    : vocab(vocab_) {
  weight.name = name;
  weight.global_shape = {padded_vocab(vocab_, tp_size), width};
  weight.shard = ShardSpec{0, 1};
  weight.init = Init::normal;
  weight.init_std = init_std;
  weight.weight_decay = true;
}

ParallelTensor VocabParallelEmbedding::forward(TpGroup& tp, const std::vector<int32_t>& tokens) {
  check_tokens(tokens, vocab, "token id");
  const int64_t rows = static_cast<int64_t>(tokens.size());
  const int64_t local_rows = weight.value.dim(0), width = weight.value.dim(1);
  const int64_t first = first_row(tp.rank());
  ParallelTensor out{Tensor({rows, width}), Placement::partial()};
  float* y = out.local.f32();
  const float* table = weight.value.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = tokens[static_cast<size_t>(r)] - first;
    if (row >= 0 && row < local_rows) std::copy_n(table + row * width, width, y + r * width);
  }
  tokens_ = tokens;
  return tp.timed([&] {
    return tp.sequence_parallel ? reduce_scatter_to_sequence_forward(*tp.comm, out)
                                : reduce_from_tp_forward(*tp.comm, std::move(out));
  });
}

void VocabParallelEmbedding::backward(TpGroup& tp, const ParallelTensor& dy) {
  require_placement(dy, activation_placement(tp), weight.name + " (embedding output gradient)");
  const ParallelTensor whole =
      tp.sequence_parallel
          ? tp.timed([&] { return reduce_scatter_to_sequence_backward(*tp.comm, dy); })
          : reduce_from_tp_backward(*tp.comm, dy);
  const int64_t local_rows = weight.value.dim(0), width = weight.value.dim(1);
  const int64_t first = first_row(tp.rank());
  const float* g = whole.local.f32();
  float* dw = weight.grad.f32();
  for (size_t r = 0; r < tokens_.size(); ++r) {
    const int64_t row = tokens_[r] - first;
    if (row < 0 || row >= local_rows) continue;
    for (int64_t c = 0; c < width; ++c)
      dw[row * width + c] += g[static_cast<int64_t>(r) * width + c];
  }
}

double VocabParallelCrossEntropy::forward(TpGroup& tp, const ParallelTensor& h,
                                          const VocabParallelEmbedding& embedding,
                                          const std::vector<int32_t>& targets, double loss_scale,
                                          Tensor* logits_out) {
  require_placement(h, activation_placement(tp), "vocab-parallel cross-entropy input");
  ParallelTensor whole = tp.sequence_parallel
                             ? tp.timed([&] { return gather_from_sequence_forward(*tp.comm, h); })
                             : copy_to_tp_forward(*tp.comm, h);
  const int64_t rows = whole.local.dim(0), width = whole.local.dim(1);
  if (static_cast<int64_t>(targets.size()) != rows) {
    throw Error(ErrorCode::invalid_argument,
                "vocab-parallel cross-entropy: " + std::to_string(targets.size()) +
                    " targets for " + std::to_string(rows) + " rows");
  }
  check_tokens(targets, embedding.vocab, "target id");
  const Tensor& table = embedding.weight.value;
  const int64_t cols = table.dim(0);
  const int64_t first = embedding.first_row(tp.rank());
  real_columns_ = std::clamp<int64_t>(embedding.vocab - first, 0, cols);

  logits_ = Tensor::uninitialized({rows, cols});
  gemm_f32(false, true, rows, cols, width, 1.0f, whole.local.f32(), width, table.f32(), width, 0.0f,
           logits_.f32(), cols);
  float* logits = logits_.f32();
  if (logits_out != nullptr) *logits_out = logits_;

  // 1. The row maximum over the whole vocabulary (for a stable exponential).
  Tensor row_max({rows});
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < real_columns_; ++c) m = std::max(m, logits[r * cols + c]);
    row_max.f32()[r] = m;
  }
  tp.timed([&] {
    if (tp.size() > 1) {
      tp.comm->all_reduce(row_max.data(), row_max.data(), static_cast<size_t>(rows), DType::f32,
                          ReduceOp::max);
    }
  });
  // 2. Sum of exponentials and the target's logit, reduced together.
  Tensor sums({2, rows});
  float* sum_exp = sums.f32();
  float* target_logit = sums.f32() + rows;
  for (int64_t r = 0; r < rows; ++r) {
    const float m = row_max.f32()[r];
    float* row = logits + r * cols;
    float s = 0;
    for (int64_t c = 0; c < real_columns_; ++c) {
      row[c] = std::exp(row[c] - m);  // kept for the backward pass
      s += row[c];
    }
    for (int64_t c = real_columns_; c < cols; ++c) row[c] = 0.0f;
    sum_exp[r] = s;
    const int64_t t = targets[static_cast<size_t>(r)] - first;
    // Stored relative to the max, so the reduction adds exactly one non-zero term.
    target_logit[r] = (t >= 0 && t < real_columns_) ? std::log(row[t]) : 0.0f;
  }
  tp.timed([&] { all_reduce_in_place(*tp.comm, sums); });
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    total += std::log(static_cast<double>(sum_exp[r])) - static_cast<double>(target_logit[r]);
    const float inv = 1.0f / sum_exp[r];
    for (int64_t c = 0; c < real_columns_; ++c) logits[r * cols + c] *= inv;  // softmax
  }
  hidden_ = std::move(whole.local);
  targets_ = targets;
  loss_scale_ = loss_scale;
  return total / static_cast<double>(rows);
}

Tensor local_logits(const Tensor& h, const VocabParallelEmbedding& embedding) {
  const Tensor& table = embedding.weight.value;
  Tensor logits({h.dim(0), table.dim(0)});
  gemm_f32(false, true, h.dim(0), table.dim(0), h.dim(1), 1.0f, h.f32(), h.dim(1), table.f32(),
           table.dim(1), 0.0f, logits.f32(), table.dim(0));
  return logits;
}

ParallelTensor VocabParallelCrossEntropy::backward(TpGroup& tp, VocabParallelEmbedding& embedding) {
  const int64_t rows = logits_.dim(0), cols = logits_.dim(1), width = hidden_.dim(1);
  const int64_t first = embedding.first_row(tp.rank());
  // d loss / d logits = (softmax - onehot(target)) * scale / rows.
  const float scale = static_cast<float>(loss_scale_ / static_cast<double>(rows));
  float* d = logits_.f32();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = d + r * cols;
    for (int64_t c = 0; c < real_columns_; ++c) row[c] *= scale;
    const int64_t t = targets_[static_cast<size_t>(r)] - first;
    if (t >= 0 && t < real_columns_) row[t] -= scale;
  }
  const Tensor& table = embedding.weight.value;
  gemm_f32(true, false, cols, width, rows, 1.0f, d, cols, hidden_.f32(), width, 1.0f,
           embedding.weight.grad.f32(), width);
  ParallelTensor dh{Tensor::uninitialized({rows, width}), Placement::partial()};
  gemm_f32(false, false, rows, width, cols, 1.0f, d, cols, table.f32(), width, 0.0f, dh.local.f32(),
           width);
  hidden_ = Tensor();
  logits_ = Tensor();
  return tp.timed([&] {
    return tp.sequence_parallel ? gather_from_sequence_backward(*tp.comm, dh)
                                : copy_to_tp_backward(*tp.comm, std::move(dh));
  });
}

}  // namespace tpf
