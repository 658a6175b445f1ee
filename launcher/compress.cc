#include "launcher/compress.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/error.h"
#include "core/files.h"
#include "kernels/backend_factory.h"
#include "kernels/low_rank.h"
#include "kernels/quantize.h"
#include "launcher/run.h"
#include "model/from_config.h"
#include "model/init.h"
#include "model/prune.h"
#include "worker/stage_model.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// What compressing one weight matrix did.
struct MatrixResult {
  std::string name;
  int64_t elements = 0;
  int64_t zeros = 0;         // after
  int64_t bytes_before = 0;  // as the source stores the value
  int64_t bytes_after = 0;   // codes and scales, or kept values and the mask's bits
  double relative_error = 0;
};

// `t` (any device, float or i8) as host bytes.
std::vector<std::byte> HostBytes(const Tensor& t, Backend& backend) {
  std::vector<std::byte> bytes(t.nbytes());
  Tensor host = Tensor::Wrap(bytes.data(), t.shape(), t.dtype());
  backend.Copy(t, host);
  backend.Synchronize();
  return bytes;
}

// The dense f32 values `name` held in the source checkpoint (its master when stored), which must
// have the model's shape `expected` (a file's own shape is never taken on trust).
std::vector<float> StoredDense(const SafetensorsFile& file, const std::string& name,
                               const Shape& expected, Backend& backend) {
  const std::string source = file.Has(name + ".master") ? name + ".master" : name;
  int64_t n = 1;
  for (int64_t d : expected) n *= d;
  std::vector<float> values(static_cast<size_t>(n));
  Tensor host = Tensor::Wrap(values.data(), expected, DType::kF32);  // CopyTo checks the shape
  file.CopyTo(source, host, backend);  // any float dtype; anything else is refused, named
  return values;
}

// ||W - W'|| / ||W|| (Frobenius, in double); 0 for a zero W.
template <typename T>
double RelativeError(const std::vector<float>& w, const std::vector<T>& approx) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const double d = static_cast<double>(w[i]) - static_cast<double>(approx[i]);
    diff += d * d;
    norm += static_cast<double>(w[i]) * w[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

// What the compressed matrix holds, dense f32.
std::vector<float> CompressedDense(const ParamTensors& p, Backend& backend) {
  if (!p.scale.defined()) return HostValues(backend, p.value);
  const int64_t rows = p.value.size(0), cols = p.value.size(1);
  const std::vector<std::byte> codes = HostBytes(p.value, backend);
  const std::vector<float> scales = HostValues(backend, p.scale);
  std::vector<float> restored(static_cast<size_t>(rows * cols));
  DequantizeColumnsInt8(reinterpret_cast<const int8_t*>(codes.data()), scales.data(), rows, cols,
                        restored.data());
  return restored;
}

// Compares every compressed matrix of `layers` (INT8 or masked) with the source checkpoint's.
std::vector<MatrixResult> MeasureMatrices(const CheckpointReader& source,
                                          const std::vector<LayerTensors>& layers,
                                          Backend& backend) {
  std::vector<MatrixResult> results;
  for (const LayerTensors& layer : layers) {
    const SafetensorsFile file = source.OpenLayer(layer.index);
    for (const ParamTensors& p : layer.params) {
      if (!p.scale.defined() && !p.mask.defined()) continue;
      const std::vector<float> dense = StoredDense(file, p.name, p.value.shape(), backend);
      const std::vector<float> now = CompressedDense(p, backend);
      MatrixResult r;
      r.name = p.name;
      r.elements = p.value.numel();
      for (float x : now) r.zeros += x == 0.0f ? 1 : 0;
      r.relative_error = RelativeError(dense, now);
      r.bytes_before = static_cast<int64_t>(file.Bytes(file.Get(p.name)).size());
      if (p.scale.defined()) {
        r.bytes_after = static_cast<int64_t>(p.value.nbytes() + p.scale.nbytes());
      } else {
        const std::vector<std::byte> keep = HostBytes(p.mask, backend);
        int64_t kept = 0;
        for (std::byte k : keep) kept += k != std::byte{0} ? 1 : 0;
        r.bytes_after = kept * static_cast<int64_t>(SizeOf(p.value.dtype())) + (r.elements + 7) / 8;
      }
      results.push_back(std::move(r));
    }
  }
  return results;
}

uint64_t CheckpointBytes(const CheckpointReader& reader) {
  uint64_t bytes = 0;
  for (const CheckpointFileEntry& entry : reader.files()) bytes += entry.bytes;
  return bytes;
}

// `baton eval` of `resume` with the config at `config_path`, on local worker processes.
double EvalLoss(const std::string& config_path, std::vector<std::string> overrides,
                const std::string& resume) {
  RunOptions options;
  options.config = {config_path, std::move(overrides)};
  options.resume = resume;
  options.launcher = "local";
  const std::optional<EvalRecord> eval = Evaluate(options);
  BATON_CHECK(eval.has_value(), "baton eval of {} failed", resume);
  return eval->loss;
}

// --low-rank: fills the factors of every low-rank linear of `target` from the SVD of the dense
// weight `source` holds, and every other parameter from `source` as stored. Returns what each
// factored matrix became.
std::vector<MatrixResult> FactorMatrices(const CheckpointReader& source, StageModel& target,
                                         int64_t rank, Backend& backend) {
  std::vector<MatrixResult> results;
  for (auto& [index, layer] : target.layers()) {
    const SafetensorsFile file = source.OpenLayer(index);
    for (Param* p : layer->params()) {
      if (p->tied) continue;  // filled from its original below (shared storage) or by its layer
      const std::string& name = p->name;
      const bool u = name.ends_with(".weight_u"), v = name.ends_with(".weight_v");
      if (v) continue;  // with its U
      if (!u) {
        Tensor value = p->value;
        Tensor no_scale;
        CopyWeightTo(file, file.Has(name + ".master") ? name + ".master" : name, value, no_scale,
                     backend);
        continue;
      }
      const std::string dense_name = name.substr(0, name.size() - 2);  // "<linear>.weight"
      Param* pv = nullptr;
      for (Param* q : layer->params()) {
        if (q->name == dense_name + "_v") pv = q;
      }
      BATON_CHECK(pv != nullptr, "{} has no {}_v", layer->name(), dense_name);
      // U is (in, R) and V (R, out): the dense weight the model has is (in, out).
      const int64_t in = p->value.size(0);
      const int64_t out = pv->value.size(1);
      const std::vector<float> w = StoredDense(file, dense_name, Shape{in, out}, backend);
      LowRankFactors f;
      try {
        f = FactorLowRank(w.data(), in, out, rank);
      } catch (const Error& e) {
        BATON_FAIL("{}: tensor {}: {}", file.path(), dense_name, e.what());
      }
      UploadValues(backend, f.u, p->value);
      UploadValues(backend, f.v, pv->value);
      // The error of what is stored (in the param dtype), against the stored dense weight.
      const std::vector<float> su = HostValues(backend, p->value),
                               sv = HostValues(backend, pv->value);
      std::vector<double> uv(w.size(), 0.0);
      for (int64_t i = 0; i < in; ++i) {
        for (int64_t l = 0; l < rank; ++l) {
          const double a = su[static_cast<size_t>(i * rank + l)];
          for (int64_t j = 0; j < out; ++j)
            uv[static_cast<size_t>(i * out + j)] += a * sv[static_cast<size_t>(l * out + j)];
        }
      }
      MatrixResult r;
      r.name = dense_name;
      r.elements = in * out;
      r.relative_error = RelativeError(w, uv);
      r.bytes_before = static_cast<int64_t>(file.Bytes(file.Get(dense_name)).size());
      r.bytes_after = static_cast<int64_t>(p->value.nbytes() + pv->value.nbytes());
      results.push_back(std::move(r));
    }
    // State beside the params (a sigmoid_bias router's bias) comes as stored.
    Layer::RoutingBias bias = layer->routing_bias();
    if (bias.values.defined()) file.CopyTo(bias.name, bias.values, backend);
  }
  return results;
}

// What to write: the source checkpoint's config with the compression applied, checked.
struct CompressPlan {
  bool prune = false;
  bool low_rank = false;
  PrunePattern pattern = PrunePattern::kUnstructured;
  Config source_config;  // as trained (with --set applied)
  Config config;         // what the output holds
  std::vector<LayerSpec> graph;
};

CompressPlan PlanCompression(const CompressOptions& options, const CheckpointReader& source) {
  CompressPlan plan;
  plan.prune = options.prune > 0.0;
  plan.low_rank = options.low_rank > 0;
  BATON_CHECK(int{options.int8} + int{plan.prune} + int{plan.low_rank} == 1,
              "baton compress: give --int8, --prune SPARSITY or --low-rank RANK (one at a time; "
              "see docs/memory.md)");
  BATON_CHECK(!plan.prune || options.prune < 1.0, "--prune {}: the sparsity must be in (0, 1)",
              options.prune);
  BATON_CHECK(options.pattern == "2:4" || options.pattern == "unstructured",
              "--pattern {}: expected unstructured or 2:4", options.pattern);
  plan.pattern = options.pattern == "2:4" ? PrunePattern::k2of4 : PrunePattern::kUnstructured;
  BATON_CHECK(plan.pattern != PrunePattern::k2of4 || options.prune == 0.5,
              "--pattern 2:4 keeps 2 of every 4 weights: --prune must be 0.5, got {}",
              options.prune);
  BATON_CHECK(!source.state().config.is_null(),
              "{}: the checkpoint stores no config to compress the model of", source.step_dir());
  const std::string& out_dir = options.output;
  BATON_CHECK(!fs::exists(out_dir) || (fs::is_directory(out_dir) && fs::is_empty(out_dir)),
              "{}: exists and is not an empty directory (baton compress writes a new output "
              "directory and overwrites nothing)",
              out_dir);
  Config config = ParseConfigString(source.state().config.dump(2),
                                    source.step_dir() + "/state.json", options.overrides);
  const ModelDims dims = DimsOf(config.model);
  plan.graph = GraphOf(config.model);
  source.CheckCompatible(dims, plan.graph);
  plan.source_config = config;
  if (options.int8) config.model.weights = WeightFormat::kInt8;
  BATON_CHECK((!options.int8 && !plan.prune) ||
                  (!dims.shares() && dims.low_rank_attn == 0 && dims.low_rank_mlp == 0),
              "{}: --int8 and --prune need a dense, unshared model; this one is {}",
              source.step_dir(), ToString(dims));
  if (plan.low_rank) {
    BATON_CHECK(dims.low_rank_attn == 0 && dims.low_rank_mlp == 0,
                "{}: the model is low-rank already ({})", source.step_dir(), ToString(dims));
    BATON_CHECK(options.low_rank <= config.model.width,
                "--low-rank {}: a block matrix's rank is at most model.width {}", options.low_rank,
                config.model.width);
    if (config.model.preset != ModelPreset::kMlp) config.model.low_rank_attn = options.low_rank;
    // Experts stay dense (model.low_rank.mlp is refused with model.moe): attention only there.
    if (config.model.moe.num_experts == 0) config.model.low_rank_mlp = options.low_rank;
  }
  config.output.dir = out_dir;
  config.prune = PruneConfig{};  // what the result holds, not how to train it
  plan.config = std::move(config);
  return plan;
}

// Builds the compressed model on one host process holding every layer (INT8 params quantise as
// they load), writes it to options.output with its config.yaml, and measures every matrix.
std::vector<MatrixResult> WriteCompressed(const CompressOptions& options,
                                          const CheckpointReader& source,
                                          const CompressPlan& plan) {
  const Config& config = plan.config;
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, config.device.threads);
  const DType dtype = config.precision.dtype;
  const ModelDims out_dims = DimsOf(config.model);
  const std::vector<LayerSpec>& graph = plan.graph;
  StageModel model(graph, out_dims, {{0, static_cast<int>(graph.size()) - 1}}, /*stage=*/0,
                   /*num_stages=*/1, ChunkLayout::kLoop, *backend, dtype, dtype, config.train.seed,
                   options.int8,
                   /*inference=*/true);
  if (plan.prune) AllocatePruneMasks(*backend, model.params());
  const std::vector<LayerTensors> tensors = CheckpointTensors(model, nullptr);
  std::vector<MatrixResult> matrices;
  if (plan.low_rank) {
    matrices = FactorMatrices(source, model, options.low_rank, *backend);
  } else {
    source.LoadLayers(tensors, *backend);
  }
  if (plan.prune) {
    for (Param* p : model.params()) {
      if (!p->mask.defined()) continue;
      const std::vector<float> w = HostValues(*backend, p->value);
      const std::vector<uint8_t> keep =
          MagnitudeMask(w.data(), p->value.size(0), p->value.size(1), options.prune, plan.pattern);
      backend->Copy(Tensor::Wrap(const_cast<uint8_t*>(keep.data()), p->mask.shape(), DType::kU8),
                    p->mask);
      backend->ApplyMask(p->value, p->mask);
      backend->Synchronize();
    }
  }
  if (!plan.low_rank) matrices = MeasureMatrices(source, tensors, *backend);

  const std::string& out_dir = options.output;
  MakeDirectories(out_dir);
  const CheckpointWriter writer(CheckpointsRoot(out_dir));
  std::vector<CheckpointFileEntry> entries = writer.WriteLayers(
      source.step(), /*rank=*/0, tensors, *backend, CheckpointContents::kWeightsOnly);
  TrainingState state = source.state();
  state.config = ToJson(config);
  writer.WriteManifest(source.step(), std::move(entries), state, out_dims, graph);
  WriteFileAtomically((fs::path(out_dir) / "config.yaml").string(), ToYaml(config));
  return matrices;
}

// "INT8 weights: 12 matrices, A -> B bytes (0.25x); relative error ...".
void PrintMatrices(const CompressOptions& options, const CompressPlan& plan,
                   const std::vector<MatrixResult>& matrices, std::ostream& out) {
  int64_t before = 0, after = 0, zeros = 0, elements = 0;
  double worst = 0, mean = 0;
  std::string worst_name;
  for (const MatrixResult& m : matrices) {
    before += m.bytes_before;
    after += m.bytes_after;
    zeros += m.zeros;
    elements += m.elements;
    mean += m.relative_error / static_cast<double>(matrices.size());
    if (m.relative_error >= worst) {
      worst = m.relative_error;
      worst_name = m.name;
    }
  }
  const double ratio = before > 0 ? static_cast<double>(after) / static_cast<double>(before) : 0.0;
  if (options.int8) {
    out << fmt::format("INT8 weights: {} matrices, {} -> {} bytes ({:.3f}x)", matrices.size(),
                       before, after, ratio);
  } else if (plan.low_rank) {
    out << fmt::format("low rank {}: {} matrices, {} -> {} bytes ({:.3f}x)", options.low_rank,
                       matrices.size(), before, after, ratio);
  } else {
    out << fmt::format("pruned ({}): {} matrices, {:.2f}% zeros, {} -> {} bytes stored ({:.3f}x)",
                       Name(plan.pattern), matrices.size(),
                       100.0 * static_cast<double>(zeros) / static_cast<double>(elements), before,
                       after, ratio);
  }
  out << fmt::format("; relative error ||W - W'||/||W|| mean {:.5f}, max {:.5f} ({})\n", mean,
                     worst, worst_name);
}

// The held-out loss before and after, each through `baton eval` on local workers; a note first
// when the run that wrote the source trained on that data.
void PrintEvalLosses(const CheckpointReader& source, const CompressPlan& plan,
                     const std::string& out_dir, std::ostream& out) {
  const Config& config = plan.config;
  // The held-out data must be held out from the run that trained the checkpoint, or the losses
  // measure memory, not generalisation: say so when it was not.
  const DataConfig trained =
      ParseConfigString(source.state().config.dump(2), source.step_dir() + "/state.json", {}).data;
  const DataConfig& now = config.data;
  const bool tail_trained = now.eval_path.empty() && now.path == trained.path &&
                            trained.eval_path.empty() && trained.eval_fraction < now.eval_fraction;
  const bool file_trained = !now.eval_path.empty() && now.eval_path == trained.path;
  if (tail_trained || file_trained) {
    out << fmt::format(
        "note: the run that wrote {} trained on this eval data ({}), so both losses below are "
        "on seen data; evaluate on held-out data (data.eval_path) for a fair comparison\n",
        source.step_dir(),
        tail_trained ? fmt::format("the last {:g}% of {}, its data.eval_fraction was {:g}",
                                   100 * now.eval_fraction, now.path, trained.eval_fraction)
                     : fmt::format("data.eval_path {} was its data.path", now.eval_path));
  }
  const std::string config_path = (fs::path(out_dir) / "config.yaml").string();
  const Config& trained_config = plan.source_config;
  const double loss_before =
      EvalLoss(config_path,
               {fmt::format("model.weights={}", Name(trained_config.model.weights)),
                fmt::format("model.low_rank.attn={}", trained_config.model.low_rank_attn),
                fmt::format("model.low_rank.mlp={}", trained_config.model.low_rank_mlp)},
               source.step_dir());
  const double loss_after = EvalLoss(config_path, {}, out_dir);
  out << fmt::format("eval loss: {:.6f} -> {:.6f} ({:+.3f}%)\n", loss_before, loss_after,
                     100.0 * (loss_after - loss_before) / loss_before);
}

}  // namespace

int CompressCommand(const CompressOptions& options, std::ostream& out) {
  const CheckpointReader source = CheckpointReader::Open(options.checkpoint);
  const CompressPlan plan = PlanCompression(options, source);
  const std::vector<MatrixResult> matrices = WriteCompressed(options, source, plan);
  const std::string& out_dir = options.output;
  const CheckpointReader written = CheckpointReader::Open(out_dir);

  PrintMatrices(options, plan, matrices, out);
  const uint64_t source_bytes = CheckpointBytes(source), written_bytes = CheckpointBytes(written);
  out << fmt::format("checkpoint: {} -> {} bytes ({:.3f}x; weights only, no optimizer state)\n",
                     source_bytes, written_bytes,
                     static_cast<double>(written_bytes) / static_cast<double>(source_bytes));
  if (!options.eval) {
    out << "eval loss: not measured (--no-eval)\n";
  } else if (!HasEvalData(plan.config.data)) {
    out << "eval loss: not measured (the config has no data.eval_path or data.eval_fraction; "
           "--set one)\n";
  } else {
    PrintEvalLosses(source, plan, out_dir, out);
  }
  const std::string config_path = (fs::path(out_dir) / "config.yaml").string();
  out << fmt::format(
      "wrote {} (step {}): baton eval {} --resume {}; baton generate {}; baton export {} DIR\n",
      out_dir, source.step(), config_path, out_dir, out_dir, out_dir);
  if (plan.low_rank) {
    out << fmt::format("train on from it: baton run {} --set model.init_from={}\n", config_path,
                       out_dir);
  }
  return 0;
}

}  // namespace baton
