// FlightRecorder: a rank's last engine actions and waits, kept where they survive the process
// (docs/operations.md, "Flight recorder"). Every status change of the engine (an action it runs,
// a peer it waits on, the step end's exchanges, idle) closes the open entry and opens the next,
// with the step, the micro-batch, the peer's world rank and wall-clock start and end. The last
// kFlightRecords entries live in a file the recorder maps (MAP_SHARED), so what the process had
// written is in the file however it ends: exited, killed, or frozen by a hang. After a failure the
// launcher reads every rank's file (ReadFlightRecord), writes them together to
// output.dir/flight_recorder.json and prints each rank's open entry and the likely culprit
// (SummariseFlightRecords).
//
// Thread safety: Record and StartStep from any thread (a mutex); one writer process per file.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace baton {

inline constexpr int kFlightRecords = 256;

struct FlightEntry {
  uint64_t seq = 0;  // 1, 2, ...: the order entries were opened in
  int64_t step = 0;
  std::string what;      // "F", "RECV_F", "ALLREDUCE", "STEP" (a step begun, no action yet), ...
  int microbatch = -1;   // -1 when not about a micro-batch
  int peer_rank = -1;    // the world rank waited on, -1 when none
  int64_t bytes = 0;     // of the message waited on, 0 when none
  int64_t start_us = 0;  // wall clock, microseconds since the epoch
  int64_t end_us = 0;    // 0 while open
};

// The recorded file of one rank.
struct FlightRecord {
  int rank = -1;
  std::vector<FlightEntry> entries;  // oldest first
};

// output.dir/flight_recorder/rank-<rank>.bin
std::string FlightRecorderPath(const std::string& output_dir, int rank);

class FlightRecorder {
 public:
  // Maps a fresh `path` (its directory made if missing); throws baton::Error if it cannot.
  FlightRecorder(const std::string& path, int rank);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Closes the open entry; opens "STEP" for `step` (open until the first action of the step).
  void StartStep(int64_t step);
  // Closes the open entry and opens (what, microbatch, peer_rank, bytes); "idle" opens nothing.
  void Record(const std::string& what, int microbatch, int peer_rank, int64_t bytes = 0);

 private:
  void OpenLocked(const std::string& what, int microbatch, int peer_rank, int64_t bytes);
  void CloseLocked();

  std::mutex mutex_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  int64_t step_ = 0;
  std::optional<uint64_t> open_;  // the open entry's seq
};

// Reads a recorder's file; nullopt if it is missing or not one.
std::optional<FlightRecord> ReadFlightRecord(const std::string& path);

// {"ranks": [{"rank": 0, "entries": [{"seq", "step", "what", "microbatch", "peer_rank", "bytes",
// "start_us", "end_us"}, ...]}, ...]}: flight_recorder.json's body.
nlohmann::json FlightRecordsJson(const std::vector<FlightRecord>& records);

// Per rank the entry it is in (its action, micro-batch, the peer it waits for, for how long at
// `now_us`) or its last one, then the likely culprit: a rank others wait for that waits for no
// peer itself. `describe(rank)` names ranks ("stage 1 (rank 1)").
std::string SummariseFlightRecords(const std::vector<FlightRecord>& records, int64_t now_us,
                                   const std::function<std::string(int)>& describe);

}  // namespace baton
