#include "job/checkpoint_saver.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "core/error.h"
#include "core/units.h"
#include "job/fault_hooks.h"

namespace baton {

CheckpointSaver::CheckpointSaver(const Plan& plan, const Launch& launch, int rank,
                                 CoordinatorClient& client, Allocator& host)
    : plan_(plan),
      launch_(launch),
      rank_(rank),
      writes_(WritesCheckpointFiles(plan.layout(), rank)),
      client_(client),
      writer_(CheckpointsRoot(plan.config.output.dir)),
      snapshot_(host) {}

CheckpointSaver::~CheckpointSaver() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (!error_) return;
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    spdlog::warn("the background checkpoint write did not finish: {}", e.what());
  }
}

std::string CheckpointSaver::EntriesKey(int64_t step, int rank) const {
  return fmt::format("ckpt/{}/{}/{}", launch_.attempt, step, rank);
}

TrainingState CheckpointSaver::StateOf(const Trainer& trainer, int64_t step) const {
  TrainingState state;
  state.step = step;
  state.seed = plan_.config.train.seed;
  state.loss_scaler = trainer.loss_scaler().state();
  state.lr_segments = launch_.lr_segments;
  state.config = ToJson(plan_.config);
  return state;
}

void CheckpointSaver::WriteFiles(int64_t step, const std::vector<LayerTensors>& layers,
                                 Backend& backend, std::vector<CheckpointFileEntry>& entries) {
  const FaultHooks& faults = GetFaultHooks();
  for (const LayerTensors& layer : layers) {
    for (CheckpointFileEntry& e : writer_.WriteLayers(step, rank_, {layer}, backend)) {
      entries.push_back(std::move(e));
    }
    if (faults.after_checkpoint_file) faults.after_checkpoint_file(rank_, step);
  }
}

void CheckpointSaver::PublishFiles(int64_t step, const std::vector<CheckpointFileEntry>& entries) {
  client_.KvSet(EntriesKey(step, rank_), EncodeFileEntries(entries));
}

void CheckpointSaver::WriteManifest(int64_t step, const TrainingState& state) {
  const Config& config = plan_.config;
  std::vector<CheckpointFileEntry> all;
  for (int writer : plan_.layout().GroupOf(Axis::kPipeline, 0)) {  // replica 0 writes the files
    std::vector<CheckpointFileEntry> entries =
        DecodeFileEntries(client_.KvGet(EntriesKey(step, writer), plan_.timeouts.checkpoint));
    all.insert(all.end(), entries.begin(), entries.end());
  }
  writer_.WriteManifest(step, all, state, plan_.dims, plan_.graph);
  for (const std::string& removed :
       writer_.Prune(step, config.output.keep_checkpoints, config.output.keep_every)) {
    spdlog::info("checkpoint retention (output.keep_checkpoints {}, keep_every {}): removed {}",
                 config.output.keep_checkpoints, config.output.keep_every, removed);
  }
}

void CheckpointSaver::Save(Trainer& trainer, Backend& backend, int64_t step) {
  const auto start = Clock::now();
  if (!plan_.config.output.async_checkpoint) {
    // Under ZeRO-1 or with tensor ranks layer by layer, one layer's gathered or whole state held
    // at a time (StateLayout::Save, through which the memory planner books the same).
    std::vector<CheckpointFileEntry> entries;
    trainer.state().Save([&](const std::vector<LayerTensors>& layers) {
      if (writes_) WriteFiles(step, layers, backend, entries);
    });
    if (writes_) PublishFiles(step, entries);
    if (rank_ == 0) {
      WriteManifest(step, StateOf(trainer, step));
      spdlog::info("checkpoint of step {} written to {} in {:.2f} s", step, writer_.step_dir(step),
                   Seconds(Clock::now() - start));
    }
    // Every rank: the checkpoint is complete.
    client_.Barrier(fmt::format("checkpoint-{}-{}", launch_.attempt, step),
                    plan_.timeouts.checkpoint);
    return;
  }
  Finish();  // one write at a time: the snapshot's buffers are the previous write's source
  // Every rank takes part (the split state's gathers are collective); writers keep a copy.
  trainer.state().SaveTo(writes_ ? &snapshot_ : nullptr);
  if (!writes_) return;
  const TrainingState state = StateOf(trainer, step);
  if (!writer_backend_) writer_backend_ = MakeCpuBackend(writer_ledger_, 1);
  spdlog::info("checkpoint of step {}: state copied ({}) in {:.3f} s; writing in the background",
               step, FormatBytes(snapshot_.bytes()), Seconds(Clock::now() - start));
  done_ = false;
  writing_step_ = step;
  thread_ = std::thread([this, step, state] {
    try {
      const auto begin = Clock::now();
      std::vector<CheckpointFileEntry> entries;
      WriteFiles(step, snapshot_.layers(), *writer_backend_, entries);
      PublishFiles(step, entries);
      if (rank_ == 0) {
        WriteManifest(step, state);
        spdlog::info("checkpoint of step {} written to {} in {:.2f} s (in the background)", step,
                     writer_.step_dir(step), Seconds(Clock::now() - begin));
      }
    } catch (const std::exception& e) {
      error_ = std::make_exception_ptr(Error(fmt::format(
          "the background write of step {}'s checkpoint failed (the checkpoint that {}/latest "
          "names is still the newest complete one): {}",
          step, writer_.root(), e.what())));
    }
    done_ = true;
  });
}

void CheckpointSaver::Check() {
  if (done_) Finish();
}

void CheckpointSaver::Finish() {
  if (thread_.joinable()) {
    // A write still going (a slow or stalled disk) holds this rank here: the rank table shows
    // it waiting on CHECKPOINT_WRITE, and a long wait is logged.
    const bool waits = !done_;
    const auto start = Clock::now();
    if (waits) client_.SetBlocked("CHECKPOINT_WRITE", -1, -1);
    thread_.join();
    if (waits) {
      client_.ClearBlocked();
      const double waited = Seconds(Clock::now() - start);
      if (waited >= 1.0) {
        spdlog::info("waited {:.1f} s for the background write of step {}'s checkpoint", waited,
                     writing_step_);
      }
    }
  }
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
}

}  // namespace baton
