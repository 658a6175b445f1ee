// The sublayers' shared parameter definitions and views (see sublayer.h).
#include "model/sublayer.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace baton {

SublayerSource SourceOf(const ModelDims& dims, bool shared, int layer_index, int block_index) {
  if (!shared || !dims.shares()) return {fmt::format("h.{}.", block_index), -1};
  const int leader = dims.share_leader(block_index);
  return {fmt::format("h.{}.", leader), layer_index - (block_index - leader)};
}

bool BlocksSplitOver(const std::vector<LayerSpec>& graph, const ModelDims& dims, int tensor) {
  for (const LayerSpec& spec : graph) {
    for (const auto& sublayer : SublayersOf(spec.kind, dims, spec.block_index)) {
      if (!sublayer->TensorSplitProblem(tensor).empty()) return false;
    }
  }
  return true;
}

int64_t ParamCount(const Sublayer& sublayer) {
  std::vector<ParamDef> defs;
  sublayer.AppendDefs(defs, SublayerSource{});
  int64_t count = 0;
  for (const ParamDef& def : defs) count += NumElements(def.shape);
  return count;
}

namespace model_ops {
namespace {

Param* Find(std::vector<Param>& params, const std::string& name) {
  for (Param& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace

// At rank r > 0 each factor is N(0, sqrt(std / sqrt(r))^2), so that their product's entries have
// the dense weight's std.
void AppendLinearDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                      const std::string& name, int64_t in, int64_t out, bool output_projection,
                      int low_rank, int num_layers, bool bias, const LinearCut& cut) {
  const bool columns = cut.kind == LinearCut::kColumns;
  const std::string base = source.prefix + name;
  if (low_rank == 0) {
    defs.push_back({base + ".weight",
                    {in, out},
                    output_projection ? ParamInit::kOutputProjection : ParamInit::kNormal,
                    0.0,
                    source.source_layer,
                    columns ? TensorSplit{1, cut.sections} : TensorSplit{0, {in}}});
  } else {
    const double dense_std = output_projection ? OutputProjectionStd(num_layers) : kInitStd;
    const double std = std::sqrt(dense_std / std::sqrt(static_cast<double>(low_rank)));
    defs.push_back(
        {base + ".weight_u", {in, low_rank}, ParamInit::kNormalStd, std, source.source_layer});
    defs.push_back(
        {base + ".weight_v", {low_rank, out}, ParamInit::kNormalStd, std, source.source_layer});
  }
  if (bias) {
    defs.push_back({base + ".bias",
                    {out},
                    ParamInit::kZeros,
                    0.0,
                    source.source_layer,
                    columns ? TensorSplit{0, cut.sections} : TensorSplit{}});
  }
}

void AppendNormDefs(std::vector<ParamDef>& defs, const SublayerSource& source,
                    const std::string& name, const ModelDims& dims) {
  const int64_t c = dims.width;
  defs.push_back(
      {source.prefix + name + ".weight", {c}, ParamInit::kOnes, 0.0, source.source_layer});
  if (dims.spec().norm_bias()) {
    defs.push_back(
        {source.prefix + name + ".bias", {c}, ParamInit::kZeros, 0.0, source.source_layer});
  }
}

Norm NormView(std::vector<Param>& params, const std::string& base, const ModelDims& dims) {
  Norm norm{Find(params, base + ".weight"), Find(params, base + ".bias"), dims.spec().rms_norm(),
            dims.norm_eps};
  BATON_CHECK(norm.weight != nullptr && (norm.rms || norm.bias != nullptr), "no norm {}", base);
  return norm;
}

Linear LinearView(std::vector<Param>& params, const std::string& base) {
  Linear linear{Find(params, base + ".weight"), Find(params, base + ".bias")};
  if (linear.weight == nullptr) {  // low rank
    linear.weight = Find(params, base + ".weight_u");
    linear.weight_v = Find(params, base + ".weight_v");
    BATON_CHECK(linear.weight_v != nullptr, "linear {} has weight_u but no weight_v", base);
  }
  BATON_CHECK(linear.weight != nullptr, "no linear {}", base);
  return linear;
}

void MarkSequencePartial(const Norm& norm, const TensorGroup* tensor) {
  if (!SequenceParallel(tensor)) return;
  norm.weight->tensor_partial_grad = true;
  if (norm.bias != nullptr) norm.bias->tensor_partial_grad = true;
}

void AppendWeightMatrices(const Linear& linear, std::vector<Param*>& out) {
  out.push_back(linear.weight);
  if (linear.weight_v != nullptr) out.push_back(linear.weight_v);
}

}  // namespace model_ops
}  // namespace baton
