// Fault injection for the integration tests (tests/fault_injection.h).
#include "tests/fault_injection.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/units.h"

namespace baton {

void MaybeStall(int rank, int64_t step) {
  const char* spec = std::getenv("BATON_TEST_STALL");
  if (spec == nullptr) return;
  int stall_rank = -1;
  long long stall_step = -1;
  if (std::sscanf(spec, "%d:%lld", &stall_rank, &stall_step) != 2) return;
  if (stall_rank != rank || stall_step != step) return;
  spdlog::warn("BATON_TEST_STALL: stage {} stalls at step {}", rank, step);
  std::this_thread::sleep_for(std::chrono::hours(1));
}

void MaybeHoldCheckpoint(int rank, int64_t step) {
  const char* spec = std::getenv("BATON_TEST_HOLD_CHECKPOINT");
  if (spec == nullptr || rank != 0) return;
  const std::string text = spec;
  const size_t colon = text.find(':');
  BATON_CHECK(colon != std::string::npos, "BATON_TEST_HOLD_CHECKPOINT={}: not STEP:DIR", text);
  if (std::stoll(text.substr(0, colon)) != step) return;
  spdlog::warn("BATON_TEST_HOLD_CHECKPOINT: rank 0 holds the checkpoint of step {} here", step);
  WriteFileAtomically(text.substr(colon + 1) + "/held", "held\n");
  std::this_thread::sleep_for(std::chrono::hours(1));
}

namespace {

class MeshGateStore final : public KvStore {
 public:
  MeshGateStore(KvStore& inner, std::string dir, std::string prefix, int rank)
      : inner_(inner), dir_(std::move(dir)), prefix_(std::move(prefix) + "/"), rank_(rank) {}
  void Set(const std::string& key, const std::string& value) override {
    inner_.Set(key, value);
    if (key == prefix_ + std::to_string(rank_)) {
      WriteFileAtomically(fmt::format("{}/published-{}", dir_, rank_), value);
    }
  }
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) override {
    Gate(key, timeout);
    return inner_.Get(key, timeout);
  }
  void Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const std::string& key : keys) Gate(key, timeout);
    inner_.Wait(keys, timeout);
  }

 private:
  void Gate(const std::string& key, std::chrono::milliseconds timeout) {
    const std::string rest =
        key.substr(0, prefix_.size()) == prefix_ ? key.substr(prefix_.size()) : "";
    const bool peer_address = !rest.empty() && rest != std::to_string(rank_) &&
                              rest.find_first_not_of("0123456789") == std::string::npos;
    if (!peer_address) return;
    const auto deadline = Clock::now() + timeout;
    while (!FileExists(dir_ + "/open")) {
      BATON_CHECK(Clock::now() < deadline, "BATON_TEST_MESH_GATE: {}/open did not appear", dir_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  KvStore& inner_;
  const std::string dir_;
  const std::string prefix_;
  const int rank_;
};

}  // namespace

std::unique_ptr<KvStore> MaybeGateMesh(KvStore& inner, const std::string& prefix, int rank) {
  const char* gate = std::getenv("BATON_TEST_MESH_GATE");
  if (gate == nullptr) return nullptr;
  return std::make_unique<MeshGateStore>(inner, gate, prefix, rank);
}

FaultHooks EnvironmentFaultHooks() {
  FaultHooks hooks;
  hooks.at_step_start = MaybeStall;
  hooks.after_checkpoint_file = MaybeHoldCheckpoint;
  hooks.mesh_store = MaybeGateMesh;
  return hooks;
}

}  // namespace baton
