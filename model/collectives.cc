// Each layer kind's collectives: a block's sublayers' (sublayer.h), and the embedding's and the
// head's (embedding.cc, head.cc issue them).
#include "model/collectives.h"

#include "model/sublayer.h"

namespace baton {

void LayerCollectives::Append(const LayerCollectives& other) {
  forward.insert(forward.end(), other.forward.begin(), other.forward.end());
  backward.insert(backward.end(), other.backward.begin(), other.backward.end());
  step_end.insert(step_end.end(), other.step_end.begin(), other.step_end.end());
}

LayerCollectives CollectivesOf(const LayerSpec& spec, const ModelDims& dims,
                               const MicroBatchShape& shape, const TensorLayout& layout) {
  using Kind = TensorCollective::Kind;
  LayerCollectives c;
  if (layout.tensor == 1) return c;
  const int64_t rows = shape.batch_size * shape.seq_len;  // the whole sequence's
  const int64_t activation = rows * dims.width;
  const DType act = shape.act_dtype;
  const bool sp = layout.sequence_parallel;
  const bool norm_bias = dims.spec().norm_bias();
  switch (spec.kind) {
    case LayerKind::kEmbedding:  // each rank's vocabulary rows, summed (or scattered)
      c.forward = {{sp ? Kind::kScatterSequenceSum : Kind::kSum, activation, act}};
      if (sp) c.backward = {{Kind::kGatherSequence, activation, act}};
      break;
    case LayerKind::kBlock:
    case LayerKind::kMlpBlock:
      for (const auto& sublayer : SublayersOf(spec.kind, dims, spec.block_index)) {
        c.Append(sublayer->Collectives(rows, act, layout));
      }
      break;
    case LayerKind::kHead:  // ln_f gathered, the loss's row statistics summed; dln summed back
      if (sp) c.forward.push_back({Kind::kGatherSequence, activation, act});
      c.forward.push_back({Kind::kRowStats, layout.tensor * rows * 3, DType::kF32});
      if (sp) {
        c.backward = {{Kind::kGatherSequence, activation, act},
                      {Kind::kScatterSequenceSum, activation, act}};
        c.step_end.push_back({Kind::kGradientSum, dims.width, DType::kF32});
        if (norm_bias) c.step_end.push_back({Kind::kGradientSum, dims.width, DType::kF32});
      } else {
        c.backward = {{Kind::kSum, activation, act}};
      }
      break;
  }
  return c;
}

}  // namespace baton
