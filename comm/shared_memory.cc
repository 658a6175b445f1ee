// Shared-memory links between ranks on one host (see shared_memory.h).
#include "comm/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <thread>

#include "comm/host_sum.h"
#include "core/error.h"
#include "core/units.h"

namespace baton {
namespace {

constexpr char kMagic[16] = "baton-shm-1";
constexpr char kShmDir[] = "/dev/shm/";
constexpr char kNameStart[] = "baton.";
constexpr int64_t kSegmentHeaderBytes = 4096;
constexpr int64_t kRingHeaderBytes = 128;
constexpr int64_t kRingDataBytes = int64_t{256} << 10;
// The most one pass of the progress thread moves for one operation before it publishes the bytes
// and turns to the next, so a peer starts on them while this rank copies the rest.
constexpr int64_t kChunkBytes = int64_t{64} << 10;
// A message on the ring: {payload bytes, index on the link}, then the payload, padded to 16.
constexpr int64_t kMessageHeaderBytes = 16;
// How often a rank whose operations wait on a peer checks that the peer still runs.
constexpr auto kPeerCheckSlice = std::chrono::milliseconds(100);

struct SegmentHeader {
  char magic[16];
  uint64_t job_hash;
  int32_t rank;
  int32_t pid;
  // Rung (incremented, then woken) by whoever leaves this rank work: bytes to read, or space to
  // write in a peer's ring.
  alignas(64) std::atomic<uint32_t> doorbell;
  alignas(64) std::atomic<uint32_t> sleeping;  // 1 while the progress thread waits on the doorbell
  alignas(64) std::atomic<uint32_t> closed;    // 1 once the owner stopped its links
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes the sender has written, ever
  alignas(64) std::atomic<uint64_t> tail;  // bytes the receiver has read, ever
};
static_assert(sizeof(RingHeader) <= kRingHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

int64_t PaddedMessageBytes(int64_t nbytes) { return kMessageHeaderBytes + (nbytes + 15) / 16 * 16; }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory other processes map.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void Ring(SegmentHeader* header) {
  header->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (header->sleeping.load(std::memory_order_seq_cst) != 0) {
    Futex(&header->doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

bool ProcessRuns(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

// A mapped segment.
struct Mapping {
  void* base = nullptr;
  size_t bytes = 0;

  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base); }
  char* ring_base(int ring) const {
    return static_cast<char*>(base) + kSegmentHeaderBytes + ring * SharedMemoryRingBytes();
  }
  RingHeader* ring(int ring) const { return reinterpret_cast<RingHeader*>(ring_base(ring)); }
  char* data(int ring) const { return ring_base(ring) + kRingHeaderBytes; }
  void Unmap() {
    if (base != nullptr) ::munmap(base, bytes);
    base = nullptr;
  }
};

void CopyToRing(char* ring, uint64_t position, const char* source, int64_t n) {
  const int64_t offset = static_cast<int64_t>(position % kRingDataBytes);
  const int64_t first = std::min(n, kRingDataBytes - offset);
  std::memcpy(ring + offset, source, first);
  if (n > first) std::memcpy(ring, source + first, n - first);
}

void CopyFromRing(const char* ring, uint64_t position, char* target, int64_t n) {
  const int64_t offset = static_cast<int64_t>(position % kRingDataBytes);
  const int64_t first = std::min(n, kRingDataBytes - offset);
  std::memcpy(target, ring + offset, first);
  if (n > first) std::memcpy(target + first, ring, n - first);
}

// target += the ring's n bytes at `position` (whole elements: every piece starts 16-aligned).
void AddFromRing(const char* ring, uint64_t position, char* target, int64_t n, DType dtype,
                 bool mine_first) {
  const int64_t size = static_cast<int64_t>(SizeOf(dtype));
  const int64_t offset = static_cast<int64_t>(position % kRingDataBytes);
  const int64_t first = std::min(n, kRingDataBytes - offset);
  AddInto(target, ring + offset, dtype, first / size, mine_first);
  if (n > first) AddInto(target + first, ring, dtype, (n - first) / size, mine_first);
}

// Maps `bytes` of the open segment `fd`; nullptr on failure.
void* MapSegment(int fd, size_t bytes) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return base == MAP_FAILED ? nullptr : base;
}

// The pid in a segment's name "baton.<pid>.<rank>.<nonce>", or -1.
int PidOfName(const std::string& name) {
  if (name.rfind(kNameStart, 0) != 0) return -1;
  const size_t start = sizeof(kNameStart) - 1;
  const size_t end = name.find('.', start);
  if (end == std::string::npos || end == start) return -1;
  int pid = 0;
  for (size_t i = start; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > (INT_MAX - 9) / 10) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// Unlinks the segments whose name's pid satisfies `remove`.
template <typename Predicate>
int RemoveSegments(Predicate remove) {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return 0;
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    const int pid = PidOfName(name);
    if (pid > 0 && remove(pid)) names.push_back(name);
  }
  ::closedir(dir);
  int removed = 0;
  for (const auto& name : names) {
    if (::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace

int64_t SharedMemoryRingBytes() { return kRingHeaderBytes + kRingDataBytes; }

int64_t SharedMemorySegmentBytes(int same_host_peers) {
  return kSegmentHeaderBytes +
         int64_t{same_host_peers} * kSharedMemoryChannels * SharedMemoryRingBytes();
}

bool SharedMemoryEnabled() {
  const char* value = std::getenv("BATON_SHARED_MEMORY");
  if (value == nullptr) return true;
  const std::string text = value;
  return !(text == "0" || text == "off" || text == "false");
}

std::string SharedMemoryPrefixOf(int pid) {
  return fmt::format("{}{}{}.", kShmDir, kNameStart, pid);
}

int RemoveSharedMemoryOf(int pid) {
  return RemoveSegments([pid](int owner) { return owner == pid; });
}

int RemoveStaleSharedMemory() {
  return RemoveSegments([](int owner) { return !ProcessRuns(owner); });
}

struct ShmOp {
  bool is_send = false;
  int peer = 0;
  int channel = 0;
  uint64_t index = 0;
  char* data = nullptr;
  int64_t nbytes = 0;
  SharedMemoryLinks::Done done;
  int64_t moved = 0;  // bytes of the padded message moved so far
  char header[kMessageHeaderBytes] = {};
  // A receive that adds into `data` (PostExchangeSum): the send of the same bytes, which must
  // have moved a byte before the sum may overwrite it.
  std::shared_ptr<ShmOp> sent_first;
  DType dtype = DType::kF32;
  bool mine_first = true;
};

namespace {

// A peer the links serve.
struct Peer {
  int rank = 0;
  int pid = 0;
  Mapping theirs;      // their segment: the rings this rank writes into
  int ring_base = 0;   // this rank's first ring in their segment
  int own_base = 0;    // their first ring in this rank's segment
  std::string broken;  // why the link failed, once it has
  // Queues per channel, sends and receives apart; the front is the one moving.
  std::deque<std::shared_ptr<ShmOp>> queue[2][kSharedMemoryChannels];
};

}  // namespace

struct SharedMemoryLinks::Impl {
  SharedMemoryOptions options;
  MemoryLedger& ledger;
  Mapping own;
  int64_t booked = 0;
  std::vector<Peer> peers;     // served peers, in rank order
  std::vector<int> peer_slot;  // world rank -> index in `peers`, or -1

  std::mutex mutex;  // guards the queues, `aborted`, `stopping` and each peer's `broken`
  std::string aborted;
  bool stopping = false;
  std::thread progress;

  Impl(const SharedMemoryOptions& opts, MemoryLedger& l) : options(opts), ledger(l) {}

  void Connect(KvStore& store);
  void Run();
  // Moves what it can of `op` (a queue's front); true if it moved anything. Sets `failure` when
  // the link broke.
  bool Progress(Peer& peer, ShmOp& op, std::string& failure);
  // Takes every queued operation out (of one peer, or all), to be failed outside the lock.
  void TakeLocked(Peer& peer, std::vector<std::shared_ptr<ShmOp>>& taken);
};

void SharedMemoryLinks::Impl::Connect(KvStore& store) {
  const int rank = options.rank;
  const std::string& prefix = options.store_prefix;
  // "<host key>\n<the ranks it talks to, or *>", read back from every rank.
  const auto describe = [](const std::vector<int>& ranks) {
    return ranks.empty() ? std::string("*") : fmt::format("{}", fmt::join(ranks, ","));
  };
  const std::string mine = options.host_key + "\n" + describe(options.peers);
  store.Set(fmt::format("{}/host/{}", prefix, rank), mine);
  // For each rank of this host, whom it talks to (empty: everyone); none for other hosts.
  std::vector<std::optional<std::vector<int>>> talks_to(options.size);
  for (int r = 0; r < options.size; ++r) {
    const std::string value =
        r == rank ? mine : store.Get(fmt::format("{}/host/{}", prefix, r), options.timeout);
    const size_t newline = value.find('\n');
    if (value.substr(0, newline) != options.host_key) continue;
    std::vector<int> ranks;
    const std::string list = newline == std::string::npos ? "*" : value.substr(newline + 1);
    if (list != "*") {
      for (size_t at = 0; at < list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        ranks.push_back(std::stoi(list.substr(at, comma - at)));
        at = comma + 1;
      }
    }
    talks_to[r] = std::move(ranks);
  }
  const auto talks = [&](int r, int s) {
    return talks_to[r]->empty() ||
           std::find(talks_to[r]->begin(), talks_to[r]->end(), s) != talks_to[r]->end();
  };
  // The senders whose rings rank r's segment holds: the ranks of its host it talks to and that
  // talk to it, in rank order.
  const auto linked_to = [&](int r) {
    std::vector<int> senders;
    for (int s = 0; s < options.size; ++s) {
      if (s != r && talks_to[s] && talks(r, s) && talks(s, r)) senders.push_back(s);
    }
    return senders;
  };
  const std::vector<int> senders = linked_to(rank);
  const int same = static_cast<int>(senders.size());
  if (same == 0) return;
  // A receiver's rings: one per channel for each of its senders, in rank order.
  auto first_ring = [&](int receiver, int sender) {
    const std::vector<int> of = linked_to(receiver);
    return static_cast<int>(std::find(of.begin(), of.end(), sender) - of.begin()) *
           kSharedMemoryChannels;
  };

  RemoveStaleSharedMemory();
  const size_t bytes = static_cast<size_t>(SharedMemorySegmentBytes(same));
  std::string name;
  {
    std::random_device device;
    const uint64_t nonce = (uint64_t{device()} << 32) ^ device() ^ options.job_hash;
    name = fmt::format("/{}{}.{}.{:016x}", kNameStart, ::getpid(), rank, nonce);
    std::string failure;
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      failure = fmt::format("creating {}: {}", name, std::strerror(errno));
    } else {
      // Reserve every page now: tmpfs hands out pages on first touch, and a full /dev/shm would
      // then be a SIGBUS in the middle of a step.
      const int reserved = ::ftruncate(fd, static_cast<off_t>(bytes)) != 0
                               ? errno
                               : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (reserved != 0) {
        failure = fmt::format("reserving {} of {}: {}", FormatBytes(static_cast<int64_t>(bytes)),
                              name, std::strerror(reserved));
      } else if ((own.base = MapSegment(fd, bytes)) == nullptr) {
        failure = fmt::format("mapping {}: {}", name, std::strerror(errno));
      } else {
        own.bytes = bytes;
      }
      ::close(fd);
    }
    if (!failure.empty()) {
      spdlog::warn(
          "rank {}: no shared memory for the {} rank(s) of this host it talks to, they talk over "
          "TCP ({}; is /dev/shm full or missing? Docker's default is 64 MiB: --shm-size)",
          rank, same, failure);
      if (fd >= 0) ::shm_unlink(name.c_str());
      name = "none";
    } else {
      SegmentHeader* header = new (own.base) SegmentHeader{};
      std::memcpy(header->magic, kMagic, sizeof(kMagic));
      header->job_hash = options.job_hash;
      header->rank = rank;
      header->pid = static_cast<int32_t>(::getpid());
      for (int ring = 0; ring < same * kSharedMemoryChannels; ++ring) {
        new (own.ring(ring)) RingHeader{};
      }
    }
  }
  store.Set(fmt::format("{}/segment/{}", prefix, rank), name);

  // Map every peer's segment that is this job's.
  std::vector<Peer> opened;
  for (int r : senders) {
    const std::string theirs = store.Get(fmt::format("{}/segment/{}", prefix, r), options.timeout);
    if (theirs == "none" || name == "none") continue;
    Peer peer;
    peer.rank = r;
    const int fd = ::shm_open(theirs.c_str(), O_RDWR | O_CLOEXEC, 0);
    const size_t their_bytes =
        static_cast<size_t>(SharedMemorySegmentBytes(static_cast<int>(linked_to(r).size())));
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_size == static_cast<off_t>(their_bytes)) {
      peer.theirs.base = MapSegment(fd, their_bytes);
      peer.theirs.bytes = their_bytes;
    }
    if (fd >= 0) ::close(fd);
    const SegmentHeader* header = peer.theirs.header();
    if (header == nullptr || std::memcmp(header->magic, kMagic, sizeof(kMagic)) != 0 ||
        header->job_hash != options.job_hash || header->rank != r) {
      spdlog::warn("rank {}: the shared memory of rank {} ({}) is not this job's; TCP between them",
                   rank, r, theirs);
      peer.theirs.Unmap();
      continue;
    }
    peer.pid = header->pid;
    peer.ring_base = first_ring(r, rank);
    peer.own_base = first_ring(rank, r);
    opened.push_back(std::move(peer));
  }
  std::string opened_list;
  for (const auto& peer : opened) opened_list += fmt::format("{},", peer.rank);
  store.Set(fmt::format("{}/opened/{}", prefix, rank), opened_list);
  // A pair is linked when both mapped each other's segment.
  for (auto& peer : opened) {
    const std::string list =
        "," + store.Get(fmt::format("{}/opened/{}", prefix, peer.rank), options.timeout);
    if (list.find(fmt::format(",{},", rank)) != std::string::npos) {
      peers.push_back(std::move(peer));
    } else {
      peer.theirs.Unmap();
    }
  }
  // Every peer that will map this segment has: its name goes, the memory stays while mapped.
  if (name != "none") ::shm_unlink(name.c_str());
  if (own.base != nullptr) {
    booked = static_cast<int64_t>(own.bytes);
    ledger.Book(MemCategory::kComm, booked);
  }
  peer_slot.assign(options.size, -1);
  for (size_t i = 0; i < peers.size(); ++i) peer_slot[peers[i].rank] = static_cast<int>(i);
  spdlog::debug("rank {}: shared memory with {} of the {} rank(s) of this host it talks to", rank,
                peers.size(), same);
}

void SharedMemoryLinks::Impl::TakeLocked(Peer& peer, std::vector<std::shared_ptr<ShmOp>>& taken) {
  for (auto& direction : peer.queue) {
    for (auto& queue : direction) {
      for (auto& op : queue) taken.push_back(std::move(op));
      queue.clear();
    }
  }
}

namespace {

// Calls fn(offset, memory, length, is_payload) for each piece of the op's next `n` message bytes
// (from op.moved): the header's bytes, the payload's, or null memory for the padding; `offset`
// counts from op.moved.
template <typename Fn>
void ForEachPiece(ShmOp& op, int64_t n, Fn fn) {
  const int64_t total = PaddedMessageBytes(op.nbytes);
  const int64_t payload_end = kMessageHeaderBytes + op.nbytes;
  for (int64_t done = 0; done < n;) {
    const int64_t at = op.moved + done;
    char* memory = nullptr;
    int64_t length = total - at;
    if (at < kMessageHeaderBytes) {
      memory = op.header + at;
      length = kMessageHeaderBytes - at;
    } else if (at < payload_end) {
      memory = op.data + (at - kMessageHeaderBytes);
      length = payload_end - at;
    }
    length = std::min(length, n - done);
    fn(done, memory, length, at >= kMessageHeaderBytes);
    done += length;
  }
}

}  // namespace

bool SharedMemoryLinks::Impl::Progress(Peer& peer, ShmOp& op, std::string& failure) {
  const int64_t total = PaddedMessageBytes(op.nbytes);
  if (op.is_send) {
    const int ring = peer.ring_base + op.channel;
    RingHeader* header = peer.theirs.ring(ring);
    char* data = peer.theirs.data(ring);
    const uint64_t head =
        header->head.load(std::memory_order_relaxed);  // written by this rank only
    const uint64_t tail = header->tail.load(std::memory_order_acquire);
    const int64_t space = kRingDataBytes - static_cast<int64_t>(head - tail);
    const int64_t n = std::min({space, total - op.moved, kChunkBytes});
    if (n <= 0) return false;
    if (op.moved == 0) {
      const uint64_t fields[2] = {static_cast<uint64_t>(op.nbytes), op.index};
      std::memcpy(op.header, fields, sizeof(fields));
    }
    ForEachPiece(op, n, [&](int64_t done, char* source, int64_t length, bool) {
      if (source != nullptr) CopyToRing(data, head + done, source, length);
    });
    header->head.store(head + n, std::memory_order_release);
    op.moved += n;
    Ring(peer.theirs.header());
    return true;
  }
  const int ring = peer.own_base + op.channel;
  RingHeader* header = own.ring(ring);
  const char* data = own.data(ring);
  const uint64_t head = header->head.load(std::memory_order_acquire);
  const uint64_t tail = header->tail.load(std::memory_order_relaxed);  // written by this rank only
  int64_t n = std::min({static_cast<int64_t>(head - tail), total - op.moved, kChunkBytes});
  if (op.sent_first) n = std::min(n, op.sent_first->moved - op.moved);
  // The header alone first: it is checked before any byte lands in the caller's tensor.
  if (op.moved < kMessageHeaderBytes) n = std::min(n, kMessageHeaderBytes - op.moved);
  if (n <= 0) return false;
  ForEachPiece(op, n, [&](int64_t done, char* target, int64_t length, bool payload) {
    if (target != nullptr && payload && op.sent_first) {
      AddFromRing(data, tail + done, target, length, op.dtype, op.mine_first);
    } else if (target != nullptr) {
      CopyFromRing(data, tail + done, target, length);
    }
  });
  op.moved += n;
  if (op.moved == kMessageHeaderBytes) {
    uint64_t fields[2];
    std::memcpy(fields, op.header, sizeof(fields));
    if (fields[0] != static_cast<uint64_t>(op.nbytes) || fields[1] != op.index) {
      failure = fmt::format(
          "rank {} sent message #{} of {} bytes where this rank receives message #{} of {} bytes "
          "(the two sides' sends and receives do not match)",
          peer.rank, fields[1], fields[0], op.index, op.nbytes);
      return false;
    }
  }
  header->tail.store(tail + n, std::memory_order_release);
  Ring(peer.theirs.header());
  return true;
}

void SharedMemoryLinks::Impl::Run() {
  SegmentHeader* me = own.header();
  auto last_check = std::chrono::steady_clock::now();
  struct Front {
    Peer* peer;
    std::shared_ptr<ShmOp> op;
  };
  std::vector<Front> fronts;
  std::vector<std::pair<std::shared_ptr<ShmOp>, std::string>> ended;
  while (true) {
    const uint32_t bell = me->doorbell.load(std::memory_order_seq_cst);
    fronts.clear();
    ended.clear();
    {
      std::lock_guard lock(mutex);
      if (stopping) return;
      for (auto& peer : peers) {
        if (!aborted.empty() || !peer.broken.empty()) {
          std::vector<std::shared_ptr<ShmOp>> taken;
          TakeLocked(peer, taken);
          for (auto& op : taken) {
            ended.emplace_back(std::move(op), !aborted.empty() ? aborted : peer.broken);
          }
          continue;
        }
        for (auto& direction : peer.queue) {
          for (auto& queue : direction) {
            if (!queue.empty()) fronts.push_back({&peer, queue.front()});
          }
        }
      }
    }
    bool progressed = false;
    std::vector<std::pair<Peer*, std::string>> broke;
    for (auto& [peer, op] : fronts) {
      std::string failure;
      // A front op moves chunk after chunk while it can; other fronts get their turn between.
      if (Progress(*peer, *op, failure)) progressed = true;
      if (!failure.empty()) {
        broke.emplace_back(peer, failure);
        continue;
      }
      if (op->moved == PaddedMessageBytes(op->nbytes)) {
        std::lock_guard lock(mutex);
        auto& queue = peer->queue[op->is_send ? 0 : 1][op->channel];
        if (!queue.empty() && queue.front() == op) queue.pop_front();
        ended.emplace_back(op, "");
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (!progressed && !fronts.empty() && now - last_check >= kPeerCheckSlice) {
      last_check = now;
      for (auto& [peer, op] : fronts) {
        const SegmentHeader* theirs = peer->theirs.header();
        if (theirs->closed.load(std::memory_order_acquire) != 0) {
          broke.emplace_back(peer, fmt::format("rank {} closed its communicator", peer->rank));
        } else if (!ProcessRuns(peer->pid)) {
          broke.emplace_back(peer, fmt::format("rank {} (pid {}) is gone: its process ended",
                                               peer->rank, peer->pid));
        }
      }
    }
    if (!broke.empty()) {
      std::lock_guard lock(mutex);
      for (auto& [peer, why] : broke) {
        if (peer->broken.empty()) peer->broken = why;
      }
    }
    for (auto& [op, failure] : ended) op->done(failure);
    if (progressed || !broke.empty() || !ended.empty()) continue;
    me->sleeping.store(1, std::memory_order_seq_cst);
    if (me->doorbell.load(std::memory_order_seq_cst) == bell) {
      const auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(kPeerCheckSlice);
      const timespec timeout{0, static_cast<long>(slice.count())};
      Futex(&me->doorbell, FUTEX_WAIT, bell, fronts.empty() ? nullptr : &timeout);
    }
    me->sleeping.store(0, std::memory_order_seq_cst);
  }
}

SharedMemoryLinks::SharedMemoryLinks(KvStore& store, MemoryLedger& ledger,
                                     const SharedMemoryOptions& options)
    : impl_(std::make_unique<Impl>(options, ledger)) {
  try {
    impl_->Connect(store);
  } catch (...) {
    for (auto& peer : impl_->peers) peer.theirs.Unmap();
    impl_->own.Unmap();
    throw;
  }
  if (!impl_->peers.empty()) impl_->progress = std::thread([this] { impl_->Run(); });
}

SharedMemoryLinks::~SharedMemoryLinks() { Stop(); }

bool SharedMemoryLinks::Serves(int peer) const {
  return peer >= 0 && peer < static_cast<int>(impl_->peer_slot.size()) &&
         impl_->peer_slot[peer] >= 0;
}

namespace {

std::shared_ptr<ShmOp> MakeOp(bool is_send, int peer, int channel, uint64_t index, void* data,
                              int64_t nbytes, SharedMemoryLinks::Done done) {
  auto op = std::make_shared<ShmOp>();
  op->is_send = is_send;
  op->peer = peer;
  op->channel = channel;
  op->index = index;
  op->data = static_cast<char*>(data);
  op->nbytes = nbytes;
  op->done = std::move(done);
  return op;
}

}  // namespace

void SharedMemoryLinks::Enqueue(const std::vector<std::shared_ptr<ShmOp>>& ops) {
  for (const auto& op : ops) {
    BATON_CHECK(Serves(op->peer), "rank {} is not linked through shared memory", op->peer);
    BATON_CHECK(op->channel >= 0 && op->channel < kSharedMemoryChannels, "channel {} of {}",
                op->channel, kSharedMemoryChannels);
  }
  {
    std::lock_guard lock(impl_->mutex);
    // Ops on a broken link or after an abort are queued too: the progress thread ends them,
    // never the caller's thread, which may hold its own locks.
    for (const auto& op : ops) {
      impl_->peers[impl_->peer_slot[op->peer]].queue[op->is_send ? 0 : 1][op->channel].push_back(
          op);
    }
  }
  Ring(impl_->own.header());
}

void SharedMemoryLinks::Post(bool is_send, int peer, int channel, uint64_t index, void* data,
                             int64_t nbytes, Done done) {
  Enqueue({MakeOp(is_send, peer, channel, index, data, nbytes, std::move(done))});
}

void SharedMemoryLinks::PostExchangeSum(int peer, int channel, uint64_t send_index,
                                        uint64_t recv_index, void* data, int64_t nbytes,
                                        DType dtype, bool mine_first, Done send_done,
                                        Done recv_done) {
  BATON_CHECK(
      dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kI32,
      "summing {} is not supported", Name(dtype));
  auto send = MakeOp(true, peer, channel, send_index, data, nbytes, std::move(send_done));
  auto sum = MakeOp(false, peer, channel, recv_index, data, nbytes, std::move(recv_done));
  sum->sent_first = send;
  sum->dtype = dtype;
  sum->mine_first = mine_first;
  Enqueue({send, sum});
}

void SharedMemoryLinks::Abort(const std::string& reason) {
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->aborted.empty()) return;
    impl_->aborted = reason.empty() ? "aborted" : reason;
  }
  if (impl_->own.base != nullptr) Ring(impl_->own.header());
}

void SharedMemoryLinks::Stop() {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
  }
  if (impl_->own.base == nullptr) return;
  Ring(impl_->own.header());
  if (impl_->progress.joinable()) impl_->progress.join();
  std::vector<std::shared_ptr<ShmOp>> taken;
  std::string why;
  {
    std::lock_guard lock(impl_->mutex);
    why = !impl_->aborted.empty() ? impl_->aborted : "the communicator was closed";
    for (auto& peer : impl_->peers) impl_->TakeLocked(peer, taken);
  }
  for (auto& op : taken) op->done(why);
  impl_->own.header()->closed.store(1, std::memory_order_release);
  for (auto& peer : impl_->peers) {
    Ring(peer.theirs.header());
    peer.theirs.Unmap();
  }
  impl_->own.Unmap();
  if (impl_->booked > 0) impl_->ledger.Release(MemCategory::kComm, impl_->booked);
  impl_->booked = 0;
}

}  // namespace baton
