// `tpf generate`: samples text from a checkpoint with the model sharded over this job's ranks and
// a key/value cache split by heads. --temperature 0 is greedy decoding.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/text_data.h"
#include "tensor/counter_rng.h"
#include "tpf/commands.h"
#include "tpf/error.h"
#include "tpf/model_cli.h"

namespace tpf::cli {

namespace {

void print_generate_usage() {
  std::printf(
      "usage: tpf generate --checkpoint DIR --prompt TEXT [--tokens N] [--temperature X]\n"
      "                    [--seed S] [--threads N]\n"
      "Continues TEXT with a trained model (any TP size: start it with `tpf run -n T -- ...`).\n"
      "  --checkpoint DIR   a checkpoint or a `tpf train --out` directory (its latest checkpoint)\n"
      "  --tokens N         bytes to generate (default 200; beyond the model's context the\n"
      "                     window slides: the last context/2 bytes are re-read)\n"
      "  --temperature X    0 = greedy (the same text at every TP size); default 0.8\n"
      "  --seed S           sampling seed (default 1)\n");
}

// The next token: argmax for temperature 0 (lowest id on ties), else a draw from
// softmax(logits / temperature) with a counter-based uniform, identical on every rank.
int32_t choose(const std::vector<float>& logits, double temperature, RngKey key, int64_t position) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  if (temperature <= 0) return static_cast<int32_t>(best);
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / temperature);
    sum += p[i];
  }
  const double u = counter_uniform(key, static_cast<uint64_t>(position)) * sum;
  double acc = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    acc += p[i];
    if (u < acc) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(best);
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  const FlagParser flags(
      argc, argv, {"--checkpoint", "--prompt", "--tokens", "--temperature", "--seed", "--threads"});
  if (flags.help()) {
    print_generate_usage();
    return kExitOk;
  }
  const std::string dir = flags.required("--checkpoint");
  const std::string prompt = flags.required("--prompt");
  const int64_t tokens = flags.get_int("--tokens", 200, 0);
  const double temperature = flags.get_double("--temperature", 0.8, 0.0);
  const RngKey key{static_cast<uint64_t>(flags.get_int("--seed", 1, 0)), stream_of("sample")};
  if (prompt.empty()) throw UsageError("--prompt must not be empty");

  World world;
  Communicator& comm = world.comm();
  configure_blas_threads(flags, world.local_ranks());
  const GlobalCheckpoint checkpoint = read_checkpoint(dir);
  const ModelConfig& config = checkpoint.config.model;
  const std::vector<int32_t> prompt_tokens = encode_bytes(prompt);
  if (static_cast<int64_t>(prompt_tokens.size()) >= config.context) {
    throw UsageError("the prompt has " + std::to_string(prompt_tokens.size()) +
                     " bytes; the model's context is " + std::to_string(config.context));
  }
  Gpt model(config, comm.rank(), comm.size(), checkpoint.seed);
  load_into(checkpoint, comm.rank(), comm.size(), model, nullptr);
  TpGroup tp{&comm};

  const auto start = std::chrono::steady_clock::now();
  model.start_generation();
  std::vector<float> logits;
  for (int32_t t : prompt_tokens) logits = model.next_logits(tp, t);
  std::vector<int32_t> text = prompt_tokens;  // everything so far
  std::vector<int32_t> out;
  int64_t restarts = 0;
  for (int64_t i = 0; i < tokens; ++i) {
    const int32_t next = choose(logits, temperature, key, static_cast<int64_t>(text.size()));
    out.push_back(next);
    text.push_back(next);
    if (i + 1 == tokens) break;
    if (model.generated_length() >= config.context) {
      // The cache holds the whole context: start again from the last half of the text (a
      // sliding window, recomputed every context/2 tokens rather than every token).
      model.start_generation();
      const size_t keep = static_cast<size_t>(config.context / 2);
      for (size_t j = text.size() - keep; j + 1 < text.size(); ++j) model.next_logits(tp, text[j]);
      ++restarts;
    }
    logits = model.next_logits(tp, next);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm.rank() == 0) {
    std::printf("%s%s\n", prompt.c_str(), decode_bytes(out).c_str());
    std::fprintf(stderr,
                 "tpf generate: %zu bytes in %.2f s (%.0f tokens/s incl. the prompt) at TP=%d, "
                 "checkpoint step %lld, context window restarted %lld times\n",
                 out.size(), seconds,
                 static_cast<double>(out.size() + prompt_tokens.size()) / seconds, comm.size(),
                 static_cast<long long>(checkpoint.step), static_cast<long long>(restarts));
  }
  return kExitOk;
}

}  // namespace tpf::cli
