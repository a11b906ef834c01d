#include "model/pipeline_schedule.h"

#include <algorithm>

#include "tpf/error.h"

namespace tpf {

std::vector<PipelinePass> one_forward_one_backward(int stages, int stage, int64_t micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1) {
    throw Error(ErrorCode::invalid_argument, "pipeline schedule: stage " + std::to_string(stage) +
                                                 " of " + std::to_string(stages) + " over " +
                                                 std::to_string(micro_batches) +
                                                 " micro-batches is not a valid position");
  }
  using Kind = PipelinePass::Kind;
  const int64_t warm_up = std::min<int64_t>(stages - 1 - stage, micro_batches);
  std::vector<PipelinePass> passes;
  passes.reserve(static_cast<size_t>(2 * micro_batches));
  for (int64_t m = 0; m < warm_up; ++m) passes.push_back({Kind::forward, m});
  for (int64_t m = 0; m + warm_up < micro_batches; ++m) {
    passes.push_back({Kind::forward, m + warm_up});
    passes.push_back({Kind::backward, m});
  }
  for (int64_t m = micro_batches - warm_up; m < micro_batches; ++m) {
    passes.push_back({Kind::backward, m});
  }
  return passes;
}

std::vector<PipelinePass> interleaved_one_forward_one_backward(int stages, int stage, int chunks,
                                                               int64_t micro_batches) {
  if (chunks < 1) {
    throw Error(ErrorCode::invalid_argument, "pipeline schedule: " + std::to_string(chunks) +
                                                 " chunks per stage; give 1 or more");
  }
  if (chunks == 1) return one_forward_one_backward(stages, stage, micro_batches);
  // Validates the position.
  (void)one_forward_one_backward(stages, stage, micro_batches);
  if (micro_batches % stages != 0) {
    throw Error(ErrorCode::invalid_argument,
                "interleaved pipeline schedule: " + std::to_string(micro_batches) +
                    " micro-batches are not a multiple of the " + std::to_string(stages) +
                    " stages (they go through the chunks in groups of one per stage)");
  }
  using Kind = PipelinePass::Kind;
  const int64_t p = stages, total = micro_batches * chunks;
  // The k-th forward (backward) of the rank: group k / (P V) of P micro-batches, chunk
  // (k mod P V) / P, counted from the last chunk for backwards.
  auto pass = [&](Kind kind, int64_t k) {
    const int64_t in_group = k % (p * chunks);
    int chunk = static_cast<int>(in_group / p);
    if (kind == Kind::backward) chunk = chunks - 1 - chunk;
    return PipelinePass{kind, k / (p * chunks) * p + in_group % p, chunk};
  };
  const int64_t warm_up =
      micro_batches == p ? total : std::min<int64_t>(total, 2 * (p - 1 - stage) + (chunks - 1) * p);
  std::vector<PipelinePass> passes;
  passes.reserve(static_cast<size_t>(2 * total));
  for (int64_t k = 0; k < warm_up; ++k) passes.push_back(pass(Kind::forward, k));
  for (int64_t k = 0; k + warm_up < total; ++k) {
    passes.push_back(pass(Kind::forward, k + warm_up));
    passes.push_back(pass(Kind::backward, k));
  }
  for (int64_t k = total - warm_up; k < total; ++k) passes.push_back(pass(Kind::backward, k));
  return passes;
}

std::string describe(const std::vector<PipelinePass>& passes) {
  std::string out;
  const bool chunked =
      std::any_of(passes.begin(), passes.end(), [](const PipelinePass& p) { return p.chunk > 0; });
  for (const PipelinePass& p : passes) {
    if (!out.empty()) out += ' ';
    out += (p.kind == PipelinePass::Kind::forward ? 'F' : 'B') + std::to_string(p.micro_batch);
    if (chunked) out += '.' + std::to_string(p.chunk);
  }
  return out;
}

double one_forward_one_backward_bubble(int stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

double interleaved_bubble(int stages, int chunks, int64_t micro_batches) {
  return static_cast<double>(stages - 1) /
         static_cast<double>(static_cast<int64_t>(chunks) * micro_batches + stages - 1);
}

}  // namespace tpf
