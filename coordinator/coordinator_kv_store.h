// The coordinator's key-value store as the transports' rendezvous (comm/kv_store.h): Gloo's
// address exchange and NCCL's unique ids go through the job's coordinator.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "comm/kv_store.h"
#include "coordinator/coordinator_client.h"

namespace baton {

// Through a client the caller owns (it must outlive this).
class CoordinatorKvStore final : public KvStore {
 public:
  explicit CoordinatorKvStore(CoordinatorClient& client) : client_(client) {}
  void Set(const std::string& key, const std::string& value) override;
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override;
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 private:
  CoordinatorClient& client_;
};

}  // namespace baton
