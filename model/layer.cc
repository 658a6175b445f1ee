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

// Slots [begin, end) of a (1,S,C) tensor, as a contiguous (1,end-begin,C) view.
Tensor Slots(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t width = t.size(2);
  return t.View({t.size(1), width}).Slice(0, begin, end).View({1, end - begin, width});
}

}  // namespace

KvCache KvCache::Row(int64_t row) const {
  if (length.empty()) return KvCache();
  BATON_CHECK(row >= 0 && row < rows(), "row {} of a key-value cache of {} rows", row, rows());
  const auto b = static_cast<size_t>(row);
  return KvCache{
      keys.Slice(0, row, row + 1), values.Slice(0, row, row + 1), {length[b]}, {first[b]}};
}

void KvCache::Absorb(int64_t row, const KvCache& view) {
  if (length.empty()) return;
  BATON_CHECK(row >= 0 && row < rows() && view.rows() == 1,
              "row {} of a key-value cache of {} rows from a view of {}", row, rows(), view.rows());
  length[static_cast<size_t>(row)] = view.length[0];
  first[static_cast<size_t>(row)] = view.first[0];
}

void DropOldest(Backend& backend, KvCache& cache, int64_t row, int64_t n) {
  if (n == 0 || !cache.keys.defined()) return;  // a layer without attention holds none
  BATON_CHECK(row >= 0 && row < cache.rows(), "row {} of a key-value cache of {} rows", row,
              cache.rows());
  int64_t& length = cache.length[static_cast<size_t>(row)];
  BATON_CHECK(n > 0 && n <= length, "cannot drop {} of a key-value cache row's {} positions", n,
              length);
  const int64_t kept = length - n;
  for (const Tensor* all : {&cache.keys, &cache.values}) {
    if (kept == 0) break;
    const Tensor rows = all->Slice(0, row, row + 1);
    // Source and destination overlap: through a copy.
    Tensor moved = Tensor::Empty(backend.allocator(), {1, kept, rows.size(2)}, rows.dtype(),
                                 MemCategory::kWorkspace);
    backend.Copy(Slots(rows, n, length), moved);
    Tensor front = Slots(rows, 0, kept);
    backend.Copy(moved, front);
  }
  length = kept;
  cache.first[static_cast<size_t>(row)] += n;
}

int64_t KvCache::bytes() const {
  int64_t total = 0;
  for (const Tensor* t : {&keys, &values}) {
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  }
  return total;
}

Tensor Layer::ForwardCached(const Tensor& /*x*/, const MicroBatch& /*batch*/,
                            const std::vector<int64_t>& /*starts*/, KvCache& /*cache*/) {
  BATON_FAIL("{} cannot run with a key-value cache (the embedding, blocks and head can)", name());
}

}  // namespace baton
