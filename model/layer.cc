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
