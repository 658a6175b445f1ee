#include "coordinator/coordinator_kv_store.h"

namespace baton {

void CoordinatorKvStore::Set(const std::string& key, const std::string& value) {
  client_.KvSet(key, value);
}

std::string CoordinatorKvStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  return client_.KvGet(key, timeout);
}

void CoordinatorKvStore::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
  client_.KvWait(keys, timeout);
}

}  // namespace baton
