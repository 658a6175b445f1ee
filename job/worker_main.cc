#include "job/worker_main.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "comm/gloo_communicator.h"
#include "comm/host_staged_communicator.h"
#include "comm/shared_memory.h"
#if BATON_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif
#include "checkpoint/checkpoint.h"
#include "checkpoint/init_source.h"
#include "checkpoint/safetensors_gpt2.h"
#include "checkpoint/safetensors_llama.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_kv_store.h"
#include "core/cpu_affinity.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/stop_signals.h"
#include "core/units.h"
#include "job/checkpoint_saver.h"
#include "job/fault_hooks.h"
#include "kernels/backend_factory.h"
#include "plan/codec.h"
#include "worker/flight_recorder.h"
#include "worker/stage_tensors.h"
#include "worker/trainer.h"

namespace baton {
namespace {

std::string EnvOr(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env != nullptr ? std::string(env) : std::string();
}

std::string HostName() {
  char buffer[256] = {};
  gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

// Steps whose timeline goes into the trace: the last few (steady state, not warm-up).
constexpr int64_t kTracedSteps = 8;

// `baton eval`'s loss on a head rank: NaN or Inf is an error, not a figure to print (it printed
// "eval loss -nan", or "loss": null, and exited 0).
void CheckEvalLossFinite(const EvalRecord& eval, const Plan& plan, const Launch& launch) {
  const std::string& weights =
      launch.resume_dir.empty() ? plan.config.model.init_from : launch.resume_dir;
  BATON_CHECK(std::isfinite(eval.loss),
              "the eval loss is not finite ({}) with the weights {}: most likely the forward pass "
              "overflowed. Loading refuses NaN and Inf, so some weights are finite but large "
              "enough to overflow {} arithmetic: a diverged run, or a damaged or edited file (e.g. "
              "a norm weight near 1e38)",
              eval.loss, weights.empty() ? "of a fresh initialisation" : "of " + weights,
              Name(plan.config.precision.dtype));
}

// Resumes from the launch's checkpoint, or starts from model.init_from; returns the first step.
int64_t LoadInitialState(const Plan& plan, const Launch& launch, Trainer& trainer,
                         Backend& backend) {
  const Config& config = plan.config;
  if (!launch.resume_dir.empty()) {
    const CheckpointReader checkpoint = CheckpointReader::Open(launch.resume_dir);
    checkpoint.CheckCompatible(plan.dims, plan.graph);
    // Whole tensors read into the stage's, or (split state) layer by layer into temporaries of
    // which each rank keeps its part; an evaluation keeps no optimizer state and reads the
    // weights only (a weights-only checkpoint of baton compress too).
    trainer.state().Load(
        [&](const std::vector<LayerTensors>& layers) { checkpoint.LoadLayers(layers, backend); });
    trainer.set_loss_scaler_state(checkpoint.state().loss_scaler);
    spdlog::info("resumed from {} (step {})", checkpoint.step_dir(), checkpoint.step());
    return checkpoint.step() + 1;
  }
  // The launcher resolved model.init_from (CheckNamedFiles): this is the same resolution.
  const InitSource source =
      ResolveInitSource(config.model.init_from, "the job's config", LlamaLike(config.model.preset));
  switch (source.kind) {
    case InitSource::Kind::kNone:
      break;
    case InitSource::Kind::kHfLlamaFolder: {
      // The launcher took the dims from its config.json: this rank reads only the shards
      // holding its own layers.
      HfLlamaFolder folder = HfLlamaFolder::Open(source.path);
      ValidateHfLlamaFolder(folder, plan.dims);
      trainer.state().InitValues([&](const std::vector<LayerTensors>& layers) {
        LoadLlamaParamsFromHf(folder, plan.dims, ParamsOf(layers), backend);
      });
      spdlog::info("initialised from the Hugging Face Llama {} (read {})", source.path,
                   fmt::join(folder.opened_files(), ", "));
      break;
    }
    case InitSource::Kind::kCheckpoint: {
      // A Baton checkpoint (e.g. baton compress --low-rank's): its weights, with fresh moments.
      const CheckpointReader checkpoint = CheckpointReader::Open(source.path);
      checkpoint.CheckCompatible(plan.dims, plan.graph);
      trainer.state().InitValues(
          [&](const std::vector<LayerTensors>& layers) { checkpoint.LoadLayers(layers, backend); });
      spdlog::info("initialised from the weights of {} (step {})", checkpoint.step_dir(),
                   checkpoint.step());
      break;
    }
    case InitSource::Kind::kGpt2File: {
      BATON_CHECK(plan.dims.low_rank_attn == 0 && plan.dims.low_rank_mlp == 0,
                  "model.init_from {}: a GPT-2 file holds dense matrices, and this model is "
                  "low-rank ({}); factor a Baton checkpoint with baton compress --low-rank R and "
                  "start from that directory",
                  source.path, ToString(plan.dims));
      const SafetensorsFile weights = ReadSafetensors(source.path);
      ValidateGpt2File(weights, plan.dims);
      trainer.state().InitValues([&](const std::vector<LayerTensors>& layers) {
        LoadParamsFromSafetensors(weights, ParamsOf(layers), backend);
      });
      spdlog::info("initialised from {}", source.path);
      break;
    }
  }
  return 1;
}

// Who a world rank is in reports: its stage, and its replica and tensor rank when the job has
// several.
void SetPlace(const ParallelLayout& layout, int rank, WorkerReport& report) {
  const Coordinates at = layout.At(rank);
  report.stage = at.stage;
  report.replica = layout.replicas() > 1 ? at.replica : -1;
  report.tensor = layout.tensor() > 1 ? at.tensor : -1;
}

// `checkpoint_s`: what the step end spent saving (negative: it saved nothing).
WorkerReport StepReport(const Plan& plan, int rank, const StepRecord& record, bool holds_head,
                        const MemoryLedger& ledger, double checkpoint_s) {
  WorkerReport report;
  SetPlace(plan.layout(), rank, report);
  report.step = record.step;
  if (holds_head) report.loss = record.loss;
  report.metrics = {{"lr", record.lr},
                    {"grad_norm", record.grad_norm},
                    {"tokens_per_s", record.tokens_per_s},
                    {"loss_scale", record.loss_scale},
                    {"skipped", record.skipped ? 1.0 : 0.0}};
  if (record.eval && holds_head) report.metrics["eval_loss"] = record.eval->loss;
  report.timings_s = {
      {"step", record.step_s}, {"compute", record.compute_s}, {"wait", record.wait_s}};
  if (plan.num_replicas() > 1) report.timings_s["allreduce"] = record.allreduce_s;
  if (plan.num_tensor() > 1) {
    report.metrics["tensor_bytes"] = static_cast<double>(record.tensor_bytes);
    report.timings_s["tensor"] = record.tensor_s;
  }
  if (plan.layout().experts() > 1) {
    report.metrics["alltoall_bytes"] = static_cast<double>(record.alltoall_bytes);
    report.timings_s["alltoall"] = record.alltoall_s;
  }
  if (record.eval) report.timings_s["eval"] = record.eval->seconds;
  // Experts: sums over this rank's micro-batches, which the launcher sums over the replicas
  // (launcher/step_metrics.h, ExpertsJson).
  for (const auto& [layer, stats] : record.experts) {
    const std::string key = "experts/" + layer + "/";
    report.metrics[key + "tokens"] = static_cast<double>(stats.tokens);
    report.metrics[key + "dropped"] = static_cast<double>(stats.dropped);
    report.metrics[key + "microbatches"] = static_cast<double>(stats.microbatches);
    report.metrics[key + "aux_loss"] = stats.aux_loss;
    report.metrics[key + "z_loss"] = stats.z_loss;
    for (size_t e = 0; e < stats.load.size(); ++e) {
      report.metrics[fmt::format("{}load/{}", key, e)] = static_cast<double>(stats.load[e]);
    }
  }
  if (checkpoint_s >= 0) report.timings_s["checkpoint"] = checkpoint_s;
  for (const auto& [key, bytes] : MemoryEntries(ledger.Peak())) report.memory_peak[key] = bytes;
  return report;
}

// Gloo over TCP for CPU stages; NCCL for GPU stages, set up for the links and groups this
// rank's step uses (its pipeline neighbours, the stages holding a tied parameter's copies, and
// its stage's replicas). Ranks are world ranks (plan/parallel_layout.h).
std::shared_ptr<Communicator> MakeCommunicator(const WorkerArgs& args, const Plan& plan,
                                               const Launch& launch, Device device, KvStore& store,
                                               Backend& backend, Allocator& host_allocator) {
  const int p = plan.world_size();
  GlooOptions gloo;
  gloo.rank = args.rank;
  gloo.size = p;
  gloo.hostname = args.listen_host;
  gloo.store_prefix = fmt::format("gloo/{}", launch.attempt);
  gloo.timeout = plan.timeouts.startup;
  gloo.secret = EnvOr(args.token, "BATON_TOKEN");
  gloo.shared_memory = SharedMemoryEnabled();
  gloo.shared_memory_peers = plan.LinkedRanks(args.rank);
  if (device.is_cpu()) return std::make_shared<GlooCommunicator>(store, backend.allocator(), gloo);
  // NCCL refuses two ranks on one GPU: stages sharing GPUs (more stages than GPUs here) talk
  // through the host instead.
  if (p > CudaDevicesVisible()) {
    spdlog::warn("{} ranks share {} GPU(s): their traffic goes through host memory (Gloo)", p,
                 CudaDevicesVisible());
    return std::make_shared<HostStagedCommunicator>(
        std::make_shared<GlooCommunicator>(store, host_allocator, gloo), backend, host_allocator);
  }
#if BATON_WITH_NCCL
  NcclOptions nccl;
  nccl.rank = args.rank;
  nccl.size = p;
  nccl.device = device.index;
  nccl.compute_stream = static_cast<cudaStream_t>(NativeStream(backend));
  nccl.peers = plan.Peers(args.rank);
  nccl.groups = plan.CollectiveGroups(args.rank);
  nccl.store_prefix = fmt::format("nccl/{}", launch.attempt);
  nccl.timeout = plan.timeouts.startup;
  return std::make_shared<NcclCommunicator>(store, backend.allocator(), nccl);
#else
  BATON_FAIL("device {} needs NCCL, and this binary was built without CUDA", device.ToString());
#endif
}

// Tracks what the engine waits on, for heartbeats and the failure report.
struct BlockedState {
  std::optional<BlockedAction> action;
  Clock::time_point since;
};

// device.pin_threads (core/cpu_affinity.h): the CPUs this rank computes on and those the process
// may run on; none when it does not pin.
struct ComputeCpus {
  std::vector<int> compute;
  std::vector<int> allowed;
};
std::optional<ComputeCpus> PinnedComputeCpus(const Config& config, const Device& device,
                                             int local_rank) {
  if (!config.device.pin_threads || !device.is_cpu()) return std::nullopt;
  const std::vector<int> allowed = AllowedCpus();
  const std::optional<std::vector<int>> cpus =
      PinnedCpus(allowed, local_rank, config.device.threads);
  if (!cpus) {
    spdlog::warn(
        "device.pin_threads: local rank {} with {} thread(s) finds no block of CPUs of its own "
        "among the {} this process may run on; it runs unpinned",
        local_rank, config.device.threads, allowed.size());
    return std::nullopt;
  }
  spdlog::info("device.pin_threads: local rank {} computes on CPU(s) {}", local_rank,
               fmt::join(*cpus, ","));
  return ComputeCpus{*cpus, allowed};
}

// Everything a rank does once it holds the plan; throws on failure.
void TrainRank(const WorkerArgs& args, CoordinatorClient& client, const Plan& plan,
               const Launch& launch, BlockedState& blocked) {
  const Config& config = plan.config;
  BATON_CHECK(0 <= args.rank && args.rank < plan.world_size(),
              "rank {} of a plan of {} stage(s) x {} replica(s)", args.rank, plan.num_stages(),
              plan.num_replicas());
  MemoryLedger ledger;
  const Device device = DeviceForLocalRank(config.device.type, args.local_rank);
  // Pinned before the backend starts its pool, which inherits it; the transport's threads are
  // started unpinned (below).
  const std::optional<ComputeCpus> pinned = PinnedComputeCpus(config, device, args.local_rank);
  if (pinned) PinThisThread(pinned->compute);
  std::unique_ptr<Backend> backend = MakeBackend(device, ledger, config.device.threads);
  CpuAllocator host_allocator(ledger);  // host staging for device tensors (booked as comm)

  CoordinatorKvStore coordinator_store(client);
  const FaultHooks& faults = GetFaultHooks();
  std::unique_ptr<KvStore> gated =
      faults.mesh_store
          ? faults.mesh_store(coordinator_store, fmt::format("gloo/{}", launch.attempt), args.rank)
          : nullptr;
  KvStore& store = gated ? *gated : coordinator_store;
  std::shared_ptr<Communicator> comm;  // shared with the abort callback, which may outlive us
  if (plan.world_size() > 1) {
    if (pinned) PinThisThread(pinned->allowed);
    comm = MakeCommunicator(args, plan, launch, device, store, *backend, host_allocator);
    if (pinned) PinThisThread(pinned->compute);
    client.OnAbort([comm](const std::string& reason) { comm->Abort(reason); });
  }
  // The tensors of pending operations (a receive whose wait timed out) belong to `backend` and
  // `host_allocator`, which go when this function returns, while the abort callback keeps
  // `comm` alive: close it first, so that no later abort frees a tensor into a dead allocator.
  struct CloseOnReturn {
    Communicator* comm;
    ~CloseOnReturn() {
      if (comm != nullptr) comm->Close("the worker is leaving");
    }
  } close_on_return{comm.get()};

  // The flight recorder (worker/flight_recorder.h): the launcher reads it after a failure; declared
  // before the trainer, whose status callback writes to it.
  std::unique_ptr<FlightRecorder> recorder;
  try {
    recorder = std::make_unique<FlightRecorder>(FlightRecorderPath(config.output.dir, args.rank),
                                                args.rank);
  } catch (const Error& e) {
    spdlog::warn("no flight recorder for this rank: {}", e.what());
  }
  TrainerSetup setup = TrainerSetupFor(plan, args.rank, comm.get());
  setup.inference_only = launch.evaluate_only;
  Trainer trainer(std::move(setup), *backend);
  trainer.set_lr_segments(launch.lr_segments);
  // A stop signal (core/stop_signals.h: SIGTERM from Slurm preemption or the launcher, SIGINT
  // from Ctrl-C) is reduced across ranks at the next step end, so every rank finishes the same
  // step, writes the checkpoint and exits cleanly.
  trainer.set_stop_flag(&StopFlag());
  trainer.set_status_callback([&client, &blocked, &recorder](const EngineStatus& status) {
    if (recorder) {
      recorder->Record(status.action, status.microbatch, status.peer_rank, status.bytes);
    }
    if (status.peer_rank >= 0) {
      client.SetBlocked(status.action, status.microbatch, status.peer_rank);
      blocked.action = BlockedAction{status.action, status.microbatch, status.peer_rank, 0.0};
      blocked.since = status.since;
    } else {
      client.ClearBlocked();
      blocked.action.reset();
    }
  });
  const int64_t first_step = LoadInitialState(plan, launch, trainer, *backend);
  // Background checkpoints copy the state to the host: on a CPU, the backend's own memory.
  CheckpointSaver saver(plan, launch, args.rank, client,
                        device.is_cpu() ? backend->allocator() : host_allocator);
  client.Barrier(fmt::format("ready-{}", launch.attempt), plan.timeouts.startup);

  RankResult result;
  result.rank = args.rank;
  // `baton eval`: the loaded weights, once over the held-out data; nothing trained or saved.
  const int64_t last_step = launch.evaluate_only ? first_step - 1 : config.train.steps;
  if (launch.evaluate_only) {
    result.eval = trainer.Evaluate();
    if (trainer.holds_head()) CheckEvalLossFinite(*result.eval, plan, launch);
  }
  for (int64_t step = first_step; step <= last_step; ++step) {
    BATON_CHECK(!client.aborted(), "the job was aborted: {}", client.abort_reason());
    if (recorder) recorder->StartStep(step);
    if (faults.at_step_start) faults.at_step_start(args.rank, step);
    const StepRecord record = trainer.Step(step);
    result.compute_s += record.compute_s;
    result.wall_s += record.step_s;
    if (step > config.train.steps - kTracedSteps) result.trace.push_back({step, record.trace});
    // Every run ends with its last step saved (output.final_checkpoint), a stop too, so that
    // `latest` always names where the run got to; checkpoint_every adds intermediate ones. The
    // step's report carries the time that took (and the ledger's peak with it).
    double checkpoint_s = -1;
    saver.Check();
    if (record.stop || CheckpointAfterStep(config, step)) {
      const auto start = Clock::now();
      saver.Save(trainer, *backend, step);
      checkpoint_s = Seconds(Clock::now() - start);
    }
    client.Report(StepReport(plan, args.rank, record, trainer.holds_head(), ledger, checkpoint_s));
    if (record.stop) {
      spdlog::warn("stopping after step {} as asked (signal); checkpoint written", step);
      break;
    }
  }

  saver.Finish();  // a background write of the last checkpoint
  result.digests = trainer.LayerDigests();
  result.memory_peak = ledger.Peak();
  result.holds_head = trainer.holds_head();
  client.KvSet(ResultKey(args.rank), EncodeRankResult(result));
  client.Barrier(fmt::format("done-{}", launch.attempt), plan.timeouts.wait);
}

}  // namespace

std::string ResultKey(int rank) { return fmt::format("result/rank{}", rank); }

int RunWorker(const WorkerArgs& args) {
  // "rank R" until the plan says which stage (and replica) this rank is.
  SetupLogging(fmt::format("rank {}", args.rank), args.log_level);
  SetErrorContext(fmt::format("rank {}", args.rank));
  const std::string token = EnvOr(args.token, "BATON_TOKEN");
  const std::string job_id = EnvOr(args.job_id, "BATON_JOB_ID");
  std::unique_ptr<CoordinatorClient> client;
  BlockedState blocked;
  WorkerReport place;       // the rank's place in every report: its stage, replica and tensor rank
  place.stage = args.rank;  // until the plan says otherwise
  try {
    // Hundreds of workers starting at once on few cores take a while to reach the coordinator.
    CoordinatorClientOptions client_options;
    client_options.connect_timeout =
        std::max(client_options.connect_timeout, StartupPerProcess(args.world_size));
    client = std::make_unique<CoordinatorClient>(args.coordinator, token, client_options);
    JoinInfo info;
    info.rank = args.rank;
    info.world_size = args.world_size;
    info.host = HostName();
    info.pid = getpid();
    info.device = fmt::format("local rank {}", args.local_rank);  // the plan picks cpu/cuda
    info.job_id = job_id;
    info.attempt = args.attempt;
    Launch launch;
    const Plan plan = DecodeJobPlan(client->Join(info), &launch);
    BATON_CHECK(launch.attempt == args.attempt,
                "started for attempt {}, this worker got the plan of attempt {}", args.attempt,
                launch.attempt);
    {  // the stage, and the replica and tensor rank when there are several, from here on
      SetPlace(plan.layout(), args.rank, place);
      SetupLogging(plan.layout().Place(args.rank), args.log_level);
      SetErrorContext(plan.layout().Place(args.rank));
    }
    client->Watch();
    client->StartHeartbeat(plan.timeouts.heartbeat_interval);
    TrainRank(args, *client, plan, launch, blocked);
    WorkerReport done = place;
    done.status = WorkerStatus::kDone;
    client->Report(done);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    LogOrigin(e);
    if (client) {
      WorkerReport failed = place;
      failed.status = WorkerStatus::kFailed;
      failed.error = ValidUtf8(e.what());  // a std::exception may hold any bytes
      failed.blocked = blocked.action;
      if (blocked.action) {
        failed.blocked->waiting_s = Seconds(Clock::now() - blocked.since);
      }
      try {
        client->Report(failed);
      } catch (const std::exception& report_error) {
        spdlog::error("could not report the failure: {}", report_error.what());
      }
    }
    return 1;
  }
}

}  // namespace baton
