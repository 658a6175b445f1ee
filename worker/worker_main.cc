#include "worker/worker_main.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "comm/gloo_communicator.h"
#include "core/error.h"
#include "core/log.h"
#include "model/from_config.h"
#include "proto/coordinator_client.h"
#include "scheduler/schedule.h"
#include "worker/plan_codec.h"
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

nlohmann::json StepJson(const StepRecord& r, bool has_loss, const MemoryFigures& peak) {
  nlohmann::json j = {{"step", r.step},
                      {"grad_norm", r.grad_norm},
                      {"lr", r.lr},
                      {"loss_scale", r.loss_scale},
                      {"skipped", r.skipped},
                      {"step_s", r.step_s},
                      {"compute_s", r.compute_s},
                      {"wait_s", r.wait_s},
                      {"tokens_per_s", r.tokens_per_s},
                      {"memory_peak", MemoryMap(peak)}};
  if (has_loss) j["loss"] = r.loss;
  return j;
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

// Everything a rank does once it holds the plan; throws on failure. `blocked` keeps what the
// engine last waited on, for the failure report.
void TrainRank(const WorkerArgs& args, CoordinatorClient& client, const WorkerPlan& plan,
               std::optional<BlockedAction>& blocked,
               std::chrono::steady_clock::time_point& blocked_since) {
  const Config config = ParseConfigString(plan.config_yaml, "job plan");
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, config.device.threads);
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.parallel.timeout_s * 1000.0));

  CoordinatorKvStore store(client);
  std::shared_ptr<Communicator> comm;  // shared with the abort callback, which may outlive us
  if (plan.num_ranks > 1) {
    GlooOptions gloo;
    gloo.rank = args.rank;
    gloo.size = plan.num_ranks;
    gloo.hostname = args.listen_host;
    gloo.timeout = timeout;
    comm = std::make_shared<GlooCommunicator>(store, backend->allocator(), gloo);
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
  trainer.set_status_callback([&client, &blocked, &blocked_since](const EngineStatus& status) {
    if (status.peer >= 0) {
      client.SetBlocked(status.action, status.microbatch, status.peer);
      blocked = BlockedAction{status.action, status.microbatch, status.peer, 0.0};
      blocked_since = status.since;
    } else {
      client.ClearBlocked();
      blocked.reset();
    }
  });
  client.Barrier("ready", timeout);

  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json traces = nlohmann::json::array();
  double compute_s = 0, wall_s = 0;
  for (int64_t step = 1; step <= config.train.steps; ++step) {
    BATON_CHECK(!client.aborted(), "the job was aborted: {}", client.abort_reason());
    MaybeStall(args.rank, step);  // keep step 1's peaks: measure from setup on
    const StepRecord record = trainer.Step(step);
    compute_s += record.compute_s;
    wall_s += record.step_s;
    steps.push_back(StepJson(record, trainer.holds_head(), ledger.Peak()));
    if (step > config.train.steps - kTracedSteps) traces.push_back(TraceJson(record));

    WorkerReport report;
    report.stage = args.rank;
    report.step = step;
    if (trainer.holds_head()) report.loss = record.loss;
    report.metrics = {{"lr", record.lr},
                      {"grad_norm", record.grad_norm},
                      {"tokens_per_s", record.tokens_per_s},
                      {"loss_scale", record.loss_scale},
                      {"skipped", record.skipped ? 1.0 : 0.0}};
    report.timings_s = {{"step", record.step_s}, {"compute", record.compute_s}};
    report.memory_peak = MemoryMap(ledger.Peak());
    client.Report(report);
  }

  nlohmann::json digests = nlohmann::json::array();
  for (auto& [index, digest] : trainer.LayerDigests()) digests.push_back({index, digest});
  nlohmann::json result = {
      {"rank", args.rank},      {"layers", nlohmann::json::array()},
      {"digests", digests},     {"memory_peak", MemoryMap(ledger.Peak())},
      {"compute_s", compute_s}, {"wall_s", wall_s},
      {"steps", steps},         {"holds_head", trainer.holds_head()},
      {"trace", traces},
  };
  for (const LayerRange& r : plan.chunk_ranges.at(static_cast<size_t>(args.rank))) {
    result["layers"].push_back({r.first, r.last});
  }
  client.KvSet(ResultKey(args.rank), result.dump());
  client.Barrier("done", timeout);
}

}  // namespace

std::string ResultKey(int rank) { return fmt::format("result/rank{}", rank); }

int RunWorker(const WorkerArgs& args) {
  SetupLogging(fmt::format("stage {}", args.rank), args.log_level);
  SetErrorContext(fmt::format("stage {}", args.rank));
  const std::string token = EnvOr(args.token, "BATON_TOKEN");
  const std::string job_id = EnvOr(args.job_id, "BATON_JOB_ID");
  std::unique_ptr<CoordinatorClient> client;
  std::optional<BlockedAction> blocked;
  std::chrono::steady_clock::time_point blocked_since;
  try {
    client = std::make_unique<CoordinatorClient>(args.coordinator, token);
    JoinInfo info;
    info.rank = args.rank;
    info.world_size = args.world_size;
    info.host = HostName();
    info.pid = getpid();
    info.device = "cpu";
    info.job_id = job_id;
    const WorkerPlan plan = DecodePlan(client->Join(info));
    client->Watch();
    client->StartHeartbeat(std::chrono::milliseconds(500));
    TrainRank(args, *client, plan, blocked, blocked_since);
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
      failed.blocked = blocked;
      if (blocked) {
        failed.blocked->waiting_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - blocked_since).count();
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
