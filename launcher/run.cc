#include "launcher/run.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/init_source.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_gpt2.h"
#include "checkpoint/safetensors_llama.h"
#include "config/config.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/lr_segment.h"
#include "core/units.h"
#include "job/agent.h"
#include "job/process.h"
#include "job/worker_main.h"
#include "kernels/backend_factory.h"
#include "launcher/environment.h"
#include "launcher/hf_model.h"
#include "launcher/monitor.h"
#include "launcher/mpi_bootstrap.h"
#include "launcher/output_dir.h"
#include "launcher/outputs.h"
#include "launcher/plan_command.h"
#include "launcher/report.h"
#include "launcher/run_page.h"
#include "launcher/step_metrics.h"
#include "model/cost.h"
#include "model/from_config.h"
#include "plan/codec.h"
#include "planner/fit.h"
#include "planner/memory_planner.h"
#include "planner/planner.h"
#include "worker/flight_recorder.h"
#include "worker/trainer.h"

namespace baton {
namespace {

using nlohmann::json;

// Every worker sets its result before it reports done, so they are there already once the
// monitor saw the job done; parallel.timeout_s bounds the wait anyway.
std::vector<RankResult> CollectResults(const Plan& plan, const std::string& address,
                                       const std::string& token) {
  CoordinatorClient client(address, token);
  std::vector<RankResult> results;
  for (int r = 0; r < plan.world_size(); ++r) {
    results.push_back(DecodeRankResult(client.KvGet(ResultKey(r), plan.timeouts.wait)));
    BATON_CHECK(results.back().rank == r, "the result under rank {}'s key is rank {}'s", r,
                results.back().rank);
  }
  return results;
}

// What `baton eval` evaluates, for its output: the resume checkpoint, or model.init_from.
std::string WeightsOf(const Plan& plan, const std::string& resume_dir) {
  return resume_dir.empty() ? plan.config.model.init_from : resume_dir;
}

// What a run is about to do, before any worker starts: the resolved config, the model's size, the
// partition and each stage's predicted memory. Returns that prediction (by world rank; none for
// INT8 inference weights): the run's report compares it with what the ranks measured.
std::vector<RankMemory> LogStartup(const Plan& plan, const std::string& config_path) {
  spdlog::info("config {} as resolved (defaults and --set applied):\n{}", config_path,
               ToYaml(plan.config));
  spdlog::info("model: {} parameters, {} layers ({})", ParamCount(plan.graph, plan.dims),
               plan.graph.size(), ToString(plan.dims));
  // The memory plan is a training step's; an INT8 model only evaluates.
  const bool trains = plan.config.model.weights == WeightFormat::kDense;
  std::string layout;
  if (plan.num_tensor() > 1) layout += fmt::format(" x {} tensor ranks", plan.num_tensor());
  if (plan.num_replicas() > 1)
    layout += fmt::format(" x {} data-parallel replicas", plan.num_replicas());
  if (!layout.empty()) layout += fmt::format(" = {} processes", plan.world_size());
  const std::vector<RankMemory> predicted =
      trains ? PredictMemory(plan) : std::vector<RankMemory>();
  spdlog::info("plan: {} stage(s){}, schedule {}, {} micro-batches{}\n{}\n{}", plan.num_stages(),
               layout, plan.schedule.name, plan.schedule.microbatches,
               plan.num_replicas() > 1 ? " per replica" : "", FormatPartitionTable(plan),
               trains ? FormatMemoryTable(plan, predicted)
                      : std::string("memory: not predicted for INT8 inference weights"));
  return predicted;
}

// `predicted`: each rank's memory as the run's start predicted it (LogStartup).
int Finish(const Plan& plan, const std::vector<RankMemory>& predicted, const std::string& address,
           const std::string& token, const std::string& report_path, const RunSteps& run_steps,
           const RunOptions& options, const std::string& resume_dir) {
  const std::vector<RankResult> results = CollectResults(plan, address, token);
  if (options.evaluate_only && options.eval_into != nullptr) {
    *options.eval_into = HeadEval(results);
    return 0;
  }
  if (options.evaluate_only) {
    PrintEval(plan, WeightsOf(plan, resume_dir), results, options.eval_json,
              options.eval_out != nullptr ? *options.eval_out : std::cout);
    return 0;
  }
  const json report = BuildReport(plan, predicted, results, run_steps);
  if (!report_path.empty()) WriteReport(report, report_path);
  const std::string& dir = plan.config.output.dir;
  // Its own copy, from which `baton report DIR` redraws the whole page later.
  WriteReport(report, (std::filesystem::path(dir) / kRunReportName).string());
  WriteRunOutputs(dir, plan, results);
  WriteRunPage(ReadRunPageInputs(dir, ""));
  Summarise(report, report_path);
  return 0;
}

MonitorOptions MonitorOptionsFor(const Plan& plan, int attempt) {
  MonitorOptions m;
  m.layout = plan.layout();
  // Replica 0's head at tensor rank 0: every replica's head (every tensor rank) has the loss.
  m.head_rank = m.layout.WorldRank({.stage = plan.head_stage()});
  m.total_steps = plan.config.train.steps;
  m.log_every = plan.config.train.log_every;
  m.attempt = attempt;
  return m;
}

// Runs one attempt's monitor and adds its steps to `run_steps`.
std::optional<std::string> MonitorAttempt(CoordinatorServer& server, ChildProcesses* children,
                                          const Plan& plan, int attempt, MetricsLog& metrics,
                                          RunSteps& run_steps) {
  JobMonitor monitor(server, children, MonitorOptionsFor(plan, attempt), &metrics);
  std::optional<std::string> failure = monitor.Run();
  for (const json& step : monitor.report_steps()) run_steps.steps.push_back(step);
  run_steps.in_final_attempt = monitor.report_steps().size();
  return failure;
}

// The step directory to resume from: `dir` as given (a step dir, a checkpoints root or an
// output dir), checked against the plan's model before any worker starts.
std::string ResolveResume(const Plan& plan, const std::string& dir) {
  const CheckpointReader checkpoint = CheckpointReader::Open(dir);
  checkpoint.CheckCompatible(plan.dims, plan.graph);
  return checkpoint.step_dir();
}

// --resume as given: "" (a fresh start), "auto" (output.dir's latest checkpoint if it has one,
// else a fresh start) or a checkpoint; returns the step directory, or "" for a fresh start.
std::string ResumePoint(const Plan& plan, const std::string& resume) {
  if (resume.empty()) return "";
  if (resume != "auto") return ResolveResume(plan, resume);
  const std::string root = CheckpointsRoot(plan.config.output.dir);
  if (!std::filesystem::exists(std::filesystem::path(root) / "latest")) {
    spdlog::info("--resume auto: no checkpoint in {}; starting fresh", root);
    return "";
  }
  return ResolveResume(plan, root);
}

// After a failure: the newest complete checkpoint of this run, else where the run started.
std::string RestartPoint(const Plan& plan, const std::string& previous) {
  try {
    return ResolveResume(plan, CheckpointsRoot(plan.config.output.dir));
  } catch (const Error&) {
    return previous;
  }
}

void SpawnWorkers(ChildProcesses& children, const Plan& plan, const RunOptions& options,
                  const std::string& address, const std::string& token, const std::string& job_id,
                  int attempt) {
  for (int r = 0; r < plan.world_size(); ++r) {
    WorkerArgs worker;
    worker.coordinator = address;
    worker.token = token;
    worker.job_id = job_id;
    worker.rank = r;
    worker.world_size = plan.world_size();
    worker.local_rank = r;
    worker.attempt = attempt;
    worker.log_level = options.log_level;
    SpawnWorker(children, worker);
  }
}

// `baton eval` needs held-out data and weights to evaluate; checked before any worker starts.
void CheckEvaluable(const Plan& plan, const RunOptions& options, const std::string& resume_dir) {
  if (!options.evaluate_only) return;
  if (plan.eval_batches == 0) {
    BATON_FAIL("baton eval needs held-out data: set data.eval_path or data.eval_fraction");
  }
  if (resume_dir.empty() && plan.config.model.init_from.empty()) {
    BATON_FAIL(
        "baton eval needs weights: --resume DIR (or auto, with a checkpoint in {}) or --set "
        "model.init_from=FILE",
        plan.config.output.dir);
  }
}

// `baton run` resumed at or past train.steps would train nothing and exit 0 (it used to, silently):
// an error that says how to go on. Checked before any worker starts.
void CheckStepsLeft(const Plan& plan, const RunOptions& options, const std::string& resume_dir) {
  if (options.evaluate_only || resume_dir.empty()) return;
  const int64_t step = CheckpointReader::Open(resume_dir).step();
  const int64_t steps = plan.config.train.steps;
  BATON_CHECK(step < steps,
              "{} is step {}, and train.steps is {}: nothing left to train. To train N more "
              "steps with the learning rate going on from where it is, add --steps-more N "
              "(docs/checkpoints.md); or evaluate, generate or export this checkpoint",
              resume_dir, step, steps);
}

// The learning-rate extensions a launch trains under, resolved once before any worker starts
// (restarts keep them): a resumed run keeps those its checkpoint recorded, and --steps-more N
// adds one from the checkpoint's step to N steps later. train.steps becomes the last one's end.
Plan ExtendSchedule(Plan plan, const RunOptions& options, Launch& launch) {
  if (options.evaluate_only) return plan;
  if (launch.resume_dir.empty()) {
    BATON_CHECK(options.steps_more == 0,
                "--steps-more extends a resumed run, and there is no checkpoint to resume: add "
                "--resume DIR (or auto, with a checkpoint in {}), or set train.steps",
                plan.config.output.dir);
    return plan;
  }
  const CheckpointReader checkpoint = CheckpointReader::Open(launch.resume_dir);
  launch.lr_segments = checkpoint.state().lr_segments;
  int64_t& steps = plan.config.train.steps;
  if (!launch.lr_segments.empty() && launch.lr_segments.back().to != steps) {
    spdlog::info(
        "{} is of a run extended by --steps-more: it trains to step {} (train.steps {} "
        "is ignored)",
        launch.resume_dir, launch.lr_segments.back().to, steps);
  }
  if (options.steps_more > 0) {
    const int64_t from = checkpoint.step();
    BATON_CHECK(options.steps_more <= kMaxTrainSteps - from,
                "--steps-more {}: from step {} that ends past step {}, the most a run trains",
                options.steps_more, from, kMaxTrainSteps);
    if (launch.lr_segments.empty()) launch.lr_segments.push_back({0, steps});
    while (launch.lr_segments.size() > 1 && launch.lr_segments.back().from >= from) {
      launch.lr_segments.pop_back();  // an extension made later than this checkpoint
    }
    launch.lr_segments.push_back({from, from + options.steps_more});
    spdlog::info(
        "--steps-more {}: from step {} to {}, the learning rate decaying from its step-{} "
        "value to train.min_lr",
        options.steps_more, from, from + options.steps_more, from);
  }
  if (!launch.lr_segments.empty()) steps = launch.lr_segments.back().to;
  return plan;
}

// The job's coordinator, serving `plan` as `launch` starts it, on `address` ("host:0": any port).
void StartCoordinator(CoordinatorServer& server, const Plan& plan, const Launch& launch,
                      const std::string& address, const std::string& token) {
  CoordinatorOptions coordinator;
  coordinator.address = address;
  coordinator.token = token;
  coordinator.job_id = launch.job_id;
  coordinator.world_size = plan.world_size();
  coordinator.plan = EncodeJobPlan(plan, launch);
  coordinator.heartbeat_timeout_s = plan.config.parallel.heartbeat_timeout_s;
  coordinator.startup_silence_s = Seconds(plan.timeouts.startup);
  coordinator.keep_step_reports = true;
  server.Start(coordinator);
}

// The restart policy, once the failed attempt's workers are gone and a restart remains
// (--max-restarts): the next attempt resumes from the newest checkpoint of this run (or the one
// it resumed from, or the start), and the coordinator serves the plan again under its number.
void ResetForRestart(CoordinatorServer& server, const Plan& plan, const RunOptions& options,
                     Launch& launch) {
  ++launch.attempt;
  launch.resume_dir = RestartPoint(plan, launch.resume_dir);
  spdlog::warn("restarting every worker (restart {} of {}) from {}", launch.attempt,
               options.max_restarts, launch.resume_dir.empty() ? "the start" : launch.resume_dir);
  server.ResetJob(EncodeJobPlan(plan, launch));
}

// What every launch does before its coordinator starts: where it resumes from, the learning-rate
// schedule it extends, the checks that it can run at all, and (a fresh run) that output.dir holds
// no other run, or --overwrite's removal of it.
Plan PrepareLaunch(const Plan& planned, const RunOptions& options, Launch& launch) {
  BATON_CHECK(!options.overwrite || options.resume.empty(),
              "--overwrite starts a run afresh in output.dir, --resume continues one: give one "
              "of them");
  launch.resume_dir = ResumePoint(planned, options.resume);
  Plan plan = ExtendSchedule(planned, options, launch);
  CheckEvaluable(plan, options, launch.resume_dir);
  CheckStepsLeft(plan, options, launch.resume_dir);
  if (!options.evaluate_only && options.resume.empty()) {
    ClaimOutputDir(plan.config.output.dir, options.overwrite);
  }
  return plan;
}

// A resumed run and every restart append to the metrics of what came before (an evaluation
// writes none).
std::unique_ptr<MetricsLog> OpenMetrics(const Plan& plan, const RunOptions& options,
                                        const Launch& launch) {
  return std::make_unique<MetricsLog>(
      plan.config.output.dir,
      /*append=*/!launch.resume_dir.empty() || options.evaluate_only,
      plan.config.output.tensorboard && !options.evaluate_only);
}

// How a launch mode runs one attempt's workers.
struct Supervision {
  std::function<void(int attempt)> start;  // starts its workers (local); agents start their own
  ChildProcesses* children = nullptr;      // the local workers, watched by the monitor; or null
  // After the attempt failed and the workers were told to abort: stops them, adding to `failure`
  // what went wrong on the way; false when the job cannot restart whatever --max-restarts says.
  std::function<bool(std::string& failure)> stop;
};

// Runs attempts until one succeeds (nullopt) or the last allowed one failed (its failure, logged):
// the restart policy of every launch mode.
std::optional<std::string> SuperviseAttempts(CoordinatorServer& server, const Plan& plan,
                                             const RunOptions& options, Launch& launch,
                                             MetricsLog& metrics, RunSteps& run_steps,
                                             const Supervision& supervision) {
  const std::filesystem::path recorders =
      std::filesystem::path(FlightRecorderPath(plan.config.output.dir, 0)).parent_path();
  for (int attempt = 0;; ++attempt) {
    std::error_code ignored;  // an earlier run's or attempt's records are not this attempt's
    std::filesystem::remove_all(recorders, ignored);
    if (supervision.start) supervision.start(attempt);
    std::optional<std::string> failure =
        MonitorAttempt(server, supervision.children, plan, attempt, metrics, run_steps);
    if (!failure) return std::nullopt;
    server.RequestAbort(*failure);
    const bool can_restart = supervision.stop(*failure);
    spdlog::error("{}", *failure);
    CollectFlightRecords(plan, attempt);
    if (!can_restart || attempt >= options.max_restarts) return failure;
    ResetForRestart(server, plan, options, launch);
  }
}

// A local job's workers all run on this machine: a missing GPU is one error here, before the
// coordinator or any worker starts, not one per worker blaming whichever stage failed first.
void CheckLocalDevice(const Config& config) {
  if (config.device.type != DeviceType::kCuda) return;
  try {
    DeviceForLocalRank(DeviceType::kCuda, 0);
  } catch (const Error& e) {
    BATON_FAIL(
        "device.type is cuda, and this machine cannot run it: {}. Set device.type=cpu to train "
        "on the CPU (docs/cuda.md)",
        e.what());
  }
}

int RunLocal(const Plan& planned, const RunOptions& options, const std::string& report_path) {
  CheckLocalDevice(planned.config);
  const std::string token = MakeJobToken();
  const std::string job_id = MakeJobToken().substr(0, 12);
  Launch launch{job_id, "", 0, options.evaluate_only, {}};
  const Plan plan = PrepareLaunch(planned, options, launch);
  const std::vector<RankMemory> predicted = LogStartup(plan, options.config.path);
  std::unique_ptr<MetricsLog> metrics = OpenMetrics(plan, options, launch);
  CoordinatorServer server;
  StartCoordinator(server, plan, launch, "127.0.0.1:0", token);
  spdlog::info("coordinator on {}", server.address());

  RunSteps run_steps;
  ChildProcesses children;
  Supervision local;
  local.start = [&](int attempt) {
    SpawnWorkers(children, plan, options, server.address(), token, job_id, attempt);
  };
  local.children = &children;
  local.stop = [&](std::string&) {
    children.StopAll();
    return true;
  };
  if (SuperviseAttempts(server, plan, options, launch, *metrics, run_steps, local)) return 1;
  return Finish(plan, predicted, server.address(), token, report_path, run_steps, options,
                launch.resume_dir);
}

// Rank 0 under mpirun / srun: the local launcher's attempts with the ranks' agents (job/agent.h)
// in place of child processes. After a failure every agent stops its worker and reports its
// exit; once all have, the job restarts from the newest checkpoint while restarts remain, else
// ends. The agents learn what comes next from the coordinator (ResetJob, EndJob).
int SuperviseJob(CoordinatorServer& server, const std::string& connect_address, const Plan& plan,
                 const std::vector<RankMemory>& predicted, const RunOptions& options, Launch launch,
                 MetricsLog& metrics, const std::string& token, const std::string& report_path) {
  RunSteps run_steps;
  Supervision agents;
  agents.stop = [&](std::string& failure) {
    // No worker of this attempt may still run when the next one starts (ResetJob).
    const std::vector<int> missing = server.WaitForWorkerExits(plan.timeouts.startup);
    if (!missing.empty() && !server.ended()) {
      failure += fmt::format(
          "\nthe agents of rank(s) {} did not report their worker's exit within {:.0f} s",
          fmt::join(missing, ", "), Seconds(plan.timeouts.startup));
    }
    return missing.empty() && !server.ended();
  };
  if (const std::optional<std::string> failure =
          SuperviseAttempts(server, plan, options, launch, metrics, run_steps, agents)) {
    server.EndJob(/*succeeded=*/false, *failure);
    return 1;
  }
  // The address the workers dial: the coordinator binds only that one (another node's, not
  // loopback, in a multi-node job).
  const int code = Finish(plan, predicted, connect_address, token, report_path, run_steps, options,
                          launch.resume_dir);
  server.EndJob(/*succeeded=*/true, "");
  return code;
}

// mpirun / srun: every rank is an agent (job/agent.h); rank 0 also hosts the coordinator
// and supervises the job (SuperviseJob) from a second thread.
int RunUnderLauncher(const Plan& planned, const RunOptions& options, const LaunchEnvironment& env,
                     const std::string& report_path) {
  Plan plan = planned;
  BATON_CHECK(env.world_size == plan.world_size(),
              "{} started {} processes but the plan has {} stage(s) x {} replica(s){} = {} ranks "
              "(parallel.stages x parallel.replicas{})",
              Name(env.mode), env.world_size, plan.num_stages(), plan.num_replicas(),
              plan.num_tensor() > 1 ? fmt::format(" x {} tensor ranks", plan.num_tensor()) : "",
              plan.world_size(), plan.num_tensor() > 1 ? " x parallel.tensor" : "");
  JobRendezvous rendezvous = ShareCoordinator(env, options.coordinator);
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<MetricsLog> metrics;
  Launch launch{rendezvous.job_id, "", 0, options.evaluate_only, {}};
  std::vector<RankMemory> predicted;
  if (env.rank == 0) {
    plan = PrepareLaunch(plan, options, launch);
    predicted = LogStartup(plan, options.config.path);
    metrics = OpenMetrics(plan, options, launch);
    server = std::make_unique<CoordinatorServer>();
    StartCoordinator(*server, plan, launch, rendezvous.bind_address, rendezvous.token);
  }
  rendezvous = PublishCoordinator(env, rendezvous, server ? server->port() : 0);

  WorkerArgs worker;
  worker.coordinator = rendezvous.connect_address;
  worker.token = rendezvous.token;
  worker.job_id = rendezvous.job_id;
  worker.rank = env.rank;
  worker.world_size = env.world_size;
  worker.local_rank = env.local_rank;
  worker.log_level = options.log_level;
  worker.listen_host = ListenHostFor(rendezvous.connect_address);
  spdlog::info("rank {} listens for its peers on {} (BATON_HOST overrides)", env.rank,
               worker.listen_host);
  if (env.rank != 0) {
    SetupLogging(fmt::format("agent {}", env.rank), options.log_level);
    return RunAgent(worker);
  }

  int supervisor_code = 1;
  std::thread supervisor([&] {
    try {
      supervisor_code = SuperviseJob(*server, rendezvous.connect_address, plan, predicted, options,
                                     launch, *metrics, rendezvous.token, report_path);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      LogOrigin(e);
      server->EndJob(/*succeeded=*/false, e.what());
    }
  });
  // The agent's children die with the thread that started them: this one, which outlives them.
  const int agent_code = RunAgent(worker);
  server->EndJob(/*succeeded=*/false, "rank 0's agent ended before the job did");  // if not yet
  supervisor.join();
  // The coordinator goes with this process: every agent must have learned the outcome first.
  if (!server->WaitForAgentsToLearnTheEnd(plan.timeouts.wait)) {
    spdlog::warn("not every agent learned how the job ended within {:.0f} s",
                 Seconds(plan.timeouts.wait));
  }
  return agent_code != 0 ? agent_code : supervisor_code;
}

}  // namespace

// Whether an override (`--set key=...`) gave `key` its value, rather than the config file.
bool SetOnCommandLine(const ConfigArgs& args, const std::string& key) {
  return std::any_of(args.overrides.begin(), args.overrides.end(),
                     [&](const std::string& o) { return o.starts_with(key + "="); });
}

// The GPT-2 weights file a run will read, opened once here rather than by every worker: a file
// that is not safetensors, or one holding another family's tensors, is one error naming where
// model.init_from was set.
void CheckGpt2WeightsFile(const std::string& path, const std::string& where,
                          const ModelDims& dims) {
  const SafetensorsFile file = [&] {
    try {
      return SafetensorsFile::Open(path);
    } catch (const Error& e) {
      BATON_FAIL(
          "{}: model.init_from {} is not a GPT-2 safetensors file, a Baton checkpoint or a Hugging "
          "Face folder: {}",
          where, path, e.what());
    }
  }();
  if (FindGpt2Tensor(file, "wte.weight") != nullptr) {
    try {
      ValidateGpt2File(file, dims);  // its shapes against this config's model, once
    } catch (const Error& e) {
      BATON_FAIL("{}: model.init_from: {}", where, e.what());
    }
    return;
  }
  if (file.Has("model.embed_tokens.weight")) {
    BATON_FAIL(
        "{}: model.init_from {} holds a Llama's weights (model.embed_tokens.weight), and this "
        "config's model is GPT-2: give the Hugging Face folder holding the file and its "
        "config.json (it sets model.preset: llama and the shape), or a GPT-2 file",
        where, path);
  }
  BATON_FAIL(
      "{}: model.init_from {} holds no GPT-2 embedding (transformer.wte.weight, nor wte.weight): "
      "not GPT-2 weights",
      where, path);
}

Config CheckNamedFiles(Config config, const ConfigArgs& args, bool evaluate_only) {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto require = [&](const std::string& key, const std::string& path) {
    if (path.empty() || fs::exists(path, error)) return;
    if (SetOnCommandLine(args, key)) BATON_FAIL("--set {}={}: no such file or folder", key, path);
    BATON_FAIL("{}: {} {}: no such file or folder", args.path, key, path);
  };
  const std::string init_where =
      SetOnCommandLine(args, "model.init_from") ? "--set model.init_from" : args.path;
  // `baton eval` with its own held-out file reads nothing else.
  if (!evaluate_only || config.data.eval_path.empty()) require("data.path", config.data.path);
  require("data.eval_path", config.data.eval_path);
  std::string& init = config.model.init_from;
  require("model.init_from", init);
  const InitSource source = ResolveInitSource(init, init_where, LlamaLike(config.model.preset));
  if (source.kind == InitSource::Kind::kHfLlamaFolder) {
    config = WithHfLlamaModel(std::move(config));
  } else if (source.path != init) {
    spdlog::info("model.init_from {}: a Hugging Face folder, read through its {}", init,
                 std::filesystem::path(source.path).filename().string());
    init = source.path;  // the workers resolve it to the same source
  }
  if (source.kind == InitSource::Kind::kGpt2File && !LlamaLike(config.model.preset)) {
    CheckGpt2WeightsFile(source.path, init_where, DimsOf(config.model));
  }
  return config;
}

int RunCommand(const RunOptions& options) {
  const Config loaded = CheckNamedFiles(LoadConfig(options.config.path, options.config.overrides),
                                        options.config, options.evaluate_only);
  BATON_CHECK(options.evaluate_only || loaded.model.weights == WeightFormat::kDense,
              "{}: model.weights: int8 is for inference (baton eval, baton generate); baton run "
              "trains dense weights",
              options.config.path);
  const LaunchEnvironment env = DetectLaunchEnvironment(ParseLauncherChoice(options.launcher));
  const int64_t budget = BudgetBytes(options.memory);
  FitResult fit;
  const Plan plan = PlanConfig(loaded, options.config.path, budget, options.memory, &fit);
  if (options.memory.fit && env.rank == 0) {
    spdlog::info("--fit considered:\n{}", FormatFitTable(fit, budget));
  }
  const Config& config = plan.config;
  const std::string report_path =
      options.report_path.empty() ? config.output.report : options.report_path;
  if (env.mode == LaunchMode::kLocal) return RunLocal(plan, options, report_path);
  return RunUnderLauncher(plan, options, env, report_path);
}

int EvalCommand(RunOptions options, std::ostream& out) {
  options.evaluate_only = true;
  options.eval_out = &out;
  return RunCommand(options);
}

std::optional<EvalRecord> Evaluate(RunOptions options) {
  EvalRecord record;
  options.evaluate_only = true;
  options.eval_into = &record;
  if (RunCommand(options) != 0) return std::nullopt;
  return record;
}

}  // namespace baton
