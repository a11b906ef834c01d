// Sharded checkpoints in the safetensors format, and resharding on load.
//
// A checkpoint is a directory:
//   checkpoint.json              written last (by rank 0, after every rank's file is complete):
//                                format, step, TP size, seed, config, file names
//   rank-R-of-T.safetensors      rank R's slices: "<name>" (weights), "<name>.exp_avg" and
//                                "<name>.exp_avg_sq" (AdamW moments, absent after `tpf import`);
//                                its metadata records the same header fields plus, per tensor,
//                                the global shape and how it is sharded ("shards": JSON)
// A run's output directory keeps checkpoints in checkpoints/step-NNNNNNN/ and the name of the
// newest in checkpoints/latest, so a crash mid-write leaves the previous one usable.
//
// Loading assembles every global tensor from the slices of the saved TP size and cuts the slices
// of the new one, so `--resume` works at any TP size (the vocabulary's padding rows, which depend
// on the TP size, are dropped and re-added as zeros).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/gpt_config.h"
#include "model/optimizer.h"

namespace tpf {

// One parameter as a whole (unsharded) tensor, with its optimizer state if saved.
struct GlobalTensor {
  std::string name;
  ShardSpec shard;
  Tensor value;
  Tensor exp_avg;  // empty if the checkpoint has no optimizer state
  Tensor exp_avg_sq;
};

struct GlobalCheckpoint {
  RunConfig config;
  uint64_t seed = 0;
  int64_t step = 0;  // optimizer steps taken
  int tp_size = 0;   // TP size it was saved at
  std::vector<GlobalTensor> tensors;
  const GlobalTensor& at(const std::string& name) const;
};

// Collective over the TP group: every rank writes its own file into dir, then rank 0 writes
// checkpoint.json. The directory is created if missing. With pipeline parallelism, `pipeline` is
// this rank's pipeline (its ranks are the stages, as in train_layout.h) and the call is collective
// over it too: the other stages send their slices to the first, which writes the same files as a
// run without stages would (so a checkpoint loads at any layout).
void save_checkpoint(TpGroup& tp, const std::string& dir, const RunConfig& config, uint64_t seed,
                     Gpt& model, AdamW* optimizer, Communicator* pipeline = nullptr);

// Accepts a checkpoint directory or a run's output directory (then its latest checkpoint).
std::string resolve_checkpoint_dir(const std::string& path);
GlobalCheckpoint read_checkpoint(const std::string& path);

// Copies the checkpoint's weights (and optimizer state, if both have it) into this rank's slices.
// Throws if the model's shape differs from the checkpoint's.
void load_into(const GlobalCheckpoint& checkpoint, int rank, int tp_size, Gpt& model,
               AdamW* optimizer);

// Writes a whole checkpoint at TP size tp_size from global tensors, in one process (`tpf import`).
void write_checkpoint_files(const std::string& dir, const GlobalCheckpoint& checkpoint,
                            int tp_size);

// Output-directory bookkeeping: checkpoints/step-NNNNNNN, checkpoints/latest.
std::string checkpoint_dir_for_step(const std::string& out_dir, int64_t step);
void mark_latest(const std::string& out_dir, int64_t step, int keep);

}  // namespace tpf
