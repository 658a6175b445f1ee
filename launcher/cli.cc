// baton: the command line (launcher/cli.h). Subcommands: run, eval, report, plan, generate,
// compress, export, tune, schedule, data prepare, and the internal `worker` that the launcher
// spawns. CLI11 stays in this file (it is slow to compile).
#include "launcher/cli.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/stop_signals.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "job/worker_main.h"
#include "launcher/compress.h"
#include "launcher/export.h"
#include "launcher/generate.h"
#include "launcher/run.h"
#include "launcher/run_page.h"
#include "launcher/tune.h"
#include "scheduler/schedule_command.h"
#include "scheduler/schedule_kinds.h"

namespace {

void AddConfigOptions(CLI::App* command, baton::ConfigArgs& args) {
  command->add_option("config", args.path, "YAML model/run config")->required();
  command->add_option("--set", args.overrides, "override a config field: section.key=value");
}

void AddMemoryOptions(CLI::App* command, baton::MemoryArgs& args) {
  command->add_option("--memory-budget", args.budget,
                      "bytes per stage (24GiB, 512MiB, 1.5GB, 4096): cut the layers so every "
                      "stage's predicted peak fits");
  command->add_flag("--fit", args.fit,
                    "search precision, checkpointing, micro-batches, then stages for the "
                    "fastest configuration that fits --memory-budget");
  command->add_option("--max-stages", args.max_stages,
                      "--fit's upper bound on stages (default: twice parallel.stages)");
  command->add_option("--max-processes", args.max_processes,
                      "lets --fit add data-parallel replicas with ZeRO-1 after more stages, up "
                      "to this many processes (stages x replicas; default: no replicas added)");
}

// Blocks the stop signals before anything else of the process runs (core/stop_signals.h): glibc
// calls an executable's .preinit_array ahead of every shared library's constructor (gRPC,
// protobuf, oneDNN, the CUDA runtime) and every static constructor, which together take about
// 0.1 s before main(); a SIGTERM in that time used to kill `baton run` by the default action.
// Here rather than in main.cc so that `baton_faults` (tests/) has it too: both link this file.
void BlockStopSignalsAtLoad(int /*argc*/, char** /*argv*/, char** /*envp*/) {
  baton::BlockStopSignals();
}
[[gnu::section(".preinit_array"),
  gnu::used]] void (*block_stop_signals_at_load)(int, char**, char**) = BlockStopSignalsAtLoad;

// A subcommand: its options, added to the app, and what runs once the command line names it.
// The options it fills live as long as `run` does.
struct Subcommand {
  CLI::App* cli = nullptr;
  std::function<int()> run;
};

// `log_level` is baton's own option (it may follow the subcommand): read once parsed.
using LogLevel = const std::string&;

Subcommand AddRun(CLI::App& app, LogLevel log_level) {
  auto run = std::make_shared<baton::RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "train a model (spawns one worker per stage)");
  AddConfigOptions(cmd, run->config);
  cmd->add_option("--report", run->report_path, "write a JSON report here");
  cmd->add_option("--coordinator", run->coordinator,
                  "HOST:PORT of the coordinator (rank 0 hosts it under mpirun/srun)");
  cmd->add_option("--resume", run->resume,
                  "continue from a checkpoint: a step dir, checkpoints root or output dir; "
                  "auto: output.dir's latest checkpoint if there is one");
  cmd->add_flag("--overwrite", run->overwrite,
                "a fresh run into an output.dir that holds another run: delete that run's "
                "checkpoints, metrics and reports first (without it such a run is refused)");
  cmd->add_option("--steps-more", run->steps_more,
                  "with --resume: train N steps past the checkpoint's, the learning rate "
                  "decaying on from where it is (not a train.steps change, which reshapes it)")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--launcher", run->launcher,
         "who starts the workers: auto (from the environment), local, mpi, slurm, torchrun")
      ->check(CLI::IsMember({"auto", "local", "mpi", "slurm", "torchrun"}));
  cmd->add_option("--max-restarts", run->max_restarts,
                  "after a failure, restart every worker from the last checkpoint (also "
                  "under mpirun and srun: give every rank the same value)");
  AddMemoryOptions(cmd, run->memory);
  return {cmd, [run, &log_level] {
            baton::SetupLogging("launcher", log_level);
            run->log_level = log_level;
            return baton::RunCommand(*run);
          }};
}

Subcommand AddEval(CLI::App& app, LogLevel log_level) {
  auto eval = std::make_shared<baton::RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "mean loss and perplexity of a checkpoint on held-out data (data.eval_path or "
      "data.eval_fraction)");
  AddConfigOptions(cmd, eval->config);
  cmd->add_option("--resume", eval->resume,
                  "the weights: a step dir, checkpoints root or output dir; auto: "
                  "output.dir's latest (or --set model.init_from=FILE)");
  cmd->add_option(
         "--launcher", eval->launcher,
         "who starts the workers: auto (from the environment), local, mpi, slurm, torchrun")
      ->check(CLI::IsMember({"auto", "local", "mpi", "slurm", "torchrun"}));
  cmd->add_option("--coordinator", eval->coordinator,
                  "HOST:PORT of the coordinator (rank 0 hosts it under mpirun/srun)");
  cmd->add_flag("--json", eval->eval_json, "print the result as one JSON object");
  return {cmd, [eval, &log_level] {
            baton::SetupLogging("eval", log_level);
            eval->log_level = log_level;
            return baton::EvalCommand(*eval, std::cout);
          }};
}

Subcommand AddExport(CLI::App& app, LogLevel log_level) {
  auto options = std::make_shared<baton::ExportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "write a checkpoint as a Hugging Face model folder: GPT2LMHeadModel or LlamaForCausalLM "
      "safetensors, config.json (and its tokenizer)");
  cmd->add_option("checkpoint", options->checkpoint, "step dir, checkpoints root or output dir")
      ->required();
  cmd->add_option("output", options->output,
                  "folder for model.safetensors + config.json (+ the tokenizer's files)")
      ->required();
  cmd->add_option("--dtype", options->dtype, "f32, bf16 or f16");
  cmd->add_option("--set", options->overrides,
                  "data.tokenizer=PATH: the tokenizer to copy (default: the one state.json's "
                  "config names)");
  return {cmd, [options, &log_level] {
            baton::SetupLogging("export", log_level);
            return baton::ExportCommand(*options);
          }};
}

Subcommand AddCompress(CLI::App& app, LogLevel log_level) {
  auto compress = std::make_shared<baton::CompressOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compress",
      "a smaller checkpoint: --int8 weights, --prune or --low-rank (prints bytes, eval loss)");
  cmd->add_option("checkpoint", compress->checkpoint, "step dir, checkpoints root or output dir")
      ->required();
  cmd->add_option("output", compress->output, "a new output directory to write")->required();
  cmd->add_flag("--int8", compress->int8, "INT8 block weights, one f32 scale per output channel");
  cmd->add_option("--prune", compress->prune,
                  "zero this fraction of the block weights by magnitude (sparse storage)");
  cmd->add_option("--low-rank", compress->low_rank,
                  "rank R: every block matrix W as U (in,R) V (R,out) by truncated SVD");
  cmd->add_option("--pattern", compress->pattern, "--prune's pattern: unstructured or 2:4")
      ->check(CLI::IsMember({"unstructured", "2:4"}));
  cmd->add_flag("!--no-eval", compress->eval,
                "skip the eval loss before and after (two baton eval runs)");
  cmd->add_option("--set", compress->overrides,
                  "override a field of the stored config, e.g. data.eval_path=PATH");
  return {cmd, [compress, &log_level] {
            baton::SetupLogging("compress", log_level);
            return baton::CompressCommand(*compress, std::cout);
          }};
}

Subcommand AddGenerate(CLI::App& app, LogLevel log_level) {
  auto generate = std::make_shared<baton::GenerateOptions>();
  auto no_kv_cache = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("generate", "sample text from a checkpoint (bytes, or its tokenizer's)");
  cmd->add_option("checkpoint", generate->checkpoint, "step dir, checkpoints root or output dir")
      ->required();
  cmd->add_option("--prompt", generate->prompt, "text to continue");
  cmd->add_option("--prompts", generate->prompts_file,
                  "a file of prompts, one per line (empty lines skipped): prints a JSON line "
                  "{\"prompt\", \"continuation\"} for each");
  cmd->add_option("--batch", generate->batch, "prompts of --prompts decoded together");
  cmd->add_option("--tokens", generate->tokens, "new tokens to sample");
  cmd->add_option("--temperature", generate->sampling.temperature, "0 = greedy");
  cmd->add_option("--top-k", generate->sampling.top_k, "sample from the K likeliest; 0 = all");
  cmd->add_option("--top-p", generate->sampling.top_p,
                  "then from the fewest likeliest whose probability reaches P (nucleus); 1 = all");
  cmd->add_option("--seed", generate->seed, "the same seed gives the same text");
  cmd->add_option("--set", generate->overrides, "override a config field, e.g. device.type=cpu");
  cmd->add_flag("--no-kv-cache", *no_kv_cache,
                "recompute the window for every token instead of caching keys and values "
                "(past model.context the cache recomputes the window anyway: positions "
                "are absolute)");
  return {cmd, [generate, no_kv_cache, &log_level] {
            baton::SetupLogging("generate", log_level);
            generate->kv_cache = !*no_kv_cache;
            return baton::GenerateCommand(*generate, std::cout);
          }};
}

Subcommand AddReport(CLI::App& app, LogLevel log_level) {
  auto dir = std::make_shared<std::string>(), file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "report", "write OUTPUT_DIR/report.html from what the run left there (also while it runs)");
  cmd->add_option("output_dir", *dir, "the run's output.dir")->required();
  cmd->add_option("--report", *file,
                  "the run's --report JSON: adds the predicted memory and the config");
  return {cmd, [dir, file, &log_level] {
            baton::SetupLogging("report", log_level);
            return baton::ReportCommand(*dir, *file, std::cout);
          }};
}

Subcommand AddPlan(CLI::App& app, LogLevel log_level) {
  auto plan = std::make_shared<baton::PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "print the partition and each stage's predicted memory without training");
  AddConfigOptions(cmd, plan->config);
  AddMemoryOptions(cmd, plan->memory);
  cmd->add_option("--format", plan->format, "text or json")->check(CLI::IsMember({"text", "json"}));
  return {cmd, [plan, &log_level] {
            baton::SetupLogging("plan", log_level);
            return baton::PlanCommand(*plan, std::cout);
          }};
}

Subcommand AddTune(CLI::App& app, LogLevel log_level) {
  auto tune = std::make_shared<baton::TuneCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune",
      "profile the model's layers here, search schedule x stages x micro-batches x "
      "checkpointing x cut under a budget, print the ranking, write the best config");
  AddConfigOptions(cmd, tune->config);
  cmd->add_option("--memory-budget", tune->budget,
                  "bytes per process (60MiB, 1.5GB, 4096): candidates over it do not fit");
  cmd->add_option("--max-stages", tune->max_stages, "most pipeline stages (default: processes)");
  cmd->add_option(
      "--max-processes", tune->max_processes,
      "stages x replicas <= this (default: cores / device.threads, or --max-stages if more)");
  cmd->add_option("--out", tune->out, "where to write the best config (default tuned.yaml)");
  cmd->add_option("--repeats", tune->repeats, "timed repetitions per measurement (median)");
  cmd->add_option("--top", tune->top, "rows of the ranked table");
  return {cmd, [tune, &log_level] {
            baton::SetupLogging("tune", log_level);
            return baton::TuneCommand(*tune, std::cout);
          }};
}

Subcommand AddSchedule(CLI::App& app) {
  auto schedule = std::make_shared<baton::ScheduleCommandOptions>();
  CLI::App* cmd = app.add_subcommand("schedule", "generate, validate, show a schedule");
  cmd->add_option("--stages", schedule->stages, "pipeline ranks P");
  cmd->add_option("--microbatches", schedule->microbatches, "micro-batches M");
  std::string names;
  for (const baton::ScheduleKindInfo& info : baton::kScheduleKinds) {
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  cmd->add_option("--schedule", schedule->schedule, names);
  cmd->add_option(
      "--chunks", schedule->chunks,
      "model chunks per stage (interleaved, interleaved-zb, looped-bfs: >= 2, default 2; V "
      "schedules: 2)");
  cmd->add_option(
      "--costs", schedule->costs,
      "action costs in any unit, e.g. F=1,B=2,I=1,W=1 (the default); the makespan is in it");
  cmd->add_option("--file", schedule->file, "a schedule CSV to load instead");
  cmd->add_option("--format", schedule->format,
                  "text, csv, torch-csv (torch.distributed.pipelining's compute-only CSV), json, "
                  "svg or chrome");
  cmd->add_option("--comm", schedule->comm, "async or rendezvous send semantics");
  return {cmd, [schedule] { return baton::RunScheduleCommand(*schedule, std::cout, std::cerr); }};
}

// `baton data prepare`: the one data tool.
Subcommand AddDataPrepare(CLI::App& app, LogLevel log_level) {
  struct Args {
    std::string input, output, tokenizer;
  };
  auto args = std::make_shared<Args>();
  CLI::App* data = app.add_subcommand("data", "data tools");
  data->require_subcommand(1);
  CLI::App* cmd = data->add_subcommand("prepare", "text (file or folder) to .bin");
  cmd->add_option("input", args->input, "text file or folder")->required();
  cmd->add_option("output", args->output, "output .bin (uint16 tokens)")->required();
  cmd->add_option("--tokenizer", args->tokenizer,
                  "BPE tokenizer: tokenizer.json, vocab.json (merges.txt beside it) or a "
                  "folder; default: one token per byte");
  return {cmd, [args, &log_level] {
            baton::SetupLogging("data", log_level);
            std::optional<baton::Tokenizer> tokenizer;
            if (!args->tokenizer.empty())
              tokenizer.emplace(baton::Tokenizer::Load(args->tokenizer));
            const int64_t tokens = baton::PrepareTextData(args->input, args->output,
                                                          tokenizer ? &*tokenizer : nullptr);
            spdlog::info("wrote {} tokens to {} (vocab size {}: {})", tokens, args->output,
                         tokenizer ? tokenizer->vocab_size() : 256,
                         tokenizer ? tokenizer->files().front().path : std::string("bytes"));
            return 0;
          }};
}

// The internal `worker` the launchers start, hidden from --help.
Subcommand AddWorker(CLI::App& app, LogLevel log_level) {
  auto worker = std::make_shared<baton::WorkerArgs>();
  CLI::App* cmd = app.add_subcommand("worker", "internal: one pipeline stage");
  cmd->group("");
  cmd->add_option("--coordinator", worker->coordinator)->required();
  cmd->add_option("--rank", worker->rank)->required();
  cmd->add_option("--world-size", worker->world_size)->required();
  cmd->add_option("--local-rank", worker->local_rank);
  cmd->add_option("--attempt", worker->attempt);
  cmd->add_option("--listen-host", worker->listen_host);
  return {cmd, [worker, &log_level] {
            worker->log_level = log_level;
            return baton::RunWorker(*worker);
          }};
}

}  // namespace

namespace baton {

int BatonMain(int argc, char** argv) {
  // Before any thread exists: every thread inherits the blocked stop signals, and one thread
  // receives them (core/stop_signals.h), so no signal lands in a compute thread.
  InstallStopSignals();
  CLI::App app{"Baton: pipeline-parallel training runtime"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("baton ") + BATON_VERSION);
  // Options of `baton` itself (--log-level) may also follow the subcommand.
  app.fallthrough();
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  // In --help's order.
  const std::vector<Subcommand> subcommands = {
      AddRun(app, log_level),         AddEval(app, log_level),     AddExport(app, log_level),
      AddCompress(app, log_level),    AddGenerate(app, log_level), AddReport(app, log_level),
      AddPlan(app, log_level),        AddTune(app, log_level),     AddSchedule(app),
      AddDataPrepare(app, log_level), AddWorker(app, log_level)};

  CLI11_PARSE(app, argc, argv);

  try {
    for (const Subcommand& subcommand : subcommands) {
      if (subcommand.cli->parsed()) return subcommand.run();
    }
  } catch (const std::exception& e) {
    std::cerr << "baton: error: " << e.what() << "\n";
    LogOrigin(e);
    return 1;
  }
  return 2;
}

}  // namespace baton
