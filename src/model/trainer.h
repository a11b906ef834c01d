// The training loop of `tpf train`: data, forward/backward over micro-batches, gradient clipping,
// AdamW with warm-up + cosine schedule, logging (progress line, JSONL), periodic sharded
// checkpoints, and resuming from a checkpoint saved at any TP size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "tpf/comm.h"

namespace tpf {

struct TrainOptions {
  RunConfig config;
  std::string data_path;
  std::string out_dir;  // log.jsonl, config.json, checkpoints/; empty: write nothing
  uint64_t seed = 1;
  std::string resume;  // a checkpoint or a previous output directory; empty: start fresh
  int64_t steps = -1;  // >= 0 overrides config.train.steps (also when resuming)
  bool sequence_parallel = false;  // true turns it on (also when resuming)
  bool progress = true;            // rank 0 prints a progress line every log_every steps
};

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of optimizer steps taken after this one
  double loss = 0;   // mean over the step's micro-batches
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double comm_seconds = 0;
  double tokens_per_s = 0;
};

struct TrainSummary {
  std::vector<StepRecord> records;  // the steps run by this call
  int64_t first_step = 0;           // steps already taken when it started (resume)
  // Over all steps after the first (which warms up); of the first step when it is the only one.
  double tokens_per_s = 0;
  double comm_share = 0;  // communication time / step time, same steps
};

// Collective over comm (the tensor-parallel group). Throws tpf::Error on bad input, on a resume
// with no steps left to take, and (ErrorCode::resource) for a model that certainly does not fit
// this machine's memory.
TrainSummary train(Communicator& comm, const TrainOptions& options);

}  // namespace tpf
