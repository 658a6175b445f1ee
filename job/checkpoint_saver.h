// A rank's checkpoint saves (docs/checkpoints.md, "Saving"). Replica 0's ranks write the files of
// the layers they hold (with tensor ranks, tensor rank 0 writes the whole tensors); rank 0 gathers
// their file lists through the coordinator's store and writes the manifest last, then prunes
// (output.keep_checkpoints).
//
// Synchronously (the default) a save returns once the checkpoint is complete on every rank (a
// barrier over the job). With output.async_checkpoint a save waits for the previous one's write,
// copies this rank's state into host buffers (CheckpointSnapshot, booked as checkpoint memory)
// and returns: a background thread writes the files, and on rank 0 the manifest, from that copy
// while training goes on. A write that fails is rethrown by the next Check, Save or Finish.
//
// Threads: Save, Check and Finish on the training thread only; the background thread uses the
// client (thread-safe), the snapshot (not touched by Save before the write is joined) and its own
// CPU backend.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_snapshot.h"
#include "coordinator/coordinator_client.h"
#include "plan/codec.h"
#include "plan/plan.h"
#include "worker/trainer.h"

namespace baton {

class CheckpointSaver {
 public:
  // `host`: where the background copy is allocated (host memory, booked in the rank's ledger).
  CheckpointSaver(const Plan& plan, const Launch& launch, int rank, CoordinatorClient& client,
                  Allocator& host);
  // Waits for a write in progress; its failure is logged (the rank is leaving anyway).
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // After step `step`: saves the trainer's state of that step. Collective: every rank of the job
  // calls it after the same step.
  void Save(Trainer& trainer, Backend& backend, int64_t step);
  // Rethrows the failure of a background write that has ended, if it failed.
  void Check();
  // Waits for the background write in progress, if any, and rethrows its failure. While it
  // waits, the rank's reports say CHECKPOINT_WRITE (the launcher's rank table shows it).
  void Finish();

 private:
  // The store key under which `rank` publishes its file entries of `step` for rank 0.
  std::string EntriesKey(int64_t step, int rank) const;
  TrainingState StateOf(const Trainer& trainer, int64_t step) const;
  // This rank's files of `step` from `layers`, one layer at a time (FaultHooks::
  // after_checkpoint_file after each), their entries appended to `entries`.
  void WriteFiles(int64_t step, const std::vector<LayerTensors>& layers, Backend& backend,
                  std::vector<CheckpointFileEntry>& entries);
  // All of this rank's entries of `step`, into the store for rank 0.
  void PublishFiles(int64_t step, const std::vector<CheckpointFileEntry>& entries);
  // Rank 0: every writer's entries, then the manifest, `latest` and retention.
  void WriteManifest(int64_t step, const TrainingState& state);

  const Plan& plan_;
  const Launch& launch_;
  const int rank_;
  const bool writes_;  // this rank writes files (replica 0, tensor rank 0)
  CoordinatorClient& client_;
  CheckpointWriter writer_;
  // Background saves only.
  CheckpointSnapshot snapshot_;
  MemoryLedger writer_ledger_;  // the writer's backend's, apart from the rank's ledger
  std::unique_ptr<Backend> writer_backend_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  int64_t writing_step_ = 0;  // the step the thread writes (or wrote)
  std::exception_ptr error_;
};

}  // namespace baton
