// Checkpoint metadata: the manifest, the per-file entries ranks send to rank 0, the training
// state, and the names of a checkpoint's files, with their JSON forms (docs/checkpoints.md).
//
// Plain values; every function is thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/loss_scaler_state.h"
#include "core/lr_segment.h"
#include "core/random.h"
#include "model/dims.h"

namespace baton {

// One file of a checkpoint, as its manifest lists it.
struct CheckpointFileEntry {
  std::string name;  // relative to the step directory: "layer-3.safetensors", "state.json"
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // FNV-1a 64 of the whole file (16 hex digits in JSON)
  int layer = -1;         // graph layer index for layer files, -1 otherwise
  int rank = -1;          // the rank that wrote it
  bool operator==(const CheckpointFileEntry&) const = default;
};

// JSON text for the trip from each rank to rank 0 (a KV value); Decode throws on malformed text.
std::string EncodeFileEntries(const std::vector<CheckpointFileEntry>& entries);
std::vector<CheckpointFileEntry> DecodeFileEntries(const std::string& text);

// What a run needs besides the layers to continue exactly (state.json).
struct TrainingState {
  int64_t step = 0;   // completed optimizer steps: training resumes at step + 1
  uint64_t seed = 0;  // train.seed; with the step it fixes every later batch (docs/data.md)
  LossScalerState loss_scaler{1.0, 0, 0};
  std::optional<Rng::State> rng;  // a stateful generator's state, when the run has one
  // The learning-rate schedule of an extended run (--steps-more): [0, the first train.steps], then
  // one segment per extension; a resumed run keeps them ("lr_segments": [[from, to], ...],
  // absent when the run was never extended).
  std::vector<LrSegment> lr_segments;
  // The writing run's config (ToJson(Config)): informational. Resuming ignores it (the run's own
  // config, its model checked against the manifest); `baton export` reads only data.tokenizer;
  // `baton generate` and `compress`, which have no other source of the run's settings, rebuild
  // the model from it (docs/checkpoints.md).
  nlohmann::json config;
};
nlohmann::json ToJson(const TrainingState& state);
// Reads state.json (`source` names it in errors, with the key path), checking the loss scaler's
// counts and the lr_segments against the step (docs/checkpoints.md).
TrainingState TrainingStateFromJson(const nlohmann::json& json, const std::string& source);

inline constexpr const char* kCheckpointsDirName = "checkpoints";
inline constexpr const char* kManifestFileName = "manifest.json";
inline constexpr const char* kStateFileName = "state.json";
inline constexpr const char* kLatestFileName = "latest";

std::string CheckpointsRoot(const std::string& output_dir);  // <output.dir>/checkpoints
std::string StepDirName(int64_t step);                       // "step-10"
std::string LayerFileName(int layer_index);                  // "layer-3.safetensors"

// The manifest.json of one step: the model it belongs to and every file of the checkpoint.
struct CheckpointManifest {
  int64_t step = 0;
  ModelDims dims;
  std::vector<std::string> layer_names;    // the graph, by LayerSpec::name, in graph order
  std::vector<CheckpointFileEntry> files;  // sorted by name
};
nlohmann::json ToJson(const CheckpointManifest& manifest);
CheckpointManifest ManifestFromJson(const nlohmann::json& json, const std::string& source);

// The step of a directory named "step-<N>"; nullopt for any other name.
std::optional<int64_t> ParseStepDirName(const std::string& name);
// The step-<N> directories under `root` (links to directories too), newest first, as
// (step, path). Throws naming `root` when it cannot be listed.
std::vector<std::pair<int64_t, std::string>> StepDirs(const std::string& root);

}  // namespace baton
