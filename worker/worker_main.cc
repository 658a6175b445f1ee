#include "worker/worker_main.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "comm/gloo_communicator.h"
#if BATON_WITH_NCCL
#include "comm/nccl_communicator.h"
#endif
#include "core/error.h"
#include "core/log.h"
#include "kernels/backend_factory.h"
#include "model/from_config.h"
#include "proto/coordinator_client.h"
#include "scheduler/schedule.h"
#include "worker/checkpoint.h"
#include "worker/host_staged_communicator.h"
#include "worker/plan_codec.h"
#include "worker/safetensors_gpt2.h"
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

std::map<std::string, int64_t> MemoryMap(const MemoryFigures& figures) {
  std::map<std::string, int64_t> out;
  for (MemCategory c : kAllMemCategories) out[std::string(Name(c))] = figures[c];
  out["total"] = figures.total;
  return out;
}

// The spans of one step as [name, micro-batch, start_us, end_us] rows.
nlohmann::json TraceJson(const StepRecord& r) {
  nlohmann::json spans = nlohmann::json::array();
  for (const TraceSpan& s : r.trace) spans.push_back({s.name, s.microbatch, s.start_us, s.end_us});
  return {{"step", r.step}, {"spans", spans}};
}

// Steps whose timeline goes into the trace: the last few (steady state, not warm-up).
constexpr int64_t kTracedSteps = 8;

// Fault injection for tests of hang diagnosis: BATON_TEST_STALL=RANK:STEP makes that rank stop
// answering its peers (it sleeps, heartbeats still running) at the start of that step.
void MaybeStall(int rank, int64_t step) {
  const char* spec = std::getenv("BATON_TEST_STALL");
  if (spec == nullptr) return;
  int stall_rank = -1;
  long long stall_step = -1;
  if (std::sscanf(spec, "%d:%lld", &stall_rank, &stall_step) != 2) return;
  if (stall_rank != rank || stall_step != step) return;
  spdlog::warn("BATON_TEST_STALL: stage {} stalls at step {}", rank, step);
  std::this_thread::sleep_for(std::chrono::hours(1));
}

// A signal (SIGTERM from Slurm preemption or the launcher, SIGINT from Ctrl-C) asks this rank to
// stop: the request is reduced across ranks at the next step end, so every rank finishes the
// same step, writes the checkpoint and exits cleanly.
std::atomic<bool> g_stop_requested{false};
extern "C" void RequestStop(int) { g_stop_requested.store(true); }
}  // namespace

void InstallStopHandlers() {
  std::signal(SIGTERM, RequestStop);
  std::signal(SIGINT, RequestStop);
}
bool StopRequested() { return g_stop_requested.load(); }

namespace {

std::chrono::milliseconds TimeoutOf(const Config& config) {
  return std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000.0));
}

// Start-up waits (the transport's rendezvous, the ready barrier) also cover peers that are still
// starting: process start, joining, building and loading their stage, which a loaded machine or a
// slow job scheduler stretches. They wait at least this long, whatever parallel.timeout_s says
// (docs/protocol.md, "Timeouts").
constexpr std::chrono::milliseconds kStartupTimeoutFloor{60000};
std::chrono::milliseconds StartupTimeoutOf(const Config& config) {
  return std::max(TimeoutOf(config), kStartupTimeoutFloor);
}

// Writes this rank's layers of step `step`; rank 0 gathers every rank's file list through the
// store and writes the manifest last; the barrier tells every rank the checkpoint is complete.
void SaveCheckpoint(const Config& config, const WorkerPlan& plan, int rank,
                    CoordinatorClient& client, Trainer& trainer, Backend& backend, int64_t step) {
  // Writing a large model may take longer than a pipeline wait: allow ten times as long.
  const auto timeout = 10 * TimeoutOf(config);
  CheckpointWriter writer(CheckpointsRoot(config.output.dir));
  const auto key = [&](int r) { return fmt::format("ckpt/{}/{}/{}", plan.attempt, step, r); };
  client.KvSet(key(rank), EncodeFileEntries(writer.WriteLayers(step, trainer.model(),
                                                               trainer.optimizer(), backend)));
  if (rank == 0) {
    std::vector<CheckpointFileEntry> all;
    for (int r = 0; r < plan.num_ranks; ++r) {
      std::vector<CheckpointFileEntry> entries = DecodeFileEntries(client.KvGet(key(r), timeout));
      all.insert(all.end(), entries.begin(), entries.end());
    }
    TrainingState state;
    state.step = step;
    state.seed = config.train.seed;
    state.loss_scaler = trainer.loss_scaler().state();
    state.config = ToJson(config);
    writer.WriteManifest(step, all, state, DimsOf(config.model), GraphOf(config.model));
    spdlog::info("checkpoint of step {} written to {}", step, writer.step_dir(step));
  }
  client.Barrier(fmt::format("checkpoint-{}-{}", plan.attempt, step), timeout);
}

// Resumes from the plan's checkpoint, or starts from model.init_from; returns the first step.
int64_t LoadInitialState(const Config& config, const WorkerPlan& plan, Trainer& trainer,
                         Backend& backend) {
  if (!plan.resume_dir.empty()) {
    const CheckpointReader checkpoint = CheckpointReader::Open(plan.resume_dir);
    checkpoint.CheckCompatible(DimsOf(config.model), GraphOf(config.model));
    checkpoint.LoadLayers(trainer.model(), trainer.optimizer(), backend);
    trainer.set_loss_scaler_state(checkpoint.state().loss_scaler);
    spdlog::info("resumed from {} (step {})", checkpoint.step_dir(), checkpoint.step());
    return checkpoint.step() + 1;
  }
  if (!config.model.init_from.empty()) {
    const SafetensorsFile weights = ReadSafetensors(config.model.init_from);
    ValidateGpt2File(weights, DimsOf(config.model));
    InitFromSafetensors(weights, trainer.model().params(), trainer.optimizer(), backend);
    spdlog::info("initialised from {}", config.model.init_from);
  }
  return 1;
}

WorkerReport StepReport(int rank, const StepRecord& record, bool holds_head,
                        const MemoryLedger& ledger) {
  WorkerReport report;
  report.stage = rank;
  report.step = record.step;
  if (holds_head) report.loss = record.loss;
  report.metrics = {{"lr", record.lr},
                    {"grad_norm", record.grad_norm},
                    {"tokens_per_s", record.tokens_per_s},
                    {"loss_scale", record.loss_scale},
                    {"skipped", record.skipped ? 1.0 : 0.0}};
  report.timings_s = {
      {"step", record.step_s}, {"compute", record.compute_s}, {"wait", record.wait_s}};
  report.memory_peak = MemoryMap(ledger.Peak());
  return report;
}

// Gloo over TCP for CPU stages; NCCL for GPU stages, set up for the links and groups this
// rank's step uses (its pipeline neighbours, and first + last stage for the tied embedding).
std::shared_ptr<Communicator> MakeCommunicator(const WorkerArgs& args, const WorkerPlan& plan,
                                               Device device, KvStore& store, Backend& backend,
                                               std::chrono::milliseconds timeout,
                                               Allocator& host_allocator) {
  GlooOptions gloo;
  gloo.rank = args.rank;
  gloo.size = plan.num_ranks;
  gloo.hostname = args.listen_host;
  gloo.store_prefix = fmt::format("gloo/{}", plan.attempt);
  gloo.timeout = timeout;
  if (device.is_cpu()) return std::make_shared<GlooCommunicator>(store, backend.allocator(), gloo);
  // NCCL refuses two ranks on one GPU: stages sharing GPUs (more stages than GPUs here) talk
  // through the host instead.
  if (plan.num_ranks > CudaDevicesVisible()) {
    spdlog::warn("{} stages share {} GPU(s): stage traffic goes through host memory (Gloo)",
                 plan.num_ranks, CudaDevicesVisible());
    return std::make_shared<HostStagedCommunicator>(
        std::make_shared<GlooCommunicator>(store, host_allocator, gloo), backend, host_allocator);
  }
#if BATON_WITH_NCCL
  NcclOptions nccl;
  nccl.rank = args.rank;
  nccl.size = plan.num_ranks;
  nccl.device = device.index;
  nccl.compute_stream = static_cast<cudaStream_t>(NativeStream(backend));
  const int p = plan.num_ranks;
  for (int peer : {(args.rank + p - 1) % p, (args.rank + 1) % p}) {
    if (peer != args.rank &&
        std::find(nccl.peers.begin(), nccl.peers.end(), peer) == nccl.peers.end()) {
      nccl.peers.push_back(peer);
    }
  }
  if (args.rank == 0 || args.rank == p - 1) nccl.groups.push_back({0, p - 1});
  nccl.store_prefix = fmt::format("nccl/{}", plan.attempt);
  nccl.timeout = timeout;
  return std::make_shared<NcclCommunicator>(store, backend.allocator(), nccl);
#else
  BATON_FAIL("device {} needs NCCL, and this binary was built without CUDA", device.ToString());
#endif
}

// Tracks what the engine waits on, for heartbeats and the failure report.
struct BlockedState {
  std::optional<BlockedAction> action;
  std::chrono::steady_clock::time_point since;
};

// Everything a rank does once it holds the plan; throws on failure.
void TrainRank(const WorkerArgs& args, CoordinatorClient& client, const WorkerPlan& plan,
               BlockedState& blocked) {
  const Config config = ParseConfigString(plan.config_yaml, "job plan");
  MemoryLedger ledger;
  const Device device = DeviceForLocalRank(config.device.type, args.local_rank);
  std::unique_ptr<Backend> backend = MakeBackend(device, ledger, config.device.threads);
  CpuAllocator host_allocator(ledger);  // host staging for device tensors (booked as comm)
  const auto timeout = TimeoutOf(config);
  const auto startup_timeout = StartupTimeoutOf(config);

  CoordinatorKvStore store(client);
  std::shared_ptr<Communicator> comm;  // shared with the abort callback, which may outlive us
  if (plan.num_ranks > 1) {
    comm = MakeCommunicator(args, plan, device, store, *backend, startup_timeout, host_allocator);
    client.OnAbort([comm](const std::string& reason) { comm->Abort(reason); });
  }

  TrainerSetup setup;
  setup.config = config;
  setup.dims = DimsOf(config.model);
  setup.graph = GraphOf(config.model);
  setup.rank = args.rank;
  setup.num_ranks = plan.num_ranks;
  setup.chunk_ranges = plan.chunk_ranges.at(static_cast<size_t>(args.rank));
  setup.schedule = ScheduleFromCsv(plan.schedule_csv);
  setup.comm = comm.get();
  Trainer trainer(std::move(setup), *backend);
  trainer.set_stop_flag(&g_stop_requested);
  trainer.set_status_callback([&client, &blocked](const EngineStatus& status) {
    if (status.peer >= 0) {
      client.SetBlocked(status.action, status.microbatch, status.peer);
      blocked.action = BlockedAction{status.action, status.microbatch, status.peer, 0.0};
      blocked.since = status.since;
    } else {
      client.ClearBlocked();
      blocked.action.reset();
    }
  });
  const int64_t first_step = LoadInitialState(config, plan, trainer, *backend);
  client.Barrier(fmt::format("ready-{}", plan.attempt), startup_timeout);

  nlohmann::json traces = nlohmann::json::array();
  double compute_s = 0, wall_s = 0;
  const int64_t every = config.output.checkpoint_every;
  for (int64_t step = first_step; step <= config.train.steps; ++step) {
    BATON_CHECK(!client.aborted(), "the job was aborted: {}", client.abort_reason());
    MaybeStall(args.rank, step);
    const StepRecord record = trainer.Step(step);
    compute_s += record.compute_s;
    wall_s += record.step_s;
    if (step > config.train.steps - kTracedSteps) traces.push_back(TraceJson(record));
    client.Report(StepReport(args.rank, record, trainer.holds_head(), ledger));
    if (record.stop || (every > 0 && (step % every == 0 || step == config.train.steps))) {
      SaveCheckpoint(config, plan, args.rank, client, trainer, *backend, step);
    }
    if (record.stop) {
      spdlog::warn("stopping after step {} as asked (signal); checkpoint written", step);
      break;
    }
  }

  nlohmann::json digests = nlohmann::json::array();
  for (auto& [index, digest] : trainer.LayerDigests()) digests.push_back({index, digest});
  nlohmann::json result = {
      {"rank", args.rank},
      {"layers", nlohmann::json::array()},
      {"digests", digests},
      {"memory_peak", MemoryMap(ledger.Peak())},
      {"compute_s", compute_s},
      {"wall_s", wall_s},
      {"holds_head", trainer.holds_head()},
      {"trace", traces},
  };
  for (const LayerRange& r : plan.chunk_ranges.at(static_cast<size_t>(args.rank))) {
    result["layers"].push_back({r.first, r.last});
  }
  client.KvSet(ResultKey(args.rank), result.dump());
  client.Barrier(fmt::format("done-{}", plan.attempt), timeout);
}

}  // namespace

std::string ResultKey(int rank) { return fmt::format("result/rank{}", rank); }

int RunWorker(const WorkerArgs& args) {
  SetupLogging(fmt::format("stage {}", args.rank), args.log_level);
  SetErrorContext(fmt::format("stage {}", args.rank));
  const std::string token = EnvOr(args.token, "BATON_TOKEN");
  const std::string job_id = EnvOr(args.job_id, "BATON_JOB_ID");
  std::unique_ptr<CoordinatorClient> client;
  BlockedState blocked;
  InstallStopHandlers();
  try {
    client = std::make_unique<CoordinatorClient>(args.coordinator, token);
    JoinInfo info;
    info.rank = args.rank;
    info.world_size = args.world_size;
    info.host = HostName();
    info.pid = getpid();
    info.device = fmt::format("local rank {}", args.local_rank);  // the plan picks cpu/cuda
    info.job_id = job_id;
    const WorkerPlan plan = DecodePlan(client->Join(info));
    client->Watch();
    client->StartHeartbeat(std::chrono::milliseconds(500));
    TrainRank(args, *client, plan, blocked);
    WorkerReport done;
    done.stage = args.rank;
    done.status = WorkerStatus::kDone;
    client->Report(done);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    if (client) {
      WorkerReport failed;
      failed.stage = args.rank;
      failed.status = WorkerStatus::kFailed;
      failed.error = e.what();
      failed.blocked = blocked.action;
      if (blocked.action) {
        failed.blocked->waiting_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - blocked.since).count();
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
