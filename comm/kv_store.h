// A small key-value store interface for rendezvous (Gloo's address exchange, NCCL's unique ids),
// with an in-memory implementation for tests. The transports see only this interface; the
// coordinator's store implements it above them (coordinator/coordinator_kv_store.h).
//
// Keys are set once per job attempt; Get blocks until the key is set. Implementations are
// thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace baton {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual void Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` is set; throws baton::Error naming the key on timeout.
  virtual std::string Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Blocks until every key is set; throws baton::Error on timeout.
  virtual void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// In-process store: ranks running as threads of one test share one instance.
class MemoryKvStore final : public KvStore {
 public:
  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace baton
