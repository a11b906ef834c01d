// Faults that name their cause (issue 15): sizes from configurations, checkpoints and imported
// files are bounded and checked against the data before anything is allocated; numbers are parsed
// strictly, naming the field and the file; swapped rank files are refused; `tpf generate` writes
// every byte; `tpf train`, `tpf import` and `tpf bench` say clearly what they did or what was
// wrong.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/gpt_config.h"
#include "model/hf_format.h"
#include "model/parse_number.h"
#include "model/safetensors.h"
#include "model/text_data.h"
#include "support/expect_tpf_error.h"
#include "support/run_tpf.h"
#include "support/scratch_dir.h"
#include "support/training_text.h"

namespace tpf::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr ErrorCode kInvalid = ErrorCode::invalid_argument;

// The tiny preset's model, unsharded, as a checkpoint that `tpf import` could have written.
GlobalCheckpoint tiny_checkpoint(uint64_t seed = 3) {
  GlobalCheckpoint c;
  c.config = preset_config("tiny");
  c.seed = seed;
  c.tp_size = 1;
  const Gpt model(c.config.model, 0, 1, seed);
  for (const Parameter* p : model.parameters()) {
    GlobalTensor g;
    g.name = p->name;
    g.shard = p->shard;
    g.value = p->value;
    c.tensors.push_back(std::move(g));
  }
  return c;
}

GlobalTensor& tensor_named(GlobalCheckpoint& c, const std::string& name) {
  for (GlobalTensor& t : c.tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Replaces the first `from` in the file with `to` (the test fails if it is not there).
void edit_file(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = read_file(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  text.replace(at, from.size(), to);
  write_file(path, text);
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += a + " ";
  return s;
}

// ---- one strict parser -------------------------------------------------------------------------

TEST(StrictNumbers, WholeTextInRangeNamingTheField) {
  EXPECT_EQ(parse_integer("12", 1, 100, "x"), 12);
  EXPECT_EQ(parse_integer("-3", -5, 5, "x"), -3);
  EXPECT_EQ(parse_unsigned("18446744073709551615", UINT64_MAX, "seed"), UINT64_MAX);
  EXPECT_DOUBLE_EQ(parse_real("1e-5", 0, 1, "eps"), 1e-5);
  // std::stoll read "1e30" as 1 and "12abc" as 12; std::stof failed with "stof".
  EXPECT_TPF_ERROR(parse_integer("1e30", 1, 100, "m.st: metadata 'n_head'"), kInvalid,
                   "m.st: metadata 'n_head' must be an integer in [1, 100], got '1e30'");
  for (const char* bad : {"", " 5", "5 ", "+5", "12abc", "0x10", "101", "0"}) {
    EXPECT_TPF_ERROR(parse_integer(bad, 1, 100, "field"), kInvalid, "field", bad);
  }
  EXPECT_TPF_ERROR(parse_integer("2147483648", 1, 4096, "--tp"), kInvalid, "--tp", "[1, 4096]");
  EXPECT_TPF_ERROR(parse_integer("99999999999999999999", 0, INT64_MAX, "n"), kInvalid, ">= 0");
  EXPECT_TPF_ERROR(parse_unsigned("-1", UINT64_MAX, "seed"), kInvalid, "seed");
  for (const char* bad : {"abc", "1e-5x", "inf", "nan", "-1", "2"}) {
    EXPECT_TPF_ERROR(parse_real(bad, 0, 1, "eps"), kInvalid, "eps", bad);
  }
  EXPECT_TPF_ERROR(parse_real("-1", 0, std::numeric_limits<double>::max(), "--temperature"),
                   kInvalid, "--temperature must be a number >= 0, got '-1'");
}

// ---- sizes from configurations -----------------------------------------------------------------

TEST(ModelInputs, ConfigSizesAreBoundedAndNameTheFile) {
  // Each of these overflowed, ran out of memory or never ended.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model": {"width": 4611686018427387904}})", "model.width must be in [1, 65536]"},
      {R"({"model": {"layers": 100000000}})", "model.layers must be in [1, 4096]"},
      {R"({"model": {"context": 4294967296}})", "model.context must be in [2, 65536]"},
      {R"({"train": {"batch_size": 4611686018427387904}})", "train.batch_size must be in"},
      {R"({"train": {"batch_size": 1000000, "steps": 1}})", "tokens per micro-batch"},
      {R"({"train": {"grad_accum": 4611686018427387904}})", "train.grad_accum must be in"},
      {R"({"train": {"steps": 0}})", "train.steps must be in [1, "},
      {R"({"model": {"heads": 128, "width": 64}})", "multiple of heads"},
  };
  for (const auto& [json, message] : cases) {
    EXPECT_TPF_ERROR(parse_config(json, "my.json"), kInvalid, "my.json", message);
  }
  // The largest valid sizes keep derived sizes far from overflow.
  RunConfig big;
  big.model.layers = kMaxLayers;
  big.model.width = kMaxWidth;
  big.model.heads = 1;
  big.model.context = kMaxContext;
  big.model.vocab = kMaxVocab;
  big.train.batch_size = kMaxTokensPerMicroBatch / kMaxContext;
  EXPECT_NO_THROW(validate(big));
  EXPECT_LT(parameter_count(big.model), int64_t{1} << 49);
  EXPECT_GT(training_memory_lower_bound(big, 1), 1e15);
}

TEST(ModelInputs, TrainRefusesHugeConfigsBeforeAllocating) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt", 5000);
  struct Case {
    std::string json;
    std::string message;
  };
  const std::vector<Case> cases = {
      // UBSan: signed overflow in self_attention.cc, then SIGSEGV.
      {R"({"preset": "tiny", "model": {"width": 4611686018427387904}})",
       "model.width must be in [1, 65536] (got 4611686018427387904)"},
      // Valid sizes whose weights alone need ~190000 GiB.
      {R"({"preset": "tiny", "model": {"layers": 4000, "width": 16384, "heads": 4}})",
       "needs at least"},
      // Valid sizes whose activations need ~30 TiB.
      {R"({"preset": "tiny", "model": {"layers": 64, "width": 1024}, "train": {"batch_size": 500000}})",
       "needs at least"},
  };
  for (const Case& c : cases) {
    write_file(dir / "c.json", c.json);
    const Outcome r =
        run_tpf({"train", "--config", dir / "c.json", "--data", text, "--quiet"}, {}, {}, 30s);
    EXPECT_FALSE(r.timed_out) << c.json;
    EXPECT_EQ(r.exit_code, 1) << c.json << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.json << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "c.json") || contains(r.err, "this machine has")) << r.err;
  }
}

// ---- training text, steps, and what `tpf train` says -------------------------------------------

TEST(ModelInputs, TextOfContextPlusOneBytesIsEnough) {
  // One sample is `context` inputs and the byte after the last of them.
  const TextData data(std::string(129, 'a'), 128, "t129.txt");
  std::vector<int32_t> inputs, targets;
  data.batch(1, 0, 0, 2, inputs, targets);
  EXPECT_EQ(inputs.size(), 256u);
  EXPECT_TPF_ERROR(TextData(std::string(128, 'a'), 128, "t128.txt"), kInvalid,
                   "'t128.txt' has 128 bytes; it needs at least 129");
}

TEST(ModelInputs, TrainSaysWhatItDid) {
  ScratchDir dir;
  const std::string text = write_training_text(dir / "text.txt", 5000);
  const std::string run = dir / "run";
  const Outcome one = run_tpf(
      {"train", "--preset", "tiny", "--data", text, "--steps", "1", "--out", run, "--threads", "1"},
      {}, {}, 60s);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_TRUE(contains(one.out, "tpf train: 1 step, loss")) << one.out;
  EXPECT_FALSE(contains(one.out, " 0 tokens/s")) << one.out;

  // --steps 0 exited 0 having done nothing.
  const Outcome zero =
      run_tpf({"train", "--preset", "tiny", "--data", text, "--steps", "0"}, {}, {}, 30s);
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  EXPECT_TRUE(contains(zero.err, "--steps must be an integer in [1, ")) << zero.err;

  // Resuming a run that has already taken its steps.
  const Outcome done =
      run_tpf({"train", "--resume", run, "--data", text, "--steps", "1"}, {}, {}, 30s);
  EXPECT_EQ(done.exit_code, 1) << done.err;
  EXPECT_TRUE(contains(done.err, "has already taken 1 step and the run ends at step 1"))
      << done.err;

  // A text of exactly context + 1 bytes (the tiny preset's context is 32).
  write_file(dir / "t33.txt", std::string(33, 'x'));
  const Outcome short_text =
      run_tpf({"train", "--preset", "tiny", "--data", dir / "t33.txt", "--steps", "1", "--quiet"},
              {}, {}, 60s);
  EXPECT_EQ(short_text.exit_code, 0) << short_text.err;
}

// ---- checkpoints -------------------------------------------------------------------------------

TEST(ModelInputs, ParameterShapesAreThoseOfTheModel) {
  ModelConfig m = preset_config("tiny").model;
  m.vocab = 250;  // padded at TP 2
  const Gpt model(m, 0, 2, 1);
  const std::vector<ParameterShape> shapes = gpt_parameter_shapes(m, padded_vocab(m.vocab, 2));
  ASSERT_EQ(shapes.size(), model.parameters().size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_EQ(shapes[i].name, model.parameters()[i]->name);
    EXPECT_EQ(shapes[i].shape, model.parameters()[i]->global_shape) << shapes[i].name;
  }
}

TEST(ModelInputs, ManifestSizesMustMatchTheRankFiles) {
  ScratchDir dir;
  write_checkpoint_files(dir / "ck", tiny_checkpoint(), 2);
  EXPECT_NO_THROW(read_checkpoint(dir / "ck"));
  // The generator then built a model of 10^8 layers (out of memory).
  edit_file(dir / "ck/checkpoint.json", "\"layers\":2", "\"layers\":100000000");
  EXPECT_TPF_ERROR(read_checkpoint(dir / "ck"), kInvalid, "checkpoint.json",
                   "model.layers must be in [1, 4096]");
  edit_file(dir / "ck/checkpoint.json", "\"layers\":100000000", "\"layers\":3000");
  EXPECT_TPF_ERROR(read_checkpoint(dir / "ck"), kInvalid, "rank-0-of-2.safetensors",
                   "has no tensor 'h.2.ln_1.weight'", "3000 layers");
  edit_file(dir / "ck/checkpoint.json", "\"layers\":3000", "\"layers\":2");
  edit_file(dir / "ck/checkpoint.json", "\"tp_size\":2", "\"tp_size\":4294967298");
  EXPECT_TPF_ERROR(read_checkpoint(dir / "ck"), kInvalid, "tp_size 4294967298");
}

TEST(ModelInputs, SwappedOrMixedRankFilesAreRefused) {
  ScratchDir dir;
  const GlobalCheckpoint c = tiny_checkpoint();
  write_checkpoint_files(dir / "ck", c, 2);
  write_checkpoint_files(dir / "ck4", c, 4);
  GlobalCheckpoint later = c;
  later.step = 9;
  write_checkpoint_files(dir / "later", later, 2);

  // Rank 0's file copied over rank 1's: generation used the wrong weights.
  fs::copy_file(dir / "ck/rank-0-of-2.safetensors", dir / "ck/rank-1-of-2.safetensors",
                fs::copy_options::overwrite_existing);
  EXPECT_TPF_ERROR(read_checkpoint(dir / "ck"), kInvalid, "rank-1-of-2.safetensors holds rank 0",
                   "lists it as rank 1 of 2");
  // A file of another TP size under this one's name.
  write_checkpoint_files(dir / "ck", c, 2);
  fs::copy_file(dir / "ck4/rank-1-of-4.safetensors", dir / "ck/rank-1-of-2.safetensors",
                fs::copy_options::overwrite_existing);
  EXPECT_TPF_ERROR(read_checkpoint(dir / "ck"), kInvalid, "holds rank 1 of TP size 4");
  // A file of another checkpoint.
  write_checkpoint_files(dir / "ck", c, 2);
  fs::copy_file(dir / "later/rank-1-of-2.safetensors", dir / "ck/rank-1-of-2.safetensors",
                fs::copy_options::overwrite_existing);
  EXPECT_TPF_ERROR(read_checkpoint(dir / "ck"), kInvalid, "saved at step 9");
}

// ---- import ------------------------------------------------------------------------------------

TEST(ModelInputs, ImportChecksTheMetadataAgainstTheTensors) {
  const SafeTensorsFile good = export_hf(tiny_checkpoint());
  EXPECT_NO_THROW(import_hf(good, std::nullopt, "m.safetensors"));
  struct Case {
    std::string key;
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      // Grew ~300 MB/s building a model of 10^9 layers.
      {"n_layer", "1000000000", "metadata 'n_layer' must be an integer in [1, 4096]"},
      {"n_layer", "1000", "metadata 'n_layer' says 1000 but the file holds the tensors of 2"},
      {"n_embd", "128", "metadata 'n_embd' says 128 but wte.weight is [256, 64]"},
      // Read as 1 head; the import succeeded.
      {"n_head", "1e30", "metadata 'n_head' must be an integer in [1, 65536], got '1e30'"},
      {"n_head", "3", "model.width (64) must be a positive multiple of heads (3)"},
      // "error: stof".
      {"layer_norm_epsilon", "abc", "metadata 'layer_norm_epsilon' must be a number"},
      {"tpfabric_step", "-1", "metadata 'tpfabric_step'"},
  };
  for (const Case& c : cases) {
    SafeTensorsFile f = good;
    f.metadata[c.key] = c.value;
    EXPECT_TPF_ERROR(import_hf(f, std::nullopt, "m.safetensors"), kInvalid, "m.safetensors",
                     c.message);
  }
}

TEST(ModelInputs, ImportKeepsStepSeedAndTrainingConfig) {
  GlobalCheckpoint c = tiny_checkpoint(18446744073709551557u);
  c.step = 77;
  c.config.train.lr = 1e-3;
  c.config.train.min_lr = 1e-4;
  c.config.train.batch_size = 3;
  c.config.model.dropout = 0.25f;
  const GlobalCheckpoint back = import_hf(export_hf(c), std::nullopt, "m.safetensors");
  EXPECT_EQ(back.step, 77);
  EXPECT_EQ(back.seed, 18446744073709551557u);
  EXPECT_EQ(config_to_json(back.config), config_to_json(c.config));
}

TEST(ModelInputs, ImportTpSizeIsCheckedAndNamed) {
  ScratchDir dir;
  write_safetensors(dir / "m.safetensors", export_hf(tiny_checkpoint()));
  // Wrapped to TP -2147483648, exited 0 and wrote an unusable checkpoint.
  const Outcome wrapped =
      run_tpf({"import", "--in", dir / "m.safetensors", "--out", dir / "a", "--tp", "2147483648"},
              {}, {}, 30s);
  EXPECT_EQ(wrapped.exit_code, 2) << wrapped.out;
  EXPECT_TRUE(contains(wrapped.err, "--tp must be an integer in [1, 4096], got '2147483648'"))
      << wrapped.err;
  EXPECT_FALSE(fs::exists(dir / "a/checkpoint.json"));
  // Named no tensor: "tensor [64, 192]: dimension 1 ... does not split".
  const Outcome three = run_tpf(
      {"import", "--in", dir / "m.safetensors", "--out", dir / "b", "--tp", "3"}, {}, {}, 30s);
  EXPECT_EQ(three.exit_code, 1);
  EXPECT_TRUE(contains(three.err, "4 heads do not split over 3")) << three.err;
  EXPECT_FALSE(fs::exists(dir / "b/checkpoint.json"));
}

// ---- generate ----------------------------------------------------------------------------------

// A model whose every next byte is 0: the final LayerNorm outputs its bias, which points along
// the embedding of byte 0 alone.
GlobalCheckpoint zero_byte_model() {
  GlobalCheckpoint c = tiny_checkpoint();
  const int64_t width = c.config.model.width;
  tensor_named(c, "ln_f.weight").value.zero();
  float* bias = tensor_named(c, "ln_f.bias").value.f32();
  std::fill(bias, bias + width, 0.0f);
  bias[0] = 10.0f;
  Tensor& wte = tensor_named(c, "wte.weight").value;
  wte.zero();
  wte.f32()[0] = 1.0f;  // row 0 = e_0
  return c;
}

TEST(ModelInputs, GenerateWritesEveryByteAndTakesAWholeContextPrompt) {
  ScratchDir dir;
  write_checkpoint_files(dir / "zero", zero_byte_model(), 1);
  const Outcome g = run_tpf({"generate", "--checkpoint", dir / "zero", "--prompt", "ab", "--tokens",
                             "3", "--temperature", "0", "--threads", "1"},
                            {}, {}, 30s);
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out, std::string("ab\0\0\0\n", 6));  // stdout was "ab" (a C string)
  EXPECT_TRUE(contains(g.err, "3 bytes in")) << g.err;

  // The tiny preset's context is 32: a prompt of 32 bytes fills it, then the window slides.
  const std::string full(32, 'p');
  const Outcome fits = run_tpf({"generate", "--checkpoint", dir / "zero", "--prompt", full,
                                "--tokens", "40", "--temperature", "0", "--threads", "1"},
                               {}, {}, 30s);
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(fits.out, full + std::string(40, '\0') + "\n");
  const Outcome too_long =
      run_tpf({"generate", "--checkpoint", dir / "zero", "--prompt", full + "p", "--tokens", "1"},
              {}, {}, 30s);
  EXPECT_EQ(too_long.exit_code, 2);
  EXPECT_TRUE(contains(too_long.err, "the prompt has 33 bytes; the model's context is 32"))
      << too_long.err;
}

// ---- bench -------------------------------------------------------------------------------------

TEST(ModelInputs, BenchMinBytesZeroIsRefused) {
  // Looped forever growing its list of sizes (1 GB in 5 s). Bench needs the launcher's ranks;
  // each of them refuses the flag before any rank talks to another.
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"-b", "0"},
        std::vector<std::string>{"--minbytes=0", "-e", "1K"}}) {
    std::vector<std::string> args = {"run", "-n", "1", "--", TPF_BINARY, "bench", "all_reduce"};
    args.insert(args.end(), flags.begin(), flags.end());
    const Outcome r = run_tpf(args, {}, {}, 10s);
    EXPECT_FALSE(r.timed_out) << joined(args);
    EXPECT_NE(r.exit_code, 0) << joined(args) << r.err;
    EXPECT_TRUE(contains(r.err, "-b expects a byte count of at least 1")) << r.err;
  }
  const Outcome huge = run_tpf({"bench", "all_reduce", "-n", "99999999999"}, {}, {}, 20s);
  EXPECT_EQ(huge.exit_code, 2) << huge.err;
  EXPECT_TRUE(contains(huge.err, "-n must be an integer")) << huge.err;
}

}  // namespace
}  // namespace tpf::testing
