#include "launcher/generate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "kernels/backend_factory.h"
#include "model/from_config.h"
#include "worker/stage_model.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {

// SplitMix64: a small generator whose sequence is the same on every platform and compiler.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t state_;
};

// One token drawn from `logits` as the file comment says.
int Sample(std::vector<float> logits, double temperature, int top_k, SplitMix64& rng) {
  const int v = static_cast<int>(logits.size());
  std::vector<int> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by token id, so the order never depends on the sort.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
  });
  if (temperature == 0.0) return order.front();
  const int k = top_k > 0 ? std::min(top_k, v) : v;
  const double top = logits[static_cast<size_t>(order.front())];
  std::vector<double> weights(static_cast<size_t>(k));
  double sum = 0;
  for (int i = 0; i < k; ++i) {
    weights[static_cast<size_t>(i)] =
        std::exp((logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - top) / temperature);
    sum += weights[static_cast<size_t>(i)];
  }
  double u = rng.Uniform() * sum;
  for (int i = 0; i < k; ++i) {
    u -= weights[static_cast<size_t>(i)];
    if (u < 0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(k - 1)];
}

}  // namespace

std::string Generate(const GenerateOptions& options) {
  BATON_CHECK(options.tokens >= 0, "--tokens {}: must be >= 0", options.tokens);
  BATON_CHECK(options.temperature >= 0 && std::isfinite(options.temperature),
              "--temperature {}: must be >= 0", options.temperature);
  BATON_CHECK(options.top_k >= 0, "--top-k {}: must be >= 0", options.top_k);
  const CheckpointReader checkpoint = CheckpointReader::Open(options.checkpoint);
  const Config config = ParseConfigString(checkpoint.state().config.dump(2),
                                          checkpoint.step_dir() + "/state.json", options.overrides);
  const ModelDims dims = DimsOf(config.model);
  const std::vector<LayerSpec> graph = GraphOf(config.model);
  checkpoint.CheckCompatible(dims, graph);
  std::optional<Tokenizer> tokenizer;
  if (!config.data.tokenizer.empty()) {
    tokenizer.emplace(Tokenizer::Load(config.data.tokenizer));  // parsing checked it fits
  } else {
    BATON_CHECK(dims.vocab_size == 256,
                "this model has {} tokens and its config no data.tokenizer; generate reads and "
                "prints bytes, which needs a byte-level model (vocab_size 256)",
                dims.vocab_size);
  }
  // Only the tokenizer's ids are drawn: rows past them (a vocabulary padded to a round size)
  // have no text.
  const int64_t drawn_vocab = tokenizer.has_value() ? tokenizer->vocab_size() : dims.vocab_size;

  MemoryLedger ledger;
  std::unique_ptr<Backend> backend =
      MakeBackend(DeviceForLocalRank(config.device.type, 0), ledger, config.device.threads);
  const DType dtype = config.precision.dtype;
  const int num_layers = static_cast<int>(graph.size());
  // Inference: no optimizer state (loading passes over what the checkpoint stores of it).
  const bool int8_weights = config.model.weights == WeightFormat::kInt8;
  StageModel model(graph, dims, {{0, num_layers - 1}}, /*rank=*/0, /*num_stages=*/1, *backend,
                   dtype, dtype, config.train.seed, int8_weights, /*inference=*/true);
  checkpoint.LoadLayers(CheckpointTensors(model, nullptr), *backend);
  spdlog::info("generating from {} (step {}, {}{} on {})", checkpoint.step_dir(), checkpoint.step(),
               ToString(dims), int8_weights ? ", INT8 weights" : "", backend->device().ToString());

  // An empty prompt starts a new document: <|endoftext|> (as between training files) when the
  // tokenizer has it, else a newline.
  std::vector<int32_t> tokens;
  if (tokenizer.has_value()) {
    const std::optional<uint32_t> end_of_text = tokenizer->TokenId(kEndOfText);
    std::vector<uint32_t> ids = tokenizer->Encode(options.prompt);
    if (ids.empty())
      ids = end_of_text.has_value() ? std::vector{*end_of_text} : tokenizer->Encode("\n");
    tokens.assign(ids.begin(), ids.end());
    spdlog::info("prompt: {} tokens ({}, {} tokens)", tokens.size(),
                 tokenizer->files().front().path, tokenizer->vocab_size());
  } else {
    tokens.assign(options.prompt.begin(), options.prompt.end());
    for (int32_t& t : tokens) t &= 0xff;  // bytes, whatever char's signedness
    if (tokens.empty()) tokens.push_back('\n');
  }
  SplitMix64 rng(options.seed);
  std::vector<uint32_t> generated;
  std::vector<Layer*> layers;
  for (auto& [index, layer] : model.layers()) layers.push_back(layer);
  for (int n = 0; n < options.tokens; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(tokens.size()), dims.context);
    std::vector<int32_t> window(tokens.end() - t, tokens.end());
    std::vector<int32_t> targets(static_cast<size_t>(t), 0);
    MicroBatch batch;
    batch.tokens =
        Tensor::Empty(backend->allocator(), {1, t}, DType::kI32, MemCategory::kActivations);
    batch.targets =
        Tensor::Empty(backend->allocator(), {1, t}, DType::kI32, MemCategory::kActivations);
    backend->Copy(Tensor::Wrap(window.data(), {1, t}, DType::kI32), batch.tokens);
    backend->Copy(Tensor::Wrap(targets.data(), {1, t}, DType::kI32), batch.targets);
    std::vector<Stash> stashes(layers.size());
    Tensor x;
    for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->Forward(x, batch, stashes[i]);
    // The head stashes logits (T, V): the last row predicts the next token.
    const Tensor& logits = stashes.back().Get("logits");
    std::vector<char> row(static_cast<size_t>(dims.vocab_size) * SizeOf(logits.dtype()));
    const Tensor last = logits.Slice(0, t - 1, t);
    Tensor host = Tensor::Wrap(row.data(), last.shape(), logits.dtype());
    backend->Copy(last, host);
    backend->Synchronize();
    std::vector<float> values(static_cast<size_t>(dims.vocab_size));
    ConvertFloats(row.data(), logits.dtype(), values.data(), DType::kF32, values.size());
    values.resize(static_cast<size_t>(drawn_vocab));
    const int next = Sample(std::move(values), options.temperature, options.top_k, rng);
    tokens.push_back(next);
    generated.push_back(static_cast<uint32_t>(next));
  }
  if (tokenizer.has_value()) return tokenizer->Decode(generated);
  std::string bytes;  // one byte per token
  for (const uint32_t id : generated) bytes.push_back(static_cast<char>(id));
  return bytes;
}

int GenerateCommand(const GenerateOptions& options, std::ostream& out) {
  const std::string text = Generate(options);
  out << options.prompt << text << "\n";
  return 0;
}

}  // namespace baton
