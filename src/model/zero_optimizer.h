// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", 2020): AdamW whose moments are split over the data-parallel replicas. The stage's
// gradients, laid end to end in parameter order, are reduce-scattered so that replica d holds the
// sum of its 1/D of them; it updates that part of the weights with its part of the moments, and an
// all-gather gives every replica the whole updated weights. Each replica keeps 2/D of the moments
// instead of all of them, for the same traffic as an all-reduce.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/gpt_config.h"
#include "parallel/parameter.h"
#include "parallel/timeline.h"
#include "tpf/comm.h"

namespace tpf {

class ShardedAdamW {
 public:
  // seconds / timeline: where the reduce-scatter's and all-gather's time goes ("dp").
  ShardedAdamW(const std::vector<Parameter*>& params, const TrainConfig& config, Communicator& data,
               double& seconds, Timeline* timeline = nullptr);

  ShardedAdamW(const ShardedAdamW&) = delete;
  ShardedAdamW& operator=(const ShardedAdamW&) = delete;
  ~ShardedAdamW();

  // Sums the local gradients over DP, keeping this replica's share.
  void reduce_scatter_gradients();
  // The same sums overlapped with the backward pass: starts the DP sum of these parameters'
  // gradients, each element summed onto the replica whose share holds it (a reduce per share
  // the parameter spans). The gradients are copied: they may change at once.
  void reduce_async(const std::vector<Parameter*>& params);
  // Starts the sums reduce_async has not, and waits for all of them: this replica's share then
  // holds the same numbers reduce_scatter_gradients gives (the fabric sums every element in rank
  // order, whichever collective carries it).
  void finish_reductions();
  // The squared norm of this replica's share of the summed gradients, split into elements of
  // TP-sharded parameters and of replicated ones, leaving `skip` out.
  std::pair<double, double> shard_square_sums(const Parameter* skip) const;
  // Updates this replica's share of the weights, then all-gathers the whole weights.
  void step(double lr, double grad_scale);

  int64_t steps_taken() const { return steps_; }
  // Whole per-parameter moments (collective over DP: for checkpoints), and the reverse.
  void gather_moments(std::vector<Tensor>& first, std::vector<Tensor>& second);
  void load_moments(const std::vector<Tensor>& first, const std::vector<Tensor>& second,
                    int64_t steps);

 private:
  // The part of one parameter in this replica's share: local elements [begin, end), at
  // `offset` in the share.
  struct Piece {
    Parameter* param;
    int64_t begin, end, offset;
  };
  std::vector<Parameter*> params_;
  TrainConfig config_;
  Communicator& data_;
  double& seconds_;
  Timeline* timeline_;
  int64_t share_ = 0;  // elements per replica (the last ones padded)
  std::vector<Piece> pieces_;
  Tensor grad_share_, m_, v_;
  int64_t steps_ = 0;
  // reduce_async's state: each parameter's offset in the flat gradients, their copies, whether
  // its sum has started, and the reductions in flight.
  std::vector<int64_t> offsets_;
  Tensor flat_grads_;
  std::vector<bool> started_;
  std::vector<Work> pending_;
};

}  // namespace tpf
