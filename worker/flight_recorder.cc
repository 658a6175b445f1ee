// The flight recorder (see flight_recorder.h).
#include "worker/flight_recorder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"

namespace baton {
namespace {

constexpr char kMagic[8] = {'B', 'A', 'T', 'O', 'N', 'F', 'R', '1'};

struct FileHeader {
  char magic[8];
  int32_t rank;
  int32_t capacity;
  uint64_t opened;  // entries opened so far: the last one's seq
  char pad[40];
};
static_assert(sizeof(FileHeader) == 64);

struct FileEntry {
  uint64_t seq;  // written last: 0 while the slot is being filled
  int64_t step;
  int64_t start_us;
  int64_t end_us;
  int32_t microbatch;
  int32_t peer_rank;
  int64_t bytes;
  char what[16];
};
static_assert(sizeof(FileEntry) == 64);

constexpr size_t kFileBytes = sizeof(FileHeader) + kFlightRecords * sizeof(FileEntry);

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

FileHeader* HeaderOf(void* base) { return static_cast<FileHeader*>(base); }
FileEntry* EntryOf(void* base, uint64_t seq) {
  return reinterpret_cast<FileEntry*>(static_cast<char*>(base) + sizeof(FileHeader)) +
         (seq - 1) % kFlightRecords;
}

}  // namespace

std::string FlightRecorderPath(const std::string& output_dir, int rank) {
  return (std::filesystem::path(output_dir) / "flight_recorder" / fmt::format("rank-{}.bin", rank))
      .string();
}

FlightRecorder::FlightRecorder(const std::string& path, int rank) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  // A fresh file, never one found there: whatever is at the name (an earlier record, a planted
  // link) is unlinked, and O_EXCL | O_NOFOLLOW refuse what appears in between.
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC, 0644);
  BATON_CHECK(fd >= 0, "the flight recorder cannot create {}: {}", path, std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(kFileBytes)) != 0) {
    const int code = errno;
    ::close(fd);
    BATON_FAIL("the flight recorder cannot size {}: {}", path, std::strerror(code));
  }
  void* base = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int code = errno;
  ::close(fd);
  BATON_CHECK(base != MAP_FAILED, "the flight recorder cannot map {}: {}", path,
              std::strerror(code));
  base_ = base;
  bytes_ = kFileBytes;
  FileHeader* header = HeaderOf(base_);
  header->rank = rank;
  header->capacity = kFlightRecords;
  header->opened = 0;
  std::memcpy(header->magic, kMagic, sizeof(kMagic));
}

FlightRecorder::~FlightRecorder() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

void FlightRecorder::StartStep(int64_t step) {
  std::lock_guard lock(mutex_);
  CloseLocked();
  step_ = step;
  OpenLocked("STEP", -1, -1, 0);
}

void FlightRecorder::Record(const std::string& what, int microbatch, int peer_rank, int64_t bytes) {
  std::lock_guard lock(mutex_);
  if (open_) {  // the same again (an action resumed after no wait) stays one entry
    const FileEntry* entry = EntryOf(base_, *open_);
    if (entry->microbatch == microbatch && entry->peer_rank == peer_rank &&
        std::string(entry->what, strnlen(entry->what, sizeof(entry->what))) == what) {
      return;
    }
  }
  CloseLocked();
  if (what != "idle") OpenLocked(what, microbatch, peer_rank, bytes);
}

void FlightRecorder::CloseLocked() {
  if (!open_) return;
  EntryOf(base_, *open_)->end_us = NowMicros();
  open_.reset();
}

void FlightRecorder::OpenLocked(const std::string& what, int microbatch, int peer_rank,
                                int64_t bytes) {
  FileHeader* header = HeaderOf(base_);
  const uint64_t seq = header->opened + 1;
  FileEntry* entry = EntryOf(base_, seq);
  entry->seq = 0;
  entry->step = step_;
  entry->start_us = NowMicros();
  entry->end_us = 0;
  entry->microbatch = microbatch;
  entry->peer_rank = peer_rank;
  entry->bytes = bytes;
  std::memset(entry->what, 0, sizeof(entry->what));
  std::memcpy(entry->what, what.data(), std::min(what.size(), sizeof(entry->what) - 1));
  entry->seq = seq;
  header->opened = seq;
  open_ = seq;
}

std::optional<FlightRecord> ReadFlightRecord(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::vector<char> bytes(kFileBytes);
  size_t got = 0;
  while (got < kFileBytes) {
    const ssize_t n = ::read(fd, bytes.data() + got, kFileBytes - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != kFileBytes) return std::nullopt;
  const auto* header = reinterpret_cast<const FileHeader*>(bytes.data());
  if (std::memcmp(header->magic, kMagic, sizeof(kMagic)) != 0 ||
      header->capacity != kFlightRecords) {
    return std::nullopt;
  }
  FlightRecord record;
  record.rank = header->rank;
  const uint64_t last = header->opened;
  const uint64_t first = last > kFlightRecords ? last - kFlightRecords + 1 : 1;
  for (uint64_t seq = first; seq <= last && seq > 0; ++seq) {
    const auto* entry = reinterpret_cast<const FileEntry*>(bytes.data() + sizeof(FileHeader)) +
                        (seq - 1) % kFlightRecords;
    if (entry->seq != seq) continue;  // torn by the process's end mid-write
    FlightEntry out;
    out.seq = entry->seq;
    out.step = entry->step;
    out.what = std::string(entry->what, strnlen(entry->what, sizeof(entry->what)));
    out.microbatch = entry->microbatch;
    out.peer_rank = entry->peer_rank;
    out.bytes = entry->bytes;
    out.start_us = entry->start_us;
    out.end_us = entry->end_us;
    record.entries.push_back(std::move(out));
  }
  return record;
}

nlohmann::json FlightRecordsJson(const std::vector<FlightRecord>& records) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const FlightRecord& record : records) {
    nlohmann::json entries = nlohmann::json::array();
    for (const FlightEntry& e : record.entries) {
      entries.push_back({{"seq", e.seq},
                         {"step", e.step},
                         {"what", e.what},
                         {"microbatch", e.microbatch},
                         {"peer_rank", e.peer_rank},
                         {"bytes", e.bytes},
                         {"start_us", e.start_us},
                         {"end_us", e.end_us}});
    }
    ranks.push_back({{"rank", record.rank}, {"entries", std::move(entries)}});
  }
  return {{"ranks", std::move(ranks)}};
}

namespace {

// "RECV_F mb 3 from rank 2" / "F mb 0" / "STEP 4 begun, no action yet".
std::string DescribeEntry(const FlightEntry& e) {
  if (e.what == "STEP") return fmt::format("step {} begun, no action run yet", e.step);
  std::string text = e.what;
  if (e.microbatch >= 0) text += fmt::format(" mb {}", e.microbatch);
  if (e.peer_rank >= 0) text += fmt::format(" waiting for rank {}", e.peer_rank);
  if (e.bytes > 0) text += fmt::format(", {} bytes", e.bytes);
  return text + fmt::format(" (step {})", e.step);
}

}  // namespace

std::string SummariseFlightRecords(const std::vector<FlightRecord>& records, int64_t now_us,
                                   const std::function<std::string(int)>& describe) {
  std::string text = "flight recorder, each rank's last entry:\n";
  std::map<int, const FlightEntry*> open;  // rank -> its open entry
  std::map<int, std::set<int>> waited_by;  // rank -> the ranks waiting for it
  std::set<int> recorded;
  for (const FlightRecord& record : records) {
    recorded.insert(record.rank);
    if (record.entries.empty()) {
      text += fmt::format("  {}: nothing recorded\n", describe(record.rank));
      continue;
    }
    const FlightEntry& last = record.entries.back();
    if (last.end_us == 0) {
      open[record.rank] = &last;
      if (last.peer_rank >= 0) waited_by[last.peer_rank].insert(record.rank);
      text += fmt::format("  {}: {}, for {:.1f} s\n", describe(record.rank), DescribeEntry(last),
                          static_cast<double>(now_us - last.start_us) / 1e6);
    } else {
      text += fmt::format("  {}: idle since {:.1f} s, after {}\n", describe(record.rank),
                          static_cast<double>(now_us - last.end_us) / 1e6, DescribeEntry(last));
    }
  }
  // The likely culprit: waited for, and itself waiting for no peer (computing, stalled, gone).
  std::vector<std::string> culprits;
  for (const auto& [rank, waiters] : waited_by) {
    const auto it = open.find(rank);
    const bool waits = it != open.end() && it->second->peer_rank >= 0;
    if (waits) continue;
    std::vector<std::string> names;
    for (int w : waiters) names.push_back(describe(w));
    std::string state = !recorded.count(rank) ? "left no record"
                        : it == open.end()    ? "was idle"
                                              : "is at " + DescribeEntry(*it->second);
    culprits.push_back(
        fmt::format("{}: {} rank(s) wait for it ({}), and it waits for no peer: it {}",
                    describe(rank), waiters.size(), fmt::join(names, ", "), state));
  }
  if (culprits.empty()) {
    text += "likely culprit: none found (no rank waits for one that waits for no peer)\n";
  } else {
    for (const auto& c : culprits) text += "likely culprit: " + c + "\n";
  }
  return text;
}

}  // namespace baton
