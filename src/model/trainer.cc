#include "model/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/byte_size.h"
#include "formats/json.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model/loss_plot.h"
#include "model/optimizer.h"
#include "model/parallel_step.h"
#include "model/text_data.h"
#include "model/trace_file.h"
#include "model/zero_optimizer.h"
#include "tpf/error.h"
#include "tpf/mesh.h"

namespace tpf {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%llds", s);
  }
  return buf;
}

std::string record_json(const StepRecord& r) {
  json::Value v;
  v.set("step", r.step);
  v.set("loss", r.loss);
  v.set("lr", r.lr);
  v.set("grad_norm", r.grad_norm);
  v.set("seconds", r.seconds);
  v.set("comm_seconds", r.comm_seconds);
  v.set("tp_comm_seconds", r.tp_comm_seconds);
  v.set("pp_wait_seconds", r.pp_wait_seconds);
  v.set("dp_comm_seconds", r.dp_comm_seconds);
  v.set("tokens_per_s", r.tokens_per_s);
  return json::dump(v);
}

// The machine's memory in bytes (0 if unknown).
double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// Refuses a model whose weights, gradients, moments and activations certainly do not fit, before
// anything is allocated: a few characters of configuration must not run the machine out of memory.
// With pp stages the largest stage holds at least 1/pp of the model and of one micro-batch's
// activations, so the bound divided by pp is still a lower bound for the fullest rank.
void check_fits_in_memory(const RunConfig& config, int tp_size, int stages) {
  const double need = training_memory_lower_bound(config, tp_size) / stages;
  const double have = physical_memory_bytes();
  if (have > 0 && need > have) {
    throw Error(ErrorCode::resource,
                "configuration: training this model needs at least " + base::format_bytes(need) +
                    " per rank at TP=" + std::to_string(tp_size) +
                    (stages > 1 ? " and " + std::to_string(stages) + " pipeline stages" : "") +
                    " (" + std::to_string(parameter_count(config.model)) +
                    " parameters with gradients and AdamW moments, and the activations of " +
                    std::to_string(config.train.batch_size) + " x " +
                    std::to_string(config.model.context) + " tokens), but this machine has " +
                    base::format_bytes(have) +
                    "; use a smaller model.*, train.batch_size or model.context");
  }
}

// AdamW over this rank's parameters, whole or (ZeRO-1) with its moments split over the DP
// replicas. Checkpoints see whole moments either way.
class StageOptimizer {
 public:
  StageOptimizer(Gpt& model, const TrainConfig& config, TrainGroups& groups, bool zero1)
      : model_(model), config_(config) {
    if (zero1) {
      sharded_ = std::make_unique<ShardedAdamW>(model.parameters(), config, *groups.data,
                                                groups.data_seconds, groups.timeline);
    } else {
      whole_ = std::make_unique<AdamW>(model.parameters(), config);
    }
  }
  ShardedAdamW* sharded() { return sharded_.get(); }
  int64_t steps_taken() const { return whole_ ? whole_->steps_taken() : sharded_->steps_taken(); }
  void step(double lr, double grad_scale) {
    whole_ ? whole_->step(lr, grad_scale) : sharded_->step(lr, grad_scale);
  }
  void load(const GlobalCheckpoint& checkpoint, const TpGroup& tp) {
    if (whole_) return load_into(checkpoint, tp.rank(), tp.size(), model_, whole_.get());
    AdamW whole(model_.parameters(), config_);  // whole moments only while they are loaded
    load_into(checkpoint, tp.rank(), tp.size(), model_, &whole);
    sharded_->load_moments(whole.first_moments(), whole.second_moments(), whole.steps_taken());
  }
  // Collective over DP with ZeRO-1 (the moments are gathered); call on every replica.
  void save(bool writes, TpGroup& tp, const std::string& dir, const RunConfig& config,
            uint64_t seed, Communicator* pipeline) {
    std::unique_ptr<AdamW> gathered;
    if (sharded_) {
      gathered = std::make_unique<AdamW>(model_.parameters(), config_);
      sharded_->gather_moments(gathered->first_moments(), gathered->second_moments());
      gathered->set_steps_taken(sharded_->steps_taken());
    }
    if (writes) {
      save_checkpoint(tp, dir, config, seed, model_, whole_ ? whole_.get() : gathered.get(),
                      pipeline);
    }
  }

 private:
  Gpt& model_;
  TrainConfig config_;
  std::unique_ptr<AdamW> whole_;
  std::unique_ptr<ShardedAdamW> sharded_;
};

// Rank 0 asks options.choose_layout; every rank receives its answer, or learns that it failed
// (rank 0 then rethrows the chooser's own error).
TrainLayout agreed_auto_layout(Communicator& comm, const TrainOptions& options,
                               const RunConfig& config) {
  if (!options.choose_layout) {
    throw Error(
        ErrorCode::invalid_argument,
        "layout \"auto\" needs TrainOptions::choose_layout (tpf train gives the planner's)");
  }
  // tp, pp, dp, zero1, first, last, vp; tp = 0: it failed
  int32_t sizes[7] = {0, 0, 0, 0, 0, 0, 0};
  std::exception_ptr failure;
  if (comm.rank() == 0) {
    try {
      const TrainLayout chosen = options.choose_layout(config, comm.size());
      sizes[0] = chosen.tp;
      sizes[1] = chosen.pp;
      sizes[2] = chosen.dp;
      sizes[3] = chosen.zero1 ? 1 : 0;
      sizes[4] = chosen.first_layers;
      sizes[5] = chosen.last_layers;
      sizes[6] = chosen.vp;
    } catch (...) {
      failure = std::current_exception();
    }
  }
  comm.broadcast(sizes, sizes, 7, DType::i32, 0);
  if (failure) std::rethrow_exception(failure);
  if (sizes[0] == 0) {
    throw Error(ErrorCode::invalid_argument,
                "--layout auto: rank 0 could not choose a layout (its error says why)");
  }
  TrainLayout layout;
  layout.tp = sizes[0];
  layout.pp = sizes[1];
  layout.dp = sizes[2];
  layout.zero1 = sizes[3] != 0;
  layout.first_layers = sizes[4];
  layout.last_layers = sizes[5];
  layout.vp = sizes[6];
  return layout;
}

}  // namespace

TrainSummary train(Communicator& comm, const TrainOptions& options) {
  RunConfig config = options.config;
  uint64_t seed = options.seed;
  GlobalCheckpoint resumed;
  const bool resuming = !options.resume.empty();
  if (resuming) {
    resumed = read_checkpoint(options.resume);
    config = resumed.config;
    seed = resumed.seed;
  }
  if (options.steps >= 0) config.train.steps = options.steps;
  if (options.sequence_parallel) config.train.sequence_parallel = true;
  validate(config);
  if (!options.trace_path.empty() && comm.rank() == 0 &&
      !std::ofstream(options.trace_path, std::ios::trunc)) {
    // Found before training, not after it (rank 0 writes the trace at the end).
    throw Error(ErrorCode::invalid_argument, "--trace: cannot write " + options.trace_path);
  }
  TrainLayout layout;
  layout.tp = comm.size();
  if (options.layout == kAutoLayout) {
    layout = agreed_auto_layout(comm, options, config);
  } else if (!options.layout.empty()) {
    layout = parse_train_layout(options.layout);
  }
  check_train_layout(layout, comm.size(), config);
  if (comm.rank() == 0 && options.on_layout) options.on_layout(config, layout);
  // TP innermost, then DP, pipeline stages outermost (train_layout.h).
  DeviceMesh mesh(comm, {{"pp", layout.pp}, {"dp", layout.dp}, {"tp", layout.tp}});
  TrainGroups groups{TpGroup{&mesh.group("tp")}, &mesh.group("pp"), &mesh.group("dp")};
  TpGroup& tp = groups.tp;
  Timeline timeline;
  if (!options.trace_path.empty()) {
    timeline.enable();
    tp.timeline = groups.timeline = &timeline;
  }
  tp.sequence_parallel = config.train.sequence_parallel;
  tp.overlap_backward_comm = config.train.tp_comm_overlap;
  const ModelConfig& mc = config.model;
  const TrainConfig& tc = config.train;

  if (resuming && resumed.step >= tc.steps) {
    throw Error(ErrorCode::invalid_argument,
                "the checkpoint in '" + options.resume + "' has already taken " +
                    std::to_string(resumed.step) + " step" + (resumed.step == 1 ? "" : "s") +
                    " and the run ends at step " + std::to_string(tc.steps) +
                    ": nothing to train; give --steps above " + std::to_string(resumed.step));
  }
  check_fits_in_memory(config, layout.tp, layout.pp);

  const TextData data(options.data_path, mc.context);
  Gpt model(mc, tp.rank(), tp.size(), seed, pipeline_stage(mc, layout, groups.stage()));
  StageOptimizer optimizer(model, tc, groups, layout.zero1);
  if (resuming) optimizer.load(resumed, tp);
  TrainSummary summary;
  summary.layout = layout;
  summary.micro_batches = tc.grad_accum / layout.dp;
  summary.first_step = optimizer.steps_taken();
  resumed = GlobalCheckpoint();  // free the whole-model copy

  const bool writer = comm.rank() == 0 && !options.out_dir.empty();
  std::ofstream log;
  if (writer) {
    fs::create_directories(options.out_dir);
    std::ofstream(fs::path(options.out_dir) / "config.json") << config_to_json(config) << "\n";
    const fs::path log_path = fs::path(options.out_dir) / "log.jsonl";
    log.open(log_path, resuming ? std::ios::app : std::ios::trunc);
    if (!log) throw Error(ErrorCode::system, "cannot write " + log_path.string());
  }
  if (comm.rank() == 0 && options.progress) {
    int64_t params = 0;
    for (const ParameterShape& p : gpt_parameter_shapes(mc, padded_vocab(mc.vocab, tp.size())))
      params += shape_numel(p.shape);
    std::printf(
        "tpf train: %s model (%lld layers, width %lld, %lld heads, context %lld), "
        "%.2fM parameters, %s%s, %lld steps of %lld x %lld x %lld tokens, data %s (%lld "
        "bytes)%s\n",
        config.preset.empty() ? "custom" : config.preset.c_str(), static_cast<long long>(mc.layers),
        static_cast<long long>(mc.width), static_cast<long long>(mc.heads),
        static_cast<long long>(mc.context), static_cast<double>(params) / 1e6,
        layout.to_string().c_str(), tc.sequence_parallel ? " with sequence parallelism" : "",
        static_cast<long long>(tc.steps), static_cast<long long>(tc.grad_accum),
        static_cast<long long>(tc.batch_size), static_cast<long long>(mc.context),
        data.source().c_str(), static_cast<long long>(data.size()),
        resuming ? (" -- resumed at step " + std::to_string(summary.first_step)).c_str() : "");
    std::fflush(stdout);
  }

  const int64_t tokens_per_step = tc.grad_accum * tc.batch_size * mc.context;
  const RngKey dropout_root{seed, stream_of("dropout")};
  StepRecord timed;  // sums over the steps after the first
  int64_t timed_steps = 0;
  auto save = [&](int64_t step) {
    if (options.out_dir.empty()) return;
    // DP replicas hold the same model: the first one writes it.
    optimizer.save(mesh.coord("dp") == 0, tp, checkpoint_dir_for_step(options.out_dir, step),
                   config, seed, groups.pipeline);
    if (comm.rank() == 0) mark_latest(options.out_dir, step, /*keep=*/2);
  };

  for (int64_t step = summary.first_step; step < tc.steps; ++step) {
    const auto start = Clock::now();
    const double tp_before = tp.comm_seconds, pp_before = groups.pipeline_seconds,
                 dp_before = groups.data_seconds;
    model.zero_grad();
    auto micro_batch = [&](int64_t index, MicroBatch& out) {
      data.batch(seed, step, index, tc.batch_size, out.inputs, out.targets);
      out.dropout_key =
          dropout_root.derive(static_cast<uint64_t>(step)).derive(static_cast<uint64_t>(index));
    };
    const int64_t per_replica = tc.grad_accum / layout.dp;
    const MicroBatchRange range{mesh.coord("dp") * per_replica, per_replica, tc.batch_size,
                                mc.context};
    GradientBuckets buckets(*groups.data, groups.data_seconds, groups.timeline);
    DataParallelSums sums;
    sums.zero = optimizer.sharded();
    sums.overlap = tc.dp_comm_overlap;
    if (tc.dp_comm_overlap && sums.zero == nullptr) sums.buckets = &buckets;
    const double loss_sum = run_pipeline(
        model, groups, range, 1.0 / static_cast<double>(tc.grad_accum), micro_batch, sums);
    synchronize_gradients(model, groups, sums);
    const double loss = step_mean_loss(groups, loss_sum, tc.grad_accum);
    const double norm = model_grad_norm(model, groups, optimizer.sharded());
    const double scale = tc.clip > 0 && norm > tc.clip ? tc.clip / norm : 1.0;
    const double lr = learning_rate(tc, step);
    const auto optimizer_start = Clock::now();
    optimizer.step(lr, scale);
    timeline.add("compute", "optimizer step", optimizer_start, Clock::now());

    StepRecord r;
    r.step = step + 1;
    r.loss = loss;
    r.lr = lr;
    r.grad_norm = norm;
    const auto end = Clock::now();
    timeline.add("step", "step " + std::to_string(step + 1), start, end);
    r.seconds = std::chrono::duration<double>(end - start).count();
    r.tp_comm_seconds = tp.comm_seconds - tp_before;
    r.pp_wait_seconds = groups.pipeline_seconds - pp_before;
    r.dp_comm_seconds = groups.data_seconds - dp_before;
    r.comm_seconds = r.tp_comm_seconds + r.pp_wait_seconds + r.dp_comm_seconds;
    r.tokens_per_s = static_cast<double>(tokens_per_step) / r.seconds;
    summary.records.push_back(r);
    if (step > summary.first_step) {  // the first step pays for first touches of memory
      timed.seconds += r.seconds;
      timed.comm_seconds += r.comm_seconds;
      timed.tp_comm_seconds += r.tp_comm_seconds;
      timed.pp_wait_seconds += r.pp_wait_seconds;
      timed.dp_comm_seconds += r.dp_comm_seconds;
      ++timed_steps;
    }
    if (!std::isfinite(loss)) {
      throw Error(ErrorCode::internal, "training diverged: the loss is " + std::to_string(loss) +
                                           " at step " + std::to_string(r.step) +
                                           "; lower train.lr or raise train.warmup");
    }
    if (writer) log << record_json(r) << "\n" << std::flush;
    if (comm.rank() == 0 && options.progress &&
        (r.step % tc.log_every == 0 || r.step == tc.steps || step == summary.first_step)) {
      const double avg =
          timed_steps > 0 ? timed.seconds / static_cast<double>(timed_steps) : r.seconds;
      std::printf("step %6lld/%lld | loss %.4f | lr %.2e | %7.0f tok/s | comm %4.1f%% | ETA %s\n",
                  static_cast<long long>(r.step), static_cast<long long>(tc.steps), r.loss, lr,
                  timed_steps > 0 ? static_cast<double>(tokens_per_step) *
                                        static_cast<double>(timed_steps) / timed.seconds
                                  : r.tokens_per_s,
                  100.0 * (timed_steps > 0 ? timed.comm_seconds / timed.seconds
                                           : r.comm_seconds / r.seconds),
                  format_duration(avg * static_cast<double>(tc.steps - r.step)).c_str());
      std::fflush(stdout);
    }
    if (tc.checkpoint_every > 0 && r.step % tc.checkpoint_every == 0 && r.step < tc.steps) {
      save(r.step);
    }
  }
  if (tc.steps > summary.first_step) save(tc.steps);
  // A single step: its own rate (first touches of memory included) rather than none at all.
  const StepRecord& over =
      timed_steps > 0 || summary.records.empty() ? timed : summary.records.front();
  if (over.seconds > 0) {
    summary.tokens_per_s = static_cast<double>(tokens_per_step) *
                           static_cast<double>(std::max<int64_t>(timed_steps, 1)) / over.seconds;
    summary.comm_share = over.comm_seconds / over.seconds;
    summary.tp_share = over.tp_comm_seconds / over.seconds;
    summary.pp_share = over.pp_wait_seconds / over.seconds;
    summary.dp_share = over.dp_comm_seconds / over.seconds;
  }
  if (!options.trace_path.empty()) {
    const std::string name =
        "rank " + std::to_string(comm.rank()) + " (tp " + std::to_string(tp.rank()) + ", dp " +
        std::to_string(mesh.coord("dp")) + ", stage " + std::to_string(groups.stage()) + ")";
    write_chrome_trace(comm, timeline, name, options.trace_path);
  }
  if (options.on_finish) options.on_finish(model, groups);
  if (writer) {
    write_loss_svg((fs::path(options.out_dir) / "loss.svg").string(),
                   (fs::path(options.out_dir) / "log.jsonl").string());
  }
  return summary;
}

}  // namespace tpf
