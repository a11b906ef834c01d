#include "model/parallel_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/optimizer.h"
#include "model/pipeline_schedule.h"
#include "parallel/linear.h"
#include "tpf/error.h"

namespace tpf {

namespace {

// A "compute" span of the timeline around f (its time is not counted anywhere: compute is what
// remains of the step).
template <class F>
decltype(auto) compute_span(TrainGroups& g, std::string name, F&& f) {
  if (g.timeline == nullptr || !g.timeline->enabled()) return std::forward<F>(f)();
  struct Record {
    Timeline* timeline;
    std::string name;
    Timeline::Clock::time_point start = Timeline::Clock::now();
    ~Record() { timeline->add("compute", std::move(name), start, Timeline::Clock::now()); }
  } record{g.timeline, std::move(name)};
  return std::forward<F>(f)();
}

// The activation crossing a stage boundary: this rank's rows of the micro-batch (all of them, or
// 1/T with sequence parallelism), the model's width.
ParallelTensor boundary_tensor(const TrainGroups& g, const MicroBatchRange& r, int64_t width) {
  const int64_t rows = r.batch * r.seq / (g.tp.sequence_parallel ? g.tp.size() : 1);
  return {Tensor({rows, width}), activation_placement(g.tp)};
}

// The tied embedding's copy on this stage where the pipeline has two (the first and the last
// stage's), else nothing.
std::vector<Parameter*> tied_embedding(Gpt& model, const TrainGroups& g) {
  if (g.stages() == 1) return {};
  if (g.stage() == 0) return {&model.parameter("wte.weight")};
  if (g.stage() == g.stages() - 1) return {model.tied_embedding_copy()};
  return {};
}

// What run_pipeline calls as the last micro-batch's backward finishes a group of gradients (see
// DataParallelSums), or nothing where the sums wait for the end of the pass.
Gpt::GradientsReady final_gradients_ready(Gpt& model, TrainGroups& g,
                                          const DataParallelSums& sums) {
  if (sums.zero != nullptr && sums.overlap) {
    return [&g, zero = sums.zero,
            held = tied_embedding(model, g)](const std::vector<Parameter*>& done) {
      std::vector<Parameter*> now;
      for (Parameter* p : done) {
        if (std::find(held.begin(), held.end(), p) == held.end()) now.push_back(p);
      }
      reduce_sequence_parallel_grads(g.tp, now);
      zero->reduce_async(now);
    };
  }
  if (sums.buckets != nullptr) {
    return [buckets = sums.buckets](const std::vector<Parameter*>& done) {
      buckets->reduce_async(done);
    };
  }
  return {};
}

}  // namespace

// A rank runs several forwards before the matching backwards: after each forward it moves what
// the layers saved for backward out of the model (Gpt::stash_activations) and moves it back in
// before the backward, so each micro-batch's activations are kept once and nothing is recomputed.
// The output layer's backward runs right after its forward, so that the logits are never kept:
// the gradient it hands to the blocks below is kept instead (rows x width floats, against
// rows x vocabulary / T).
//
// With interleaved stages (chunks > 1), chunk c of this rank is virtual stage c P + s: activations
// go to the next rank (from the last rank, to the first rank's next chunk) and gradients to the
// previous one. Every rank's sends and receives to a given peer happen in the same order
// (tested by the schedule's simulation), so untagged point-to-point messages match.
double run_pipeline(Gpt& model, TrainGroups& g, const MicroBatchRange& r, double loss_scale,
                    const MicroBatchSource& source, const DataParallelSums& sums) {
  const int stage = g.stage(), stages = g.stages();
  const int chunks = model.stage().chunks;
  const int virtual_stages = stages * chunks;
  const int next = (stage + 1) % stages, previous = (stage + stages - 1) % stages;
  const int64_t width = model.config().width;
  std::vector<Gpt::Activations> stashed(static_cast<size_t>(r.count * chunks));
  std::vector<ParallelTensor> head_gradients(static_cast<size_t>(r.count));
  // Outgoing tensors stay alive until their sends complete, also when an error unwinds the pass
  // (each send ends or fails within the communicator's deadline).
  struct Sends {
    std::vector<Tensor> buffers;
    std::vector<Work> works;
    ~Sends() {
      for (Work& w : works) {
        try {
          w.wait();
        } catch (...) {  // the error that unwound the pass is the one to report
        }
      }
    }
  } sends;
  MicroBatch micro;
  double loss_sum = 0;

  auto send = [&](ParallelTensor t, int peer) {
    Tensor& buffer = sends.buffers.emplace_back(std::move(t.local));
    sends.works.push_back(g.pipeline->send_async(buffer.data(), static_cast<size_t>(buffer.numel()),
                                                 DType::f32, peer));
  };
  auto receive = [&](int peer, const char* what) {
    ParallelTensor t = boundary_tensor(g, r, width);
    timed_span(g.timeline, g.pipeline_seconds, "pp", what, [&] {
      g.pipeline->recv(t.local.data(), static_cast<size_t>(t.local.numel()), DType::f32, peer);
    });
    return t;
  };

  for (const PipelinePass& pass :
       interleaved_one_forward_one_backward(stages, stage, chunks, r.count)) {
    const int64_t m = pass.micro_batch;
    const int chunk = pass.chunk;
    const int virtual_stage = chunk * stages + stage;
    const bool first = virtual_stage == 0, last = virtual_stage == virtual_stages - 1;
    const auto slot = static_cast<size_t>(m * chunks + chunk);
    const std::string label = std::to_string(r.first + m) +
                              (chunks > 1 ? " chunk " + std::to_string(chunk) : std::string());
    // Every schedule ends each chunk's passes with the last micro-batch's: the gradients it
    // finishes are final.
    const Gpt::GradientsReady ready =
        m == r.count - 1 ? final_gradients_ready(model, g, sums) : Gpt::GradientsReady();
    if (pass.kind == PipelinePass::Kind::forward) {
      ParallelTensor x = first ? ParallelTensor() : receive(previous, "recv activation");
      ParallelTensor y = compute_span(g, "forward " + label, [&] {
        source(r.first + m, micro);
        model.begin(r.batch, r.seq, micro.dropout_key);
        ParallelTensor out = model.forward_blocks(
            g.tp, first ? model.embed(g.tp, micro.inputs) : std::move(x), chunk);
        if (last) {
          loss_sum += model.forward_head(g.tp, out, micro.targets, loss_scale);
          head_gradients[static_cast<size_t>(m)] = model.backward_head(g.tp, ready);
        }
        return out;
      });
      if (!last) send(std::move(y), next);
      stashed[slot] = model.stash_activations(chunk);
      continue;
    }
    ParallelTensor dy =
        last ? std::move(head_gradients[static_cast<size_t>(m)]) : receive(next, "recv gradient");
    ParallelTensor dx = compute_span(g, "backward " + label, [&] {
      model.restore_activations(std::move(stashed[slot]), chunk);
      ParallelTensor d = model.backward_blocks(g.tp, std::move(dy), ready, chunk);
      if (first) model.backward_embedding(g.tp, d, ready);
      return d;
    });
    if (!first) send(std::move(dx), previous);
  }
  timed_span(g.timeline, g.pipeline_seconds, "pp", "wait for sends", [&] {
    for (Work& w : sends.works) w.wait();
  });
  return loss_sum;
}

namespace {

// The first and last stages' copies of the tied embedding each add the other's gradient.
void exchange_tied_embedding_grads(Gpt& model, TrainGroups& g) {
  const std::vector<Parameter*> tied = tied_embedding(model, g);
  if (!tied.empty()) {
    // Both copies become own + other: float addition is commutative, so they stay identical.
    Parameter& embedding = *tied.front();
    const int peer = g.stage() == 0 ? g.stages() - 1 : 0;
    const size_t count = static_cast<size_t>(embedding.grad.numel());
    Tensor other(embedding.grad.shape());
    timed_span(g.timeline, g.data_seconds, "dp", "tied embedding exchange", [&] {
      Work sent = g.pipeline->send_async(embedding.grad.data(), count, DType::f32, peer);
      g.pipeline->recv(other.data(), count, DType::f32, peer);
      sent.wait();
    });
    float* own = embedding.grad.f32();
    const float* theirs = other.f32();
    for (size_t i = 0; i < count; ++i) own[i] += theirs[i];
  }
}

}  // namespace

void synchronize_gradients(Gpt& model, TrainGroups& g, const DataParallelSums& sums) {
  const std::vector<Parameter*>& params = model.parameters();
  if (sums.zero != nullptr) {
    // Every sum is linear: the tied copies and sequence parallelism's partials are summed on the
    // local gradients, then the DP sum keeps this replica's share.
    exchange_tied_embedding_grads(model, g);
    if (sums.overlap) {  // run_pipeline summed the partials of all but the tied embedding
      const std::vector<Parameter*> tied = tied_embedding(model, g);
      reduce_sequence_parallel_grads(g.tp, tied);
      sums.zero->finish_reductions();
      return;
    }
    reduce_sequence_parallel_grads(g.tp, params);
    sums.zero->reduce_scatter_gradients();
    return;
  }
  if (sums.buckets != nullptr && !sums.buckets->empty()) {
    sums.buckets->finish();
  } else {
    // One all-reduce over every gradient: the fabric's result is bit-identical on every replica.
    timed_span(g.timeline, g.data_seconds, "dp", "DP gradient all-reduce", [&] {
      all_reduce_gradients(*g.data, params, [](const Parameter&) { return true; });
    });
  }
  exchange_tied_embedding_grads(model, g);
  reduce_sequence_parallel_grads(g.tp, params);
}

double model_grad_norm(Gpt& model, TrainGroups& g, const ShardedAdamW* zero) {
  double squares = 0;
  if (zero != nullptr) {
    // Each replica holds a share of the summed gradients: sum the shares over DP, then the
    // TP-sharded part over TP (replicated parameters are the same on every TP rank).
    auto [sharded, replicated] = zero->shard_square_sums(model.tied_embedding_copy());
    double sums[2] = {sharded, replicated};
    timed_span(g.timeline, g.data_seconds, "dp", "norm over replicas",
               [&] { g.data->all_reduce(sums, sums, 2, DType::f64, ReduceOp::sum); });
    g.tp.timed([&] {
      if (g.tp.size() > 1) g.tp.comm->all_reduce(sums, sums, 1, DType::f64, ReduceOp::sum);
    });
    squares = sums[0] + sums[1];
  } else {
    std::vector<Parameter*> counted;
    for (Parameter* p : model.parameters()) {
      if (p != model.tied_embedding_copy()) counted.push_back(p);
    }
    squares = grad_square_sum(g.tp, counted);
  }
  if (g.stages() > 1) {
    timed_span(g.timeline, g.data_seconds, "dp", "norm over stages",
               [&] { g.pipeline->all_reduce(&squares, &squares, 1, DType::f64, ReduceOp::sum); });
  }
  return std::sqrt(squares);
}

double step_mean_loss(TrainGroups& g, double last_stage_loss_sum, int64_t micro_batches) {
  double loss = last_stage_loss_sum;
  timed_span(g.timeline, g.data_seconds, "dp", "step loss", [&] {
    if (g.data->size() > 1) g.data->all_reduce(&loss, &loss, 1, DType::f64, ReduceOp::sum);
    if (g.stages() > 1) g.pipeline->broadcast(&loss, &loss, 1, DType::f64, g.stages() - 1);
  });
  return loss / static_cast<double>(micro_batches);
}

}  // namespace tpf
