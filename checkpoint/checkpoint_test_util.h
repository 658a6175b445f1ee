// Helpers for the checkpoint and safetensors tests (test-only): a scratch directory, tiny GPT
// stage models with their optimizers (the worker's, handed over as named tensors the way the worker
// does), deterministic fake training, and byte snapshots.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/random.h"
#include "core/temp_dir.h"
#include "kernels/backend.h"
#include "model/graph.h"
#include "worker/optimizer.h"
#include "worker/stage_model.h"
#include "worker/stage_tensors.h"

namespace baton::checkpoint_test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
using baton::test_util::TempDir;

// V=11, maxT=5, L=2, NH=2, C=8: embedding, block.0, block.1, head.
inline ModelDims TinyDims() { return {11, 5, 2, 2, 8}; }

// One rank's share of a tiny GPT: its layers and an AdamW over them.
struct Rank {
  std::unique_ptr<StageModel> model;
  std::unique_ptr<Optimizer> optimizer;

  // What the worker hands checkpoint/ (worker/stage_tensors.h): the layers with their optimizer
  // state, and the params alone (GPT-2 import and export).
  std::vector<LayerTensors> checkpoint_tensors() const {
    return CheckpointTensors(*model, optimizer.get());
  }
  std::vector<ParamTensors> param_tensors() const { return ParamTensorsOf(model->params()); }
};

class Fixture {
 public:
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, 1);
  ModelDims dims = TinyDims();
  std::vector<LayerSpec> graph = GptGraph(dims);

  // chunk_ranges as in StageModel; `seed` draws the initial weights.
  Rank MakeRank(std::vector<LayerRange> chunk_ranges, int rank, int num_stages,
                DType dtype = DType::kF32, uint64_t seed = 7, bool quantized_state = false) {
    Rank r;
    r.model = std::make_unique<StageModel>(graph, dims, chunk_ranges, rank, num_stages,
                                           ChunkLayout::kLoop, *backend, dtype, dtype, seed);
    AdamWConfig hyper;
    hyper.weight_decay = 0.1f;
    r.optimizer = std::make_unique<Optimizer>(*backend, r.model->params(), hyper, quantized_state);
    return r;
  }
  int last_layer() const { return static_cast<int>(graph.size()) - 1; }
};

// Fake training: step `step` sets every gradient to values drawn from (param name, step), the
// same on every rank for the same name (as the tied wte's all-reduced gradient is), then steps
// AdamW. Runs one step on each rank given.
inline void FakeStep(std::vector<Rank*> ranks, int64_t step) {
  for (Rank* r : ranks) {
    for (Param* p : r->model->params()) {
      Fnv1a64 name_hash;
      name_hash.Update(p->name.data(), p->name.size());
      Rng rng = Rng::ForStream(99, {name_hash.digest(), static_cast<uint64_t>(step)});
      float* g = p->grad.data<float>();
      for (int64_t i = 0; i < p->grad.numel(); ++i) g[i] = static_cast<float>(rng.NextNormal());
    }
    r->optimizer->Step(1e-2f, step, 1.0f);
  }
}

inline std::vector<char> Bytes(const Tensor& t) {
  std::vector<char> out(t.nbytes());
  std::memcpy(out.data(), t.raw(), out.size());
  return out;
}

// Everything a checkpoint must restore for one param: value, master, m, v.
inline std::vector<std::vector<char>> ParamState(Optimizer& optimizer, const Param& p) {
  for (const Optimizer::Slot& slot : optimizer.slots()) {
    if (slot.param->value.raw() != p.value.raw()) continue;
    std::vector<std::vector<char>> state = {Bytes(p.value), Bytes(slot.m), Bytes(slot.v)};
    if (slot.master.defined()) state.push_back(Bytes(slot.master));
    if (slot.quantized()) {
      state.push_back(Bytes(slot.m_absmax));
      state.push_back(Bytes(slot.v_absmax));
    }
    return state;
  }
  ADD_FAILURE() << "no optimizer slot for " << p.name;
  return {};
}

// Finds param `name` of graph layer `layer` among `ranks`.
inline std::pair<Rank*, Param*> FindParam(const std::vector<Rank*>& ranks, int layer,
                                          const std::string& name) {
  for (Rank* r : ranks) {
    for (auto& [index, l] : r->model->layers()) {
      if (index != layer) continue;
      for (Param* p : l->params()) {
        if (p->name == name) return {r, p};
      }
    }
  }
  ADD_FAILURE() << "no param " << name << " in layer " << layer;
  return {nullptr, nullptr};
}

// Every param (tied copies too) and its optimizer state is bitwise equal between two partitions
// of the same graph.
inline void ExpectSameState(const std::vector<Rank*>& a, const std::vector<Rank*>& b) {
  int compared = 0;
  for (Rank* r : a) {
    for (auto& [index, layer] : r->model->layers()) {
      for (Param* p : layer->params()) {
        auto [other_rank, other] = FindParam(b, index, p->name);
        if (other == nullptr) continue;
        EXPECT_EQ(ParamState(*r->optimizer, *p), ParamState(*other_rank->optimizer, *other))
            << "layer " << index << " " << p->name;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
}

inline void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace baton::checkpoint_test
