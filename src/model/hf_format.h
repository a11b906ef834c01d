// The Hugging Face GPT-2 layout of a whole model: tensor names without a prefix ("wte.weight",
// "h.0.attn.c_attn.weight", ...), Conv1D weights stored [in, out] (tpfabric's own layout, so no
// transposes), the embedding with exactly `vocab` rows (no TP padding), and the configuration in
// the safetensors metadata (n_layer, n_head, n_embd, n_ctx, vocab_size, layer_norm_epsilon).
#pragma once

#include <cstdint>
#include <optional>

#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace tpf {

SafeTensorsFile export_hf(const GlobalCheckpoint& checkpoint);

// Accepts names with or without the "transformer." prefix and ignores GPT-2's attention-mask
// buffers ("h.N.attn.bias", "h.N.attn.masked_bias") and a separate "lm_head.weight" equal to wte.
// The head count comes from the metadata or, if absent there (files saved by transformers),
// from `heads`; without either it is an error. Every size comes from the tensors present; the
// metadata must agree with them (nothing is allocated from the metadata alone). The training
// configuration, step and seed come from the metadata `tpf export` writes (tpfabric_config,
// tpfabric_step, tpfabric_seed), else defaults and step 0. Optimizer state is empty.
GlobalCheckpoint import_hf(const SafeTensorsFile& file, std::optional<int64_t> heads,
                           const std::string& what);

}  // namespace tpf
