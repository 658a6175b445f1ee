// Stash: the tensors one layer keeps between forward and backward (see layer.h).
#include "model/layer.h"

#include "core/error.h"

namespace baton {

void Stash::Put(std::string name, Tensor t) {
  BATON_CHECK(!Has(name), "stash already holds '{}'", name);
  entries_.emplace_back(std::move(name), std::move(t));
}

const Tensor& Stash::Get(const std::string& name) const {
  for (const auto& [key, tensor] : entries_) {
    if (key == name) return tensor;
  }
  BATON_FAIL("stash holds no '{}' (holds {} entries; did Forward run?)", name, entries_.size());
}

bool Stash::Has(const std::string& name) const {
  for (const auto& entry : entries_) {
    if (entry.first == name) return true;
  }
  return false;
}

void Stash::Clear() { entries_.clear(); }

std::vector<std::string> Stash::names() const {
  std::vector<std::string> out;
  for (const auto& entry : entries_) out.push_back(entry.first);
  return out;
}

int64_t Stash::bytes() const {
  int64_t total = 0;
  for (const auto& entry : entries_) {
    if (entry.second.defined()) total += static_cast<int64_t>(entry.second.nbytes());
  }
  return total;
}

namespace {

// Positions [begin, end) of a (1,S,C) tensor, as a contiguous (1,end-begin,C) view.
Tensor Positions(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t width = t.size(2);
  return t.View({t.size(1), width}).Slice(0, begin, end).View({1, end - begin, width});
}

}  // namespace

void DropOldest(Backend& backend, KvCache& cache, int64_t n) {
  if (n == 0 || !cache.keys.defined()) return;  // a layer without attention holds none
  BATON_CHECK(n > 0 && n <= cache.length, "cannot drop {} of a key-value cache's {} positions", n,
              cache.length);
  BATON_CHECK(cache.keys.size(0) == 1, "a key-value cache slides for one sequence, not {}",
              cache.keys.size(0));
  const int64_t kept = cache.length - n;
  for (Tensor* rows : {&cache.keys, &cache.values}) {
    if (kept == 0) break;
    // Source and destination overlap: through a copy.
    Tensor moved = Tensor::Empty(backend.allocator(), {1, kept, rows->size(2)}, rows->dtype(),
                                 MemCategory::kWorkspace);
    backend.Copy(Positions(*rows, n, cache.length), moved);
    Tensor front = Positions(*rows, 0, kept);
    backend.Copy(moved, front);
  }
  cache.length = kept;
  cache.first += n;
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&keys, &values}) {
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  }
  return total;
}

Tensor Layer::ForwardCached(const Tensor& /*x*/, const MicroBatch& /*batch*/, int64_t /*start*/,
                            KvCache& /*cache*/) {
  BATON_FAIL("{} cannot run with a key-value cache (the embedding, blocks and head can)", name());
}

}  // namespace baton
