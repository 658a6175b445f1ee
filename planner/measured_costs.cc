// Measured costs (see measured_costs.h): layer kinds timed on the CPU backend, messages timed
// between two Gloo ranks over loopback, and the step time they predict through the simulator.
#include "planner/measured_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/kv_store.h"
#include "comm/shared_memory.h"
#include "core/error.h"
#include "core/random.h"
#include "core/units.h"
#include "kernels/backend.h"
#include "model/collectives.h"
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

// Seconds `fn` takes. A worker starts each compute action right after waking from a wait (for a
// message, a collective); the scheduler favours a thread that has just woken over busy ones, so
// on a loaded machine an action gets more of a core than a loop that never sleeps would. Each
// timed call starts after a short sleep for the same reason.
double TimeIt(Backend& backend, const std::function<void()>& fn) {
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  const Clock::time_point start = Clock::now();
  fn();
  backend.Synchronize();
  return Seconds(Clock::now() - start);
}

// One layer on one micro-batch, timed repeatedly: F, B, then F again, I and W.
struct LayerCase {
  Backend* backend = nullptr;
  Layer* layer = nullptr;
  bool selective = false;
  MicroBatch batch;
  Tensor x, dy;
  std::vector<double> f, b, i, w;

  void TimeOnce(bool keep) {
    const BackwardArgs args;
    layer->set_selective_recompute(selective);
    Stash stash;
    Tensor y;
    const double forward = TimeIt(*backend, [&] { y = layer->Forward(x, batch, stash); });
    y = Tensor();
    const double backward = TimeIt(*backend, [&] { layer->Backward(dy, batch, stash, args); });
    Stash split;
    y = layer->Forward(x, batch, split);
    y = Tensor();
    const double input = TimeIt(*backend, [&] { layer->BackwardInput(dy, batch, split, args); });
    const double weight = TimeIt(*backend, [&] { layer->BackwardWeight(split); });
    layer->set_selective_recompute(false);
    if (!keep) return;  // warm-up: first-touch pages, GEMM primitives created
    f.push_back(forward);
    b.push_back(backward);
    i.push_back(input);
    w.push_back(weight);
  }
  LayerTimes Medians() const { return {Median(f), Median(b), Median(i), Median(w)}; }
};

// One layer's step-end share, timed repeatedly: its gradients' sum of squares, one AdamW step,
// zeroing them.
struct UpdateCase {
  Backend* backend = nullptr;
  Layer* layer = nullptr;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<double> times;
  int64_t steps = 0;

  void TimeOnce(bool keep) {
    const double seconds = TimeIt(*backend, [&] {
      double sum = 0;
      for (Param* p : layer->params()) sum += backend->SumOfSquares(p->grad);
      optimizer->Step(1e-4f, ++steps, static_cast<float>(1.0 / (1.0 + sum)));
      for (Param* p : layer->params()) backend->Zero(p->grad);
    });
    if (keep) times.push_back(seconds);
  }
};

AdamWConfig HyperOf(const TrainConfig& t) {
  AdamWConfig hyper;
  hyper.lr = static_cast<float>(t.lr);
  hyper.beta1 = static_cast<float>(t.beta1);
  hyper.beta2 = static_cast<float>(t.beta2);
  hyper.eps = static_cast<float>(t.eps);
  hyper.weight_decay = static_cast<float>(t.weight_decay);
  return hyper;
}

// A layer's case at micro-batch size `b`: random tokens, targets, input and output gradient.
LayerCase MakeCase(Backend& backend, Layer& layer, LayerKind kind, const Config& config,
                   DType dtype, int64_t b, Rng& rng) {
  const int64_t seq_len = SequenceLength(config);
  LayerCase c;
  c.backend = &backend;
  c.layer = &layer;
  c.batch.tokens = RandomTokens(backend, {b, seq_len}, config.model.vocab_size, rng);
  c.batch.targets = RandomTokens(backend, {b, seq_len}, config.model.vocab_size, rng);
  if (config.data.packing) {  // one document per row: the layers read the starts
    c.batch.segment_starts =
        Tensor::Zeros(backend.allocator(), {b, seq_len}, DType::kI32, MemCategory::kActivations);
  }
  const Shape act = {b, seq_len, config.model.width};
  if (kind != LayerKind::kEmbedding) c.x = RandomTensor(backend, act, dtype, rng);
  if (kind != LayerKind::kHead) c.dy = RandomTensor(backend, act, dtype, rng);
  return c;
}

// Every layer kind x micro-batch size (x selective, when the layer recomputes) and every update,
// timed round-robin, one repetition of each per round, so that a change in the machine's load
// while profiling affects every figure alike.
void ProfileLayers(const Config& config, const ProfileRequest& request, MeasuredCosts& out) {
  const ModelDims dims = DimsOf(config.model);
  const std::map<LayerKind, LayerSpec> kinds = KindsOf(GraphOf(config.model));
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, config.device.threads);
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<LayerCase> cases;
  std::vector<std::tuple<DType, LayerKind, int64_t>> case_keys;
  std::vector<UpdateCase> updates;
  std::vector<std::tuple<DType, LayerKind, OptimizerState>> update_keys;
  for (DType dtype : request.dtypes) {
    for (const auto& [kind, spec] : kinds) {
      layers.push_back(BuildLayer(spec, dims, *backend, dtype, dtype, config.train.seed));
      Layer& layer = *layers.back();
      layer.set_flash_attention(config.model.attention == AttentionKind::kFlash);
      int64_t params = 0;
      for (Param* p : layer.params()) {
        backend->Zero(p->grad);
        params += p->value.numel();
      }
      out.params[kind] = params;
      layer.set_selective_recompute(true);
      const bool recomputes = layer.selective_recompute();
      layer.set_selective_recompute(false);
      Rng rng = Rng::ForStream(config.train.seed, {static_cast<uint64_t>(kind)});
      for (int64_t b : request.micro_batch_sizes) {
        LayerCase c = MakeCase(*backend, layer, kind, config, dtype, b, rng);
        for (bool selective : {false, true}) {
          if (selective && !recomputes) break;
          c.selective = selective;
          cases.push_back(c);
          case_keys.emplace_back(dtype, kind, b);
        }
      }
      for (OptimizerState state : request.states) {
        UpdateCase u;
        u.backend = backend.get();
        u.layer = &layer;
        u.optimizer = std::make_unique<Optimizer>(*backend, layer.params(), HyperOf(config.train),
                                                  state == OptimizerState::kInt8);
        updates.push_back(std::move(u));
        update_keys.emplace_back(dtype, kind, state);
      }
    }
  }
  for (int r = 0; r <= request.repeats; ++r) {
    for (LayerCase& c : cases) c.TimeOnce(r > 0);
    for (UpdateCase& u : updates) u.TimeOnce(r > 0);
  }
  for (size_t n = 0; n < cases.size(); ++n) {
    const auto& [dtype, kind, b] = case_keys[n];
    if (kind == LayerKind::kBlock && b == MicroBatchSize(config) && !cases[n].selective &&
        dtype == request.dtypes.front()) {
      std::vector<double> rounds;
      for (size_t r = 0; r < cases[n].f.size(); ++r)
        rounds.push_back(cases[n].f[r] + cases[n].b[r]);
      const auto [low, high] = std::minmax_element(rounds.begin(), rounds.end());
      out.spread = (*high - *low) / Median(rounds);
    }
    KindTimes& times = out.layers[{dtype, b}][kind];
    times.selective = cases[n].Medians();
    if (!cases[n].selective) times.plain = times.selective;
  }
  for (size_t n = 0; n < updates.size(); ++n) {
    const auto& [dtype, kind, state] = update_keys[n];
    out.update[{dtype, state}][kind] = Median(updates[n].times);
  }
}

// F + B of one block (the graph's second layer; its first when it has one or two) on a backend
// of its own at micro-batch size `b`, the median of `repeats` after a warm-up. `ready` is called
// once everything is built, before the timing starts.
double TimeBlockStep(const Config& config, int64_t b, int repeats,
                     const std::function<void()>& ready) {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, config.device.threads);
  const std::vector<LayerSpec> graph = GraphOf(config.model);
  const LayerSpec& spec = graph.size() > 2 ? graph[1] : graph[0];
  const DType dtype = config.precision.dtype;
  std::unique_ptr<Layer> layer =
      BuildLayer(spec, DimsOf(config.model), *backend, dtype, dtype, config.train.seed);
  layer->set_flash_attention(config.model.attention == AttentionKind::kFlash);
  for (Param* p : layer->params()) backend->Zero(p->grad);
  Rng rng = Rng::ForStream(config.train.seed, {99});
  LayerCase c = MakeCase(*backend, *layer, spec.kind, config, dtype, b, rng);
  ready();
  for (int r = 0; r <= repeats; ++r) c.TimeOnce(r > 0);
  const LayerTimes t = c.Medians();
  return t.forward + t.backward;
}

// How much slower a block's F + B runs when `p` copies run at once (one per thread, as p
// processes of a job would): shared cores, caches, memory bandwidth and whatever else this
// machine is running. In three rounds, one copy alone then p together (each the median of a few
// repetitions); the median of the rounds' ratios.
void ProfileContention(const Config& config, const ProfileRequest& request, MeasuredCosts& out) {
  const int64_t b = MicroBatchSize(config);
  const int repeats = std::max(2, request.repeats / 2);
  out.slowdown[1] = 1.0;
  for (int p : request.concurrency) {
    if (p <= 1) continue;
    std::vector<double> ratios;
    for (int round = 0; round < 3; ++round) {
      const double alone = TimeBlockStep(config, b, repeats, [] {});
      std::vector<double> together(static_cast<size_t>(p));
      std::vector<std::string> errors(static_cast<size_t>(p));
      std::barrier start(p);
      std::vector<std::thread> threads;
      for (size_t i = 0; i < together.size(); ++i) {
        threads.emplace_back([&, i] {
          bool arrived = false;
          try {
            together[i] = TimeBlockStep(config, b, repeats, [&] {
              arrived = true;
              start.arrive_and_wait();
            });
          } catch (const std::exception& e) {
            errors[i] = e.what();
            if (!arrived) start.arrive_and_drop();
          }
        });
      }
      for (std::thread& t : threads) t.join();
      for (const std::string& e : errors) {
        BATON_CHECK(e.empty(), "timing {} blocks at once: {}", p, e);
      }
      ratios.push_back(Median(together) / alone);
    }
    out.slowdown[p] = std::max(1.0, Median(ratios));
  }
}

// The slowdown for `processes` busy at once: measured, else that of the most measured below it.
double SlowdownFor(const MeasuredCosts& measured, int processes) {
  const auto measured_below = [&](int count) {
    double factor = 1.0;
    for (const auto& [p, s] : measured.slowdown) {
      if (p <= count) factor = s;
    }
    return factor;
  };
  const double factor = measured_below(processes);
  if (measured.cores <= 0 || processes <= measured.cores) return factor;
  // Oversubscribed: the processes take turns on the cores, so each computes at most
  // cores / processes of the time that `cores` processes at once had.
  const double shared = measured_below(measured.cores) * processes / measured.cores;
  return std::max(factor, shared);
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
      options.shared_memory = SharedMemoryEnabled();  // the transport the workers will use
      comms[1] = std::make_unique<GlooCommunicator>(store, allocator, options);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  GlooOptions options;
  options.rank = 0;
  options.size = 2;
  options.store_prefix = "tune";
  options.shared_memory = SharedMemoryEnabled();
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
  // Under load the small message's time can be as long as the large one's: their difference is
  // then noise, and the rate is bounded by the large message's whole time instead.
  out.message_rate_bounded = seconds < 2 * out.message_latency_s;
  out.message_bytes_per_s = static_cast<double>(bytes) /
                            (out.message_rate_bounded ? seconds : seconds - out.message_latency_s);
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
  ProfileContention(config, request, out);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  out.cores = std::max(1, threads / std::max(1, config.device.threads));
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
  const auto message_of = [&](double bytes) {
    return measured.message_latency_s +
           (measured.message_bytes_per_s > 0 ? bytes / measured.message_bytes_per_s : 0.0);
  };
  const double message = message_of(message_bytes);
  // With T tensor ranks each computes a T-th of every layer and issues the collectives its
  // layers declare (model/collectives.h): a sum (or a reduce-scatter, which is one) over T ranks
  // is a message in and one out at the group's first rank; an all-gather sends each other rank
  // this rank's part and receives theirs, one message per batch row along the sequence (the
  // loss's row statistics: one). (The step end's few
  // norm-gradient sums under sequence parallelism are left out: C values each.)
  const TensorLayout layout{plan.num_tensor(), plan.config.parallel.sequence_parallel};
  const double tensor = plan.num_tensor();
  const double rows = static_cast<double>(shape.batch_size);
  const auto collectives_s = [&](const std::vector<TensorCollective>& collectives) {
    double seconds = 0;
    for (const TensorCollective& c : collectives) {
      const double bytes = static_cast<double>(c.bytes());
      switch (c.kind) {
        case TensorCollective::Kind::kGatherSequence:
          seconds += 2 * (tensor - 1) * rows * message_of(bytes / (tensor * rows));
          break;
        case TensorCollective::Kind::kRowStats:
          seconds += 2 * (tensor - 1) * message_of(bytes / tensor);
          break;
        case TensorCollective::Kind::kSum:
        case TensorCollective::Kind::kScatterSequenceSum:
        case TensorCollective::Kind::kGradientSum:
          seconds += 2 * message_of(bytes);
          break;
      }
    }
    return seconds;
  };
  const bool recompute = plan.config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kEvery;
  const double slowdown = SlowdownFor(measured, plan.world_size()) / plan.num_tensor();
  Costs costs;
  for (size_t j = 0; j < plan.virtual_stages.size(); ++j) {
    ActionCosts c{0, 0, 0, 0, plan.num_stages() > 1 ? message : 0.0};
    for (int i = plan.virtual_stages[j].first; i <= plan.virtual_stages[j].last; ++i) {
      const LayerSpec& spec = plan.graph[static_cast<size_t>(i)];
      const LayerTimes t = UnderPolicy(TimesOf(layers, spec.kind), plan.config.parallel.checkpoint);
      const LayerCollectives sums = CollectivesOf(spec, plan.dims, shape, layout);
      const double forward_sums = collectives_s(sums.forward);
      const double backward_sums = collectives_s(sums.backward) + (recompute ? forward_sums : 0);
      c.forward += slowdown * t.forward + forward_sums;
      c.backward += slowdown * t.backward + backward_sums;
      c.backward_input += slowdown * t.backward_input + backward_sums;
      c.backward_weight += slowdown * t.backward_weight;
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
  const int world = plan.world_size();
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
    // ZeRO-1/2 steps 1/R of the state; without it every replica steps all of it.
    if (plan.config.parallel.zero >= 1) seconds /= replicas;
    // Tensor ranks step their parts (the replicated norms and biases are small).
    seconds *= SlowdownFor(measured, world) / plan.num_tensor();
    p.step_end = std::max(p.step_end, seconds);
    largest_stage_params = std::max(largest_stage_params, params);
  }
  // The step end's flags all-reduce over every rank; a tied parameter split across stages (the
  // embedding's wte) is summed between them; replicas reduce every gradient (f32) and, with
  // ZeRO-1/2, gather the parameters back: each a ring of 2(n-1) transfers of 1/n of the bytes.
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
    if (plan.config.parallel.zero >= 1) p.collectives += ring * latency + bytes / rate;
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
  out += fmt::format("message: {:.1f} us latency, {}{:.2f} GB/s (Gloo, loopback){}\n",
                     1e6 * measured.message_latency_s, measured.message_rate_bounded ? ">= " : "",
                     measured.message_bytes_per_s / 1e9,
                     measured.message_rate_bounded
                         ? ": an activation-sized message took under twice a small one's time, "
                           "so the rate is only bounded (the machine was busy)"
                         : "");
  if (measured.spread > 0) {
    out += fmt::format(
        "spread of a block's F + B over the rounds: {:.0f}%{}\n", 100 * measured.spread,
        measured.spread > kUnsteadySpread ? " (the machine's load changed while profiling: "
                                            "the figures deserve a second run)"
                                          : "");
  }
  if (measured.cores > 0) {
    out += fmt::format(
        "{} process(es) compute at once here; more take turns (slower by the "
        "count over {})\n",
        measured.cores, measured.cores);
  }
  for (const auto& [processes, factor] : measured.slowdown) {
    if (processes > 1)
      out += fmt::format("{} processes at once: each {:.2f}x slower\n", processes, factor);
  }
  return out;
}

}  // namespace baton
