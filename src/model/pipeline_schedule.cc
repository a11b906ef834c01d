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

std::string describe(const std::vector<PipelinePass>& passes) {
  std::string out;
  for (const PipelinePass& p : passes) {
    if (!out.empty()) out += ' ';
    out += (p.kind == PipelinePass::Kind::forward ? 'F' : 'B') + std::to_string(p.micro_batch);
  }
  return out;
}

double one_forward_one_backward_bubble(int stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace tpf
