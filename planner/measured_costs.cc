// Measured costs (see measured_costs.h): layer kinds timed on the CPU backend, messages timed
// between two Gloo ranks over loopback, and the step time they predict through the simulator.
#include "planner/measured_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/kv_store.h"
#include "core/error.h"
#include "core/random.h"
#include "core/units.h"
#include "kernels/backend.h"
#include "model/from_config.h"
#include "model/layer.h"
#include "worker/optimizer.h"

namespace baton {
namespace {

double Median(std::vector<double> values) {
  BATON_CHECK(!values.empty(), "no timings to take the median of");
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The first layer of each kind in the graph: a kind's layers cost the same.
std::map<LayerKind, LayerSpec> KindsOf(const std::vector<LayerSpec>& graph) {
  std::map<LayerKind, LayerSpec> kinds;
  for (const LayerSpec& spec : graph) kinds.try_emplace(spec.kind, spec);
  return kinds;
}

Tensor RandomTensor(Backend& backend, Shape shape, DType dtype, Rng& rng) {
  Tensor t = Tensor::Empty(backend.allocator(), shape, dtype, MemCategory::kActivations);
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (float& v : values) v = static_cast<float>(rng.NextNormal());
  ConvertFloats(values.data(), DType::kF32, t.raw(), dtype, values.size());
  return t;
}

Tensor RandomTokens(Backend& backend, Shape shape, int64_t vocab, Rng& rng) {
  Tensor t = Tensor::Empty(backend.allocator(), shape, DType::kI32, MemCategory::kActivations);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.NextBelow(static_cast<uint64_t>(vocab)));
  }
  return t;
}

double TimeIt(Backend& backend, const std::function<void()>& fn) {
  const Clock::time_point start = Clock::now();
  fn();
  backend.Synchronize();
  return Seconds(Clock::now() - start);
}

// F, B, I and W of one layer on one micro-batch: the median of `repeats` after a warm-up.
LayerTimes TimeLayer(Backend& backend, Layer& layer, const Tensor& x, const Tensor& dy,
                     const MicroBatch& batch, int repeats) {
  std::vector<double> f, b, i, w;
  const BackwardArgs args;
  for (int r = 0; r <= repeats; ++r) {
    Stash stash;
    Tensor y;
    const double forward = TimeIt(backend, [&] { y = layer.Forward(x, batch, stash); });
    y = Tensor();
    const double backward = TimeIt(backend, [&] { layer.Backward(dy, batch, stash, args); });
    Stash split;
    y = layer.Forward(x, batch, split);
    y = Tensor();
    const double input = TimeIt(backend, [&] { layer.BackwardInput(dy, batch, split, args); });
    const double weight = TimeIt(backend, [&] { layer.BackwardWeight(split); });
    if (r == 0) continue;  // warm-up: first-touch pages, GEMM primitives created
    f.push_back(forward);
    b.push_back(backward);
    i.push_back(input);
    w.push_back(weight);
  }
  return {Median(f), Median(b), Median(i), Median(w)};
}

// One layer's step-end share: its gradients' sum of squares, one AdamW step, zeroing them.
double TimeUpdate(Backend& backend, Layer& layer, const Config& config, OptimizerState state,
                  int repeats) {
  const TrainConfig& t = config.train;
  AdamWConfig hyper;
  hyper.lr = static_cast<float>(t.lr);
  hyper.beta1 = static_cast<float>(t.beta1);
  hyper.beta2 = static_cast<float>(t.beta2);
  hyper.eps = static_cast<float>(t.eps);
  hyper.weight_decay = static_cast<float>(t.weight_decay);
  Optimizer optimizer(backend, layer.params(), hyper, state == OptimizerState::kInt8);
  std::vector<double> times;
  for (int r = 0; r <= repeats; ++r) {
    const double seconds = TimeIt(backend, [&] {
      double sum = 0;
      for (Param* p : layer.params()) sum += backend.SumOfSquares(p->grad);
      optimizer.Step(hyper.lr, r + 1, static_cast<float>(1.0 / (1.0 + sum)));
      for (Param* p : layer.params()) backend.Zero(p->grad);
    });
    if (r > 0) times.push_back(seconds);
  }
  return Median(times);
}

void ProfileLayers(const Config& config, const ProfileRequest& request, MeasuredCosts& out) {
  const ModelDims dims = DimsOf(config.model);
  const std::map<LayerKind, LayerSpec> kinds = KindsOf(GraphOf(config.model));
  const int64_t seq_len = SequenceLength(config);
  const bool flash = config.model.attention == AttentionKind::kFlash;
  for (DType dtype : request.dtypes) {
    MemoryLedger ledger;
    std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, config.device.threads);
    for (const auto& [kind, spec] : kinds) {
      std::unique_ptr<Layer> layer =
          BuildLayer(spec, dims, *backend, dtype, dtype, config.train.seed);
      layer->set_flash_attention(flash);
      int64_t params = 0;
      for (Param* p : layer->params()) {
        backend->Zero(p->grad);
        params += p->value.numel();
      }
      out.params[kind] = params;
      Rng rng = Rng::ForStream(config.train.seed, {static_cast<uint64_t>(kind)});
      for (int64_t b : request.micro_batch_sizes) {
        MicroBatch batch;
        batch.tokens = RandomTokens(*backend, {b, seq_len}, config.model.vocab_size, rng);
        batch.targets = RandomTokens(*backend, {b, seq_len}, config.model.vocab_size, rng);
        if (config.data.packing) {  // one document per row: the layers read the starts
          batch.segment_starts = Tensor::Zeros(backend->allocator(), {b, seq_len}, DType::kI32,
                                               MemCategory::kActivations);
        }
        const Shape act = {b, seq_len, dims.width};
        const Tensor x =
            kind == LayerKind::kEmbedding ? Tensor() : RandomTensor(*backend, act, dtype, rng);
        const Tensor dy =
            kind == LayerKind::kHead ? Tensor() : RandomTensor(*backend, act, dtype, rng);
        KindTimes times;
        layer->set_selective_recompute(false);
        times.plain = TimeLayer(*backend, *layer, x, dy, batch, request.repeats);
        layer->set_selective_recompute(true);
        times.selective = layer->selective_recompute()
                              ? TimeLayer(*backend, *layer, x, dy, batch, request.repeats)
                              : times.plain;
        layer->set_selective_recompute(false);
        out.layers[{dtype, b}][kind] = times;
      }
      for (OptimizerState state : request.states) {
        out.update[{dtype, state}][kind] =
            TimeUpdate(*backend, *layer, config, state, request.repeats);
      }
    }
  }
}

// One-way seconds of a message of `bytes` between two Gloo ranks (threads of this process, over
// loopback TCP): the median of ping-pong round trips, halved.
double TimeMessage(GlooCommunicator* comms[2], Allocator& allocator, int64_t bytes, int repeats) {
  const int64_t n = std::max<int64_t>(1, bytes / 4);
  std::vector<double> round_trips(static_cast<size_t>(repeats + 1));
  std::string error;
  std::thread echo([&] {
    try {
      Tensor t = Tensor::Zeros(allocator, {n}, DType::kF32, MemCategory::kComm);
      for (int r = 0; r <= repeats; ++r) {
        comms[1]->Irecv(t, 0)->Wait(kDefaultWait);
        comms[1]->Isend(t, 0)->Wait(kDefaultWait);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  Tensor t = Tensor::Zeros(allocator, {n}, DType::kF32, MemCategory::kComm);
  try {
    for (int r = 0; r <= repeats; ++r) {
      const Clock::time_point start = Clock::now();
      comms[0]->Isend(t, 1)->Wait(kDefaultWait);
      comms[0]->Irecv(t, 1)->Wait(kDefaultWait);
      round_trips[static_cast<size_t>(r)] = Seconds(Clock::now() - start);
    }
  } catch (const std::exception& e) {
    comms[0]->Abort(e.what());
    comms[1]->Abort(e.what());
    echo.join();
    throw;
  }
  echo.join();
  BATON_CHECK(error.empty(), "timing a loopback message: {}", error);
  round_trips.erase(round_trips.begin());  // warm-up
  return Median(round_trips) / 2;
}

void ProfileMessages(const Config& config, const ProfileRequest& request, MeasuredCosts& out) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  MemoryKvStore store;
  std::unique_ptr<GlooCommunicator> comms[2];
  std::string error;
  std::thread second([&] {
    try {
      GlooOptions options;
      options.rank = 1;
      options.size = 2;
      options.store_prefix = "tune";
      comms[1] = std::make_unique<GlooCommunicator>(store, allocator, options);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  GlooOptions options;
  options.rank = 0;
  options.size = 2;
  options.store_prefix = "tune";
  comms[0] = std::make_unique<GlooCommunicator>(store, allocator, options);
  second.join();
  BATON_CHECK(error.empty(), "connecting two loopback Gloo ranks to time messages: {}", error);
  GlooCommunicator* raw[2] = {comms[0].get(), comms[1].get()};
  const int repeats = std::max(request.repeats, 5) * 4;
  out.message_latency_s = TimeMessage(raw, allocator, 4, repeats);
  const int64_t largest =
      *std::max_element(request.micro_batch_sizes.begin(), request.micro_batch_sizes.end());
  const int64_t bytes =
      largest * SequenceLength(config) * config.model.width * static_cast<int64_t>(sizeof(float));
  const double seconds = TimeMessage(raw, allocator, bytes, request.repeats * 2);
  out.message_bytes_per_s =
      static_cast<double>(bytes) / std::max(seconds - out.message_latency_s, 1e-9);
}

const std::map<LayerKind, KindTimes>& LayersFor(const Plan& plan, const MeasuredCosts& measured) {
  const DType dtype = plan.config.precision.dtype;
  const int64_t b = MicroBatchSize(plan.config);
  const auto it = measured.layers.find({dtype, b});
  BATON_CHECK(it != measured.layers.end(), "no measured costs for {} at micro-batch size {}",
              Name(dtype), b);
  return it->second;
}

const KindTimes& TimesOf(const std::map<LayerKind, KindTimes>& layers, LayerKind kind) {
  const auto it = layers.find(kind);
  BATON_CHECK(it != layers.end(), "no measured costs for layer kind {}", Name(kind));
  return it->second;
}

// A layer's F, B, I, W under the plan's checkpoint policy, recompute included.
LayerTimes UnderPolicy(const KindTimes& times, const CheckpointPolicy& policy) {
  if (policy.kind == CheckpointPolicy::Kind::kSelective) return times.selective;
  LayerTimes t = times.plain;
  if (policy.kind == CheckpointPolicy::Kind::kEvery) {
    t.backward += t.forward;
    t.backward_input += t.forward;
  }
  return t;
}

}  // namespace

MeasuredCosts MeasureCosts(const Config& config, const ProfileRequest& request) {
  BATON_CHECK(!request.dtypes.empty() && !request.micro_batch_sizes.empty() &&
                  !request.states.empty() && request.repeats >= 1,
              "profiling needs a precision, a micro-batch size, an optimizer state and a "
              "repetition");
  MeasuredCosts out;
  ProfileLayers(config, request, out);
  ProfileMessages(config, request, out);
  return out;
}

std::vector<double> MeasuredLayerCosts(const Plan& plan, const MeasuredCosts& measured) {
  const std::map<LayerKind, KindTimes>& layers = LayersFor(plan, measured);
  std::vector<double> costs;
  for (const LayerSpec& spec : plan.graph) {
    const LayerTimes t = UnderPolicy(TimesOf(layers, spec.kind), plan.config.parallel.checkpoint);
    costs.push_back(t.forward + t.backward);
  }
  return costs;
}

Costs MeasuredScheduleCosts(const Plan& plan, const MeasuredCosts& measured) {
  const std::map<LayerKind, KindTimes>& layers = LayersFor(plan, measured);
  const MicroBatchShape shape = plan.micro_batch_shape();
  const double message_bytes =
      static_cast<double>(shape.batch_size * shape.seq_len * plan.dims.width *
                          static_cast<int64_t>(SizeOf(shape.act_dtype)));
  const double message =
      measured.message_latency_s +
      (measured.message_bytes_per_s > 0 ? message_bytes / measured.message_bytes_per_s : 0.0);
  Costs costs;
  for (size_t j = 0; j < plan.virtual_stages.size(); ++j) {
    ActionCosts c{0, 0, 0, 0, plan.num_stages() > 1 ? message : 0.0};
    for (int i = plan.virtual_stages[j].first; i <= plan.virtual_stages[j].last; ++i) {
      const LayerTimes t = UnderPolicy(TimesOf(layers, plan.graph[static_cast<size_t>(i)].kind),
                                       plan.config.parallel.checkpoint);
      c.forward += t.forward;
      c.backward += t.backward;
      c.backward_input += t.backward_input;
      c.backward_weight += t.backward_weight;
    }
    costs.per_virtual_stage[static_cast<int>(j)] = c;
  }
  return costs;
}

StepPrediction PredictMeasuredStep(const Plan& plan, const MeasuredCosts& measured) {
  const SimulationResult sim = Simulate(plan.schedule, MeasuredScheduleCosts(plan, measured));
  const DType dtype = plan.config.precision.dtype;
  const auto update = measured.update.find({dtype, plan.config.optimizer.state});
  BATON_CHECK(update != measured.update.end(), "no measured step end for {} with {} state",
              Name(dtype), Name(plan.config.optimizer.state));
  const int replicas = plan.num_replicas();
  StepPrediction p;
  p.makespan = sim.makespan;
  p.bubble = sim.bubble_fraction;
  double largest_stage_params = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    double seconds = 0, params = 0;
    for (const LayerRange& range : plan.ChunkRanges(s)) {
      for (int i = range.first; i <= range.last; ++i) {
        const LayerKind kind = plan.graph[static_cast<size_t>(i)].kind;
        const auto it = update->second.find(kind);
        BATON_CHECK(it != update->second.end(), "no measured step end for {}", Name(kind));
        seconds += it->second;
        params += static_cast<double>(measured.params.at(kind));
      }
    }
    // ZeRO-1 steps 1/R of the state; without it every replica steps all of it.
    if (plan.config.parallel.zero == 1) seconds /= replicas;
    p.step_end = std::max(p.step_end, seconds);
    largest_stage_params = std::max(largest_stage_params, params);
  }
  // The step end's flags all-reduce over every rank; a tied parameter split across stages (the
  // embedding's wte) is summed between them; replicas reduce every gradient (f32) and, with
  // ZeRO-1, gather the parameters back: each a ring of 2(n-1) transfers of 1/n of the bytes.
  const int world = plan.world_size();
  const double latency = measured.message_latency_s;
  const double rate = measured.message_bytes_per_s > 0 ? measured.message_bytes_per_s : 1e300;
  if (world > 1) p.collectives += 2.0 * (world - 1) * latency;
  for (const TiedGroup& group : plan.tied) {
    if (group.stages.size() < 2) continue;
    const double bytes = static_cast<double>(plan.dims.vocab_size) * plan.dims.width * 4.0;
    p.collectives += 2.0 * latency + bytes / rate;
  }
  if (replicas > 1) {
    const double bytes = largest_stage_params * 4.0;
    const double ring = 2.0 * (replicas - 1);
    p.collectives += ring * latency + ring / replicas * bytes / rate;
    if (plan.config.parallel.zero == 1) p.collectives += ring * latency + bytes / rate;
  }
  p.seconds = p.makespan + p.step_end + p.collectives;
  return p;
}

std::string FormatMeasuredCosts(const MeasuredCosts& measured) {
  std::string out = fmt::format("{:>5} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>11}\n", "dtype",
                                "mbs", "layer", "F ms", "B ms", "I ms", "W ms", "sel. B ms");
  for (const auto& [key, kinds] : measured.layers) {
    for (const auto& [kind, t] : kinds) {
      out += fmt::format("{:>5} {:>5} {:>10} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>11.3f}\n",
                         Name(key.first), key.second, Name(kind), 1e3 * t.plain.forward,
                         1e3 * t.plain.backward, 1e3 * t.plain.backward_input,
                         1e3 * t.plain.backward_weight, 1e3 * t.selective.backward);
    }
  }
  for (const auto& [key, kinds] : measured.update) {
    for (const auto& [kind, seconds] : kinds) {
      const int64_t params = measured.params.count(kind) ? measured.params.at(kind) : 0;
      out += fmt::format("step end {} {} state, {}: {:.3f} ms ({:.2f} ns per parameter)\n",
                         Name(key.first), Name(key.second), Name(kind), 1e3 * seconds,
                         params > 0 ? 1e9 * seconds / static_cast<double>(params) : 0.0);
    }
  }
  out += fmt::format("message: {:.1f} us latency, {:.2f} GB/s (Gloo, loopback)\n",
                     1e6 * measured.message_latency_s, measured.message_bytes_per_s / 1e9);
  return out;
}

}  // namespace baton
