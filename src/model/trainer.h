// The training loop of `tpf train`: data, forward/backward over micro-batches at any tensor x
// pipeline x data-parallel layout (train_layout.h, parallel_step.h), gradient clipping,
// AdamW with warm-up + cosine schedule, logging (progress line, JSONL), periodic sharded
// checkpoints, and resuming from a checkpoint saved at any TP size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/train_layout.h"
#include "tpf/comm.h"

namespace tpf {

class Gpt;
struct TrainGroups;

struct TrainOptions {
  RunConfig config;
  std::string data_path;
  std::string out_dir;  // log.jsonl, config.json, checkpoints/; empty: write nothing
  uint64_t seed = 1;
  std::string resume;  // a checkpoint or a previous output directory; empty: start fresh
  int64_t steps = -1;  // >= 0 overrides config.train.steps (also when resuming)
  bool sequence_parallel = false;  // true turns it on (also when resuming)
  // "tp=2,pp=2,dp=2" (train_layout.h); empty: TP over all the ranks; "auto": choose_layout's.
  std::string layout;
  // For layout "auto": called on rank 0 with the run's configuration (a resumed one included)
  // and the job's ranks; every rank trains at its answer. Its exception fails every rank.
  std::function<TrainLayout(const RunConfig&, int ranks)> choose_layout;
  // Called on rank 0 once the layout is known and checked, before the model is built (tpf train
  // --predict prints the planner's prediction of it).
  std::function<void(const RunConfig&, const TrainLayout&)> on_layout;
  std::string trace_path;  // non-empty: every rank's spans in one Chrome trace file (trace_file.h)
  bool progress = true;    // rank 0 prints a progress line every log_every steps
  // Called on every rank after the last step, with this rank's part of the model and its groups
  // (for tests and programs that embed the trainer).
  std::function<void(Gpt&, TrainGroups&)> on_finish;
};

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of optimizer steps taken after this one
  double loss = 0;   // mean over the step's micro-batches
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  // Rank 0's time in communication (the sum of the three below): waiting inside TP collectives,
  // for the neighbouring pipeline stage (the bubble plus exposed send/recv), and in DP and other
  // cross-stage exchanges (the exposed part of the gradient reduction, the tied embedding, the
  // norm and the loss). Compute is what remains of `seconds`.
  double comm_seconds = 0;
  double tp_comm_seconds = 0;
  double pp_wait_seconds = 0;
  double dp_comm_seconds = 0;
  double tokens_per_s = 0;
};

struct TrainSummary {
  std::vector<StepRecord> records;  // the steps run by this call
  int64_t first_step = 0;           // steps already taken when it started (resume)
  // Over all steps after the first (which warms up); of the first step when it is the only one.
  double tokens_per_s = 0;
  double comm_share = 0;                            // communication time / step time, same steps
  double tp_share = 0, pp_share = 0, dp_share = 0;  // its parts, same steps
  TrainLayout layout;                               // the layout it ran at
  int64_t micro_batches = 0;                        // per step and DP replica
};

// Collective over comm (all the ranks of the layout). Throws tpf::Error on bad input, on a resume
// with no steps left to take, and (ErrorCode::resource) for a model that certainly does not fit
// this machine's memory.
TrainSummary train(Communicator& comm, const TrainOptions& options);

}  // namespace tpf
