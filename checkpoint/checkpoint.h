// Training checkpoints, stored per graph layer so a run can resume with another stage count,
// schedule or partition (docs/checkpoints.md).
//
// Layout under the checkpoints root (<output.dir>/checkpoints):
//   step-<N>/layer-<i>.safetensors   graph layer i: each param "<name>", and its optimizer state
//                                    "<name>.master" (f32, 16-bit params only), "<name>.adam_m",
//                                    "<name>.adam_v"; the head's tied wte is not stored (layer 0's
//                                    is the one copy)
//   step-<N>/state.json              step, data position, loss-scaler and RNG state
//   step-<N>/manifest.json           written LAST: every file with its size and FNV-1a 64
//   latest                           "step-<N>": the newest complete step, replaced atomically
//
// Saving (every rank, then rank 0): each rank calls CheckpointWriter::WriteLayers for the layers it
// holds and sends the returned entries to rank 0 (EncodeFileEntries, through the coordinator's KV
// store); after a barrier rank 0 calls WriteManifest with everyone's entries. Every file is written
// to a temporary name, fsynced and renamed; the directory is fsynced; a step without manifest.json
// is incomplete and never loaded, so a crash mid-save leaves the previous checkpoint intact.
// Loading: CheckpointReader::Open(step dir or root), then LoadLayers on every rank for whatever
// layers it holds now. Ranks hand over their layers as named tensors (layer_tensors.h): this
// library knows files and formats, not the model or the optimizer that own them.
//
// Thread safety: none of these objects may be shared between threads without a lock; different
// ranks (processes) write disjoint files of one step directory concurrently by design.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/layer_tensors.h"
#include "checkpoint/safetensors.h"
#include "kernels/backend.h"
#include "model/dims.h"
#include "model/graph.h"

namespace baton {

// What a checkpoint's layer files hold: everything training needs to resume, or the weights only
// (`baton compress`: enough for baton eval, baton generate and export, not to resume).
enum class CheckpointContents { kTraining, kWeightsOnly };

class CheckpointWriter {
 public:
  explicit CheckpointWriter(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string step_dir(int64_t step) const;

  // Every rank: writes one file per layer of `layers` (the layers rank `rank` holds) into
  // step_dir(step) (created if needed; a manifest already there is removed first, since its files
  // are about to change). Each param is stored with its master (when defined) and both moments;
  // tied copies are not stored; INT8 weights come with "<name>.scale". Device tensors are staged
  // through `backend`. Returns the entries for WriteManifest. kWeightsOnly stores no optimizer
  // state and marks each file's metadata "contents": "weights".
  std::vector<CheckpointFileEntry> WriteLayers(
      int64_t step, int rank, const std::vector<LayerTensors>& layers, Backend& backend,
      CheckpointContents contents = CheckpointContents::kTraining) const;

  // Rank 0, once every rank's WriteLayers has returned: checks that the entries cover each of the
  // graph's layers exactly once, writes state.json, removes stale temporary files, writes
  // manifest.json and finally points `latest` at this step.
  void WriteManifest(int64_t step, std::vector<CheckpointFileEntry> entries,
                     const TrainingState& state, const ModelDims& dims,
                     const std::vector<LayerSpec>& graph) const;

  // Rank 0, after WriteManifest(newest): checkpoint retention (output.keep_checkpoints,
  // output.keep_every; docs/checkpoints.md). Of the step-<N> folders up to `newest`, keeps the
  // `keep_last` newest complete ones (with a manifest), whatever lies between them, and every
  // complete one whose step is a multiple of `keep_every` (0: none); removes the other, older
  // ones, complete or not (an incomplete one is an interrupted write); a folder that is a link is
  // removed as a link. Folders past
  // `newest` (another run's, resumed from an earlier step) are left alone. keep_last 0 keeps
  // everything. A folder that cannot be removed is logged as a warning, not an error (training
  // goes on). Returns the folders removed.
  std::vector<std::string> Prune(int64_t newest, int64_t keep_last, int64_t keep_every) const;

 private:
  std::string root_;
};

class CheckpointReader {
 public:
  // `dir` is a step directory (holds manifest.json), a checkpoints root, or an output.dir holding
  // "checkpoints". For a root: the step `latest` names if that step is complete, else the newest
  // step directory with a manifest; newer incomplete steps are skipped (see skipped()). Checks
  // that every listed file exists with its listed size, and reads state.json (checksummed).
  static CheckpointReader Open(const std::string& dir);

  const std::string& step_dir() const { return step_dir_; }
  int64_t step() const { return step_; }
  const TrainingState& state() const { return state_; }
  const ModelDims& dims() const { return dims_; }
  const std::vector<std::string>& layer_names() const { return layer_names_; }
  const std::vector<CheckpointFileEntry>& files() const { return files_; }
  // Step directories newer than the one opened that were passed over (no manifest: a save that
  // did not finish), for the caller to report.
  const std::vector<std::string>& skipped() const { return skipped_; }

  // Throws, naming both, unless the run's model has the checkpoint's dims and layer graph.
  void CheckCompatible(const ModelDims& dims, const std::vector<LayerSpec>& graph) const;
  // Checksums every file of the manifest.
  void VerifyAll() const;
  // Opens layer `index`'s file after checking its checksum against the manifest.
  SafetensorsFile OpenLayer(int index) const;

  // Fills the parameters and optimizer state of every layer of `layers` (the layers a rank holds
  // now, whichever partition wrote them), checksumming each file it reads. Values convert to the
  // params' dtype; a 16-bit param's master comes from "<name>.master" when stored, else from the
  // stored value; an f32 param takes a stored master over the stored (rounded) value. A tied copy
  // comes from layer 0's file, unless it shares its storage with a param of `layers` (then that
  // param fills it). Every tensor of a layer's file must belong to one of its params. INT8 weights
  // load into INT8 params as stored, and dequantise into dense ones; dense weights quantise into
  // INT8 params (CopyWeightTo). Params without optimizer state (an INT8 inference model) load
  // their values only; params with state refuse a weights-only file, naming it.
  void LoadLayers(const std::vector<LayerTensors>& layers, Backend& backend) const;

 private:
  const CheckpointFileEntry& Entry(const std::string& name) const;
  void VerifyFile(const CheckpointFileEntry& entry) const;

  std::string step_dir_;
  int64_t step_ = 0;
  TrainingState state_;
  ModelDims dims_;
  std::vector<std::string> layer_names_;
  std::vector<CheckpointFileEntry> files_;
  std::vector<std::string> skipped_;
};

}  // namespace baton
