// Key-value stores for rendezvous (see kv_store.h).
#include "comm/kv_store.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/units.h"

namespace baton {

void MemoryKvStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::string MemoryKvStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  bool found = changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; });
  BATON_CHECK(found, "key '{}' was not set within {:.1f} s", key, Seconds(timeout));
  return values_.at(key);
}

void MemoryKvStore::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  bool found = changed_.wait_for(lock, timeout, [&] {
    for (const auto& key : keys) {
      if (!values_.count(key)) return false;
    }
    return true;
  });
  BATON_CHECK(found, "keys {} were not all set within {:.1f} s", fmt::join(keys, ", "),
              Seconds(timeout));
}

}  // namespace baton
