// `baton compress CHECKPOINT OUT --int8 | --prune S [--pattern 2:4] | --low-rank R`: a trained
// checkpoint made smaller.
//
// --int8 quantises the weight matrices of every block (attention c_attn, c_proj; MLP c_fc,
// c_proj) per output channel: INT8 codes and one f32 scale per column (kernels/quantize.h);
// embeddings, LayerNorms and biases keep their dtype. --prune S zeroes the fraction S of those
// matrices' weights by magnitude (model/prune.h; --pattern 2:4 keeps 2 of every 4), stored sparsely
// (checkpoint/sparse.h); the model stays dense. --low-rank R factors every block matrix W (in,
// out) by truncated SVD into U (in, R) V (R, out) (kernels/low_rank.h): a model with
// model.low_rank.attn and .mlp = R, which trains on (`model.init_from: OUT`, docs/config.md) as
// well as it evaluates. OUT becomes an output directory holding
// - checkpoints/step-<N>/ (a weights-only checkpoint: no optimizer state, docs/checkpoints.md),
// - config.yaml: the checkpoint's config with output.dir: OUT (and model.weights: int8, or
//   model.low_rank.*: R),
// so `baton eval OUT/config.yaml --resume OUT`, `baton generate OUT` and `baton export OUT DIR`
// read it. OUT must not exist yet or be empty; nothing is written outside it.
//
// Printed: the blocks' weight bytes and the checkpoint's bytes before and after, each matrix's
// relative Frobenius error ||W - W'|| / ||W|| (the largest, and the mean), and, when the
// config has held-out data (data.eval_path or data.eval_fraction), the eval loss of the
// checkpoint and of the INT8 result, each a `baton eval` on local worker processes with the
// stored partition.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace baton {

struct CompressOptions {
  std::string checkpoint;  // a step dir, checkpoints root or output dir
  std::string output;      // the output directory to create
  bool int8 = false;
  double prune = 0.0;                    // sparsity; 0 = no pruning
  int64_t low_rank = 0;                  // rank; 0 = no factorisation
  std::string pattern = "unstructured";  // or "2:4"
  bool eval = true;                      // measure the eval loss before and after
  std::vector<std::string> overrides;    // --set for the stored config (e.g. data.eval_path=...)
};

// Writes OUT; returns the exit code.
int CompressCommand(const CompressOptions& options, std::ostream& out);

}  // namespace baton
