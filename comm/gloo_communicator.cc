// The Gloo (CPU, TCP) communicator (see gloo_communicator.h).
#include "comm/gloo_communicator.h"

#include <fmt/format.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>

#include "comm/host_sum.h"
#include "comm/shared_memory.h"
#include "comm/staging.h"
#include "comm/waiter_pool.h"
#include "core/error.h"
#include "core/units.h"

namespace baton {
namespace {

// Channels keep the caller's messages and the subgroup collectives' messages in separate FIFOs.
constexpr int kUserChannel = 0;
constexpr int kGroupChannel = 1;
constexpr int kMeshChannel = 2;  // the hellos that check each pair before use
constexpr int kNumChannels = 3;
// How often a rank building the mesh looks for another rank's failure of the round.
constexpr auto kMeshWatchSlice = std::chrono::milliseconds(50);
constexpr int64_t kHelloBytes = 128;
constexpr int kKnockWaitMs = 1000;
// Waiter threads wait on Gloo "forever"; our own timeouts and Abort() end waits instead.
constexpr auto kWaitForever = std::chrono::hours(24 * 7);

// The Gloo slot of message `index` on the link src -> dst. Gloo's collectives use slot prefixes
// 0x01..0x08 in the top byte; 0xBA is ours.
uint64_t P2PSlot(int channel, int src, int dst, uint64_t index) {
  return (uint64_t{0xBA} << 56) | (uint64_t(channel) << 52) | (uint64_t(src < dst) << 51) |
         (index & ((uint64_t{1} << 51) - 1));
}

// Gloo's rendezvous store, backed by a KvStore under a prefix.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(KvStore& store, std::string prefix, CommTimeout timeout)
      : store_(store), prefix_(std::move(prefix) + "/"), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.Set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_.Get(prefix_ + key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& key : keys) prefixed.push_back(prefix_ + key);
    store_.Wait(prefixed, timeout);
  }

 private:
  KvStore& store_;
  std::string prefix_;
  CommTimeout timeout_;
};

// One posted send or receive; shared by its Work, its waiter and the abort registry.
struct GlooOp {
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  Tensor tensor;  // keeps the memory alive until done
  std::string tensor_text;
  bool is_send = false;
  int src = 0;
  int dst = 0;
  uint64_t index = 0;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::string error;

  std::string Describe() const { return DescribeMessage(is_send, tensor_text, src, dst, index); }
};

void WaitOp(GlooOp& op, CommTimeout timeout) {
  std::unique_lock lock(op.mutex);
  if (!op.done_cv.wait_for(lock, timeout, [&] { return op.done; })) {
    if (op.is_send) {
      BATON_FAIL("timed out after {:.1f} s waiting for rank {} to take the {}", Seconds(timeout),
                 op.dst, op.Describe());
    }
    BATON_FAIL("timed out after {:.1f} s waiting for the {}", Seconds(timeout), op.Describe());
  }
  if (!op.error.empty()) BATON_FAIL("{}", op.error);
}

CommTimeout Remaining(Clock::time_point deadline) {
  return std::max(CommTimeout(0), std::chrono::duration_cast<CommTimeout>(deadline - Clock::now()));
}

class GlooWork final : public Work {
 public:
  explicit GlooWork(std::shared_ptr<GlooOp> op) : op_(std::move(op)) {}
  void Wait(CommTimeout timeout) override { WaitOp(*op_, timeout); }
  bool Test() override {
    std::lock_guard lock(op_->mutex);
    if (op_->done && !op_->error.empty()) BATON_FAIL("{}", op_->error);
    return op_->done;
  }

 private:
  std::shared_ptr<GlooOp> op_;
};

}  // namespace

struct GlooCommunicator::Impl {
  Impl(const GlooOptions& opts, Allocator& alloc)
      : options(opts),
        allocator(alloc),
        send_count(kNumChannels * opts.size),
        recv_count(kNumChannels * opts.size) {}

  const GlooOptions options;
  Allocator& allocator;
  // Operations that ended without completing (aborted, failed) with their buffers and tensors:
  // their message may still arrive, and Gloo's transport writes it into the buffer and signals
  // it until the pair is closed. Declared before the context so that they outlive it; Close
  // closes the pairs and then releases them. Guarded by `mutex`.
  std::vector<std::shared_ptr<GlooOp>> abandoned;
  // The hellos' bytes, declared before the context so that they outlive it: a failed round's
  // context may write them until it is gone (a deque: growing it moves no buffer).
  std::deque<std::vector<int32_t>> hellos;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;

  std::mutex mutex;                  // guards everything below
  std::vector<uint64_t> send_count;  // messages posted, [channel * size + peer]
  std::vector<uint64_t> recv_count;
  std::vector<std::weak_ptr<GlooOp>> pending;
  std::string abort_reason;
  std::string broken_reason;  // set when a collective failed: Gloo closed the connections
  uint32_t next_tag = 0;
  // The same-host peers' links (none when options.shared_memory is off); stopped, like the
  // waiters, before the abandoned operations' tensors go.
  std::unique_ptr<SharedMemoryLinks> shm;
  WaiterPool waiters;  // last member: destroyed (joined) first

  void CheckUsableLocked() const {
    if (!abort_reason.empty()) BATON_FAIL("communicator aborted: {}", abort_reason);
    if (!broken_reason.empty()) {
      BATON_FAIL("communicator unusable since an earlier failure: {}", broken_reason);
    }
  }

  ~Impl() {
    {
      std::lock_guard lock(mutex);
      if (abort_reason.empty()) abort_reason = "the communicator was destroyed";
    }
    EndOperations();  // then the abandoned operations' buffers go with the members
  }

  // Once abort_reason is set (Post refuses new operations, so the pending ones are all there will
  // be): ends every wait, joins the waiters, closes every pair (from here on Gloo's transport
  // writes into no buffer and signals none), and releases the abandoned operations' tensors, also
  // where a caller still holds the operation's Work.
  void EndOperations() {
    AbortPending();
    waiters.Stop();
    if (shm) shm->Stop();
    if (context) {
      try {
        context->closeConnections();
      } catch (const std::exception& e) {  // a context whose mesh never formed has no pairs
        spdlog::debug("rank {}: closing the Gloo pairs: {}", options.rank, e.what());
      }
    }
    std::vector<std::shared_ptr<GlooOp>> ended;
    {
      std::lock_guard lock(mutex);
      ended.swap(abandoned);
    }
    for (const auto& op : ended) {
      std::lock_guard lock(op->mutex);
      op->tensor = Tensor();
    }
  }

  // One round of the mesh under `prefix`: connect, exchange hellos, agree with every rank.
  // Returns "" when every rank's every pair checked out, else what failed (the round is void).
  std::string MeshRound(KvStore& store, const std::string& prefix);
  std::string ConnectAndGreet(KvStore& store, const std::string& prefix);
  std::shared_ptr<GlooOp> NewOp(const Tensor& tensor, int peer, bool is_send) const;
  // Keeps `op` in `pending` (for AbortPending); drops the entries of ended operations.
  void TrackLocked(std::shared_ptr<GlooOp> op);
  std::shared_ptr<GlooOp> Post(const Tensor& tensor, int peer, bool is_send, int channel);
  // A two-member all-reduce's exchange with a peer the shared-memory links serve, summed as it
  // streams (SharedMemoryLinks::PostExchangeSum): the send's and the receive's operations.
  std::pair<std::shared_ptr<GlooOp>, std::shared_ptr<GlooOp>> PostExchangeSum(Tensor& tensor,
                                                                              int peer);
  void Finish(const std::shared_ptr<GlooOp>& op, bool completed, const std::string& failure);
  void AbortPending();
  void RunCollective(const std::string& what, CommTimeout timeout,
                     const std::function<void()>& run);
  void GroupAllReduce(Tensor& tensor, const std::vector<int>& group, Clock::time_point deadline);
};

std::shared_ptr<GlooOp> GlooCommunicator::Impl::NewOp(const Tensor& tensor, int peer,
                                                      bool is_send) const {
  auto op = std::make_shared<GlooOp>();
  op->tensor = tensor;
  op->tensor_text = tensor.ToString();
  op->is_send = is_send;
  op->src = is_send ? options.rank : peer;
  op->dst = is_send ? peer : options.rank;
  return op;
}

void GlooCommunicator::Impl::TrackLocked(std::shared_ptr<GlooOp> op) {
  std::erase_if(pending, [](const std::weak_ptr<GlooOp>& p) { return p.expired(); });
  pending.push_back(std::move(op));
}

std::shared_ptr<GlooOp> GlooCommunicator::Impl::Post(const Tensor& tensor, int peer, bool is_send,
                                                     int channel) {
  CheckPeer(peer, options.rank, options.size);
  CheckTransferable(tensor, is_send ? "Isend" : "Irecv");
  BATON_CHECK(tensor.device().is_cpu(), "GlooCommunicator moves host tensors only, got {}",
              tensor.ToString());
  std::shared_ptr<GlooOp> op = NewOp(tensor, peer, is_send);
  if (tensor.nbytes() == 0) {  // nothing to move: both ends skip it
    op->done = true;
    return op;
  }
  {
    std::lock_guard lock(mutex);
    CheckUsableLocked();
    uint64_t& count = (is_send ? send_count : recv_count)[channel * options.size + peer];
    op->index = count++;
    if (shm && channel < kSharedMemoryChannels && shm->Serves(peer)) {
      // The links' progress thread ends it: no waiter.
      shm->Post(is_send, peer, channel, op->index, tensor.raw(), tensor.nbytes(),
                [this, op](const std::string& failure) { Finish(op, failure.empty(), failure); });
      TrackLocked(op);
      return op;
    }
    op->buffer = context->createUnboundBuffer(tensor.raw(), tensor.nbytes());
    const uint64_t slot = P2PSlot(channel, op->src, op->dst, op->index);
    if (is_send) {
      op->buffer->send(peer, slot);
    } else {
      op->buffer->recv(peer, slot);
    }
    TrackLocked(op);
  }
  waiters.Submit([this, op] {
    bool completed = false;
    std::string failure;
    try {
      completed =
          op->is_send ? op->buffer->waitSend(kWaitForever) : op->buffer->waitRecv(kWaitForever);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    Finish(op, completed, failure);
  });
  return op;
}

std::pair<std::shared_ptr<GlooOp>, std::shared_ptr<GlooOp>> GlooCommunicator::Impl::PostExchangeSum(
    Tensor& tensor, int peer) {
  std::shared_ptr<GlooOp> send = NewOp(tensor, peer, /*is_send=*/true);
  std::shared_ptr<GlooOp> recv = NewOp(tensor, peer, /*is_send=*/false);
  std::lock_guard lock(mutex);
  CheckUsableLocked();
  send->index = send_count[kGroupChannel * options.size + peer]++;
  recv->index = recv_count[kGroupChannel * options.size + peer]++;
  shm->PostExchangeSum(
      peer, kGroupChannel, send->index, recv->index, tensor.raw(), tensor.nbytes(), tensor.dtype(),
      options.rank < peer,
      [this, send](const std::string& failure) { Finish(send, failure.empty(), failure); },
      [this, recv](const std::string& failure) { Finish(recv, failure.empty(), failure); });
  TrackLocked(send);
  TrackLocked(recv);
  return {send, recv};
}

void GlooCommunicator::Impl::Finish(const std::shared_ptr<GlooOp>& op, bool completed,
                                    const std::string& failure) {
  std::string error;
  if (!completed) {
    std::lock_guard lock(mutex);
    error = !abort_reason.empty() ? fmt::format("{} aborted: {}", op->Describe(), abort_reason)
                                  : fmt::format("{} failed: {}", op->Describe(), failure);
    abandoned.push_back(op);  // its buffer and tensor stay until the pair is closed
  }
  {
    std::lock_guard lock(op->mutex);
    op->done = true;
    op->error = error;
    // A completed op: the caller alone now decides when the memory goes.
    if (completed) op->tensor = Tensor();
  }
  op->done_cv.notify_all();
}

void GlooCommunicator::Impl::AbortPending() {
  std::vector<std::shared_ptr<GlooOp>> ops;
  std::string reason;
  {
    std::lock_guard lock(mutex);
    reason = abort_reason;
    for (const auto& weak : pending) {
      if (auto op = weak.lock()) ops.push_back(op);
    }
  }
  if (shm) shm->Abort(reason);
  for (const auto& op : ops) {
    if (!op->buffer) continue;  // a shared-memory operation: the links end it
    // Harmless when the op already completed: the flag only interrupts a wait.
    if (op->is_send) {
      op->buffer->abortWaitSend();
    } else {
      op->buffer->abortWaitRecv();
    }
  }
}

void GlooCommunicator::Impl::RunCollective(const std::string& what, CommTimeout timeout,
                                           const std::function<void()>& run) {
  {
    std::lock_guard lock(mutex);
    CheckUsableLocked();
  }
  try {
    run();
  } catch (const std::exception& e) {
    std::lock_guard lock(mutex);
    if (broken_reason.empty()) broken_reason = fmt::format("{} failed: {}", what, e.what());
    if (!abort_reason.empty()) BATON_FAIL("{} aborted: {}", what, abort_reason);
    // Gloo's own words for its timeout ("Timed out waiting 5000ms for recv operation") become
    // the same as every other wait's, so a hang reads alike wherever the peer froze.
    if (std::string_view(e.what()).find("Timed out") != std::string_view::npos) {
      BATON_FAIL("{} timed out after {:.1f} s: a rank never joined it ({})", what, Seconds(timeout),
                 e.what());
    }
    BATON_FAIL("{} failed: {}", what, e.what());
  }
}

// Subgroup all-reduce in rank order: two members exchange. More reduce-scatter, then all-gather:
// member k receives slice k of every other member's tensor, sums the slices in rank order (the
// bits the whole sum in rank order gives that slice) and sends its sum to the others, so each
// member moves about 2 (n - 1)/n of the tensor each way and none is the hub of the others.
void GlooCommunicator::Impl::GroupAllReduce(Tensor& tensor, const std::vector<int>& group,
                                            Clock::time_point deadline) {
  const int rank = options.rank;
  const bool streamed =
      group.size() == 2 && shm && shm->Serves(group[0] == rank ? group[1] : group[0]);
  if (streamed) {  // the peer's bytes are added as they arrive: no staging copy
    auto [send, recv] = PostExchangeSum(tensor, group[0] == rank ? group[1] : group[0]);
    WaitOp(*recv, Remaining(deadline));
    WaitOp(*send, Remaining(deadline));
    return;
  }
  Tensor staged = BookGlooGroupAllReduceStaging(allocator, tensor, group.size());
  if (group.size() == 2) {
    const int peer = group[0] == rank ? group[1] : group[0];
    Tensor& theirs = staged;
    auto send = Post(tensor, peer, true, kGroupChannel);
    auto recv = Post(theirs, peer, false, kGroupChannel);
    WaitOp(*recv, Remaining(deadline));
    WaitOp(*send, Remaining(deadline));
    SumInOrder(rank < peer ? std::vector<Tensor>{tensor, theirs}
                           : std::vector<Tensor>{theirs, tensor});
    return;
  }
  const auto n = static_cast<int64_t>(group.size());
  const auto me = static_cast<int64_t>(std::find(group.begin(), group.end(), rank) - group.begin());
  const int64_t numel = tensor.numel();
  const int64_t slice = (numel + n - 1) / n;
  const Tensor flat = tensor.View({-1});
  const auto piece = [&](int64_t k) {
    const int64_t begin = std::min(numel, k * slice);
    return flat.Slice(0, begin, std::min(numel, begin + slice));
  };
  const Tensor mine = piece(me);
  const auto wait_all = [&](std::vector<std::shared_ptr<GlooOp>>& ops) {
    for (const auto& op : ops) WaitOp(*op, Remaining(deadline));
    ops.clear();
  };
  // Reduce-scatter: the others' copies of my slice into the staging, in rank order with mine.
  std::vector<Tensor> inputs;
  std::vector<std::shared_ptr<GlooOp>> sends;
  std::vector<std::shared_ptr<GlooOp>> recvs;
  int64_t slot = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (k == me) {
      inputs.push_back(mine);
      continue;
    }
    const int peer = group[static_cast<size_t>(k)];
    sends.push_back(Post(piece(k), peer, true, kGroupChannel));
    inputs.push_back(staged.Slice(0, slot * slice, slot * slice + mine.numel()));
    ++slot;
    recvs.push_back(Post(inputs.back(), peer, false, kGroupChannel));
  }
  wait_all(recvs);
  if (mine.numel() > 0) SumInOrder(inputs);
  wait_all(sends);  // before their slices are overwritten by the gather
  // All-gather: my sum to everyone, theirs into their slices.
  for (int64_t k = 0; k < n; ++k) {
    if (k == me) continue;
    const int peer = group[static_cast<size_t>(k)];
    sends.push_back(Post(mine, peer, true, kGroupChannel));
    recvs.push_back(Post(piece(k), peer, false, kGroupChannel));
  }
  wait_all(recvs);
  wait_all(sends);
}

namespace {

// The hello rank `src` sends `dst` before the mesh is used.
std::string Hello(const std::string& secret, int src, int dst) {
  std::string text = fmt::format("baton gloo mesh: rank {} to rank {}, job {}", src, dst, secret);
  text.resize(kHelloBytes, '\0');
  return text;
}

// A hello-sized view of `storage` holding `bytes`. Not booked in the ledger: the hellos are
// start-up bookkeeping of the transport, not the job's communication buffers.
Tensor HelloTensor(std::vector<int32_t>& storage, const std::string& bytes) {
  storage.assign(kHelloBytes / 4, 0);
  std::memcpy(storage.data(), bytes.data(), std::min<size_t>(bytes.size(), kHelloBytes));
  return Tensor::Wrap(storage.data(), {kHelloBytes / 4}, DType::kI32);
}

// Connects to every address rank `rank` published for its pairs (Gloo's rendezvous key
// "<rank>": one address per other rank) and closes at once. A pair still listening takes the
// connection, sees it close and fails, which ends its wait for a peer that will not come; a pair
// that stopped listening refuses it.
void KnockOnListeners(const std::string& published, int size) {
  if (size < 2 || published.empty() || published.size() % (size - 1) != 0) return;
  const size_t each = published.size() / (size - 1);
  for (size_t offset = 0; offset + each <= published.size(); offset += each) {
    const gloo::transport::tcp::Address address(
        std::vector<char>(published.begin() + offset, published.begin() + offset + each));
    const sockaddr_storage& ss = address.getSockaddr();
    const int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    const socklen_t length = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), length) != 0 &&
        errno == EINPROGRESS) {
      pollfd connecting{fd, POLLOUT, 0};
      (void)::poll(&connecting, 1, kKnockWaitMs);  // a bound only: a refusal ends it at once
    }
    ::close(fd);
  }
}

// Ranks with the same key share a host: the address they listen on (ranks in other network
// namespaces of one machine listen on other addresses, and talk as hosts apart do) and the
// kernel's boot id.
std::string HostKey(const std::string& hostname) {
  std::string boot_id;
  if (FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char line[64] = {};
    if (std::fgets(line, sizeof(line), file) != nullptr) boot_id = line;
    std::fclose(file);
  }
  while (!boot_id.empty() && boot_id.back() == '\n') boot_id.pop_back();
  return hostname + "/" + boot_id;
}

}  // namespace

std::string GlooCommunicator::Impl::ConnectAndGreet(KvStore& store, const std::string& prefix) {
  const int rank = options.rank;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(rank, options.size);
    context->setTimeout(options.timeout);
    GlooStore gloo_store(store, prefix, options.timeout);
    context->connectFullMesh(gloo_store, device);
  } catch (const Error&) {
    throw;  // the store's own message names the key that never came
  } catch (const std::exception& e) {
    return fmt::format("connecting: {}", e.what());
  }
  // Every pair carries a hello both ways: a stray connection that took a listening port in
  // place of the peer cannot send this job's, and the peer it displaced failed its connect.
  const auto deadline = Clock::now() + options.timeout;
  try {
    std::vector<std::pair<int, Tensor>> received;
    std::vector<std::shared_ptr<GlooOp>> ops;
    for (int peer = 0; peer < options.size; ++peer) {
      if (peer == rank) continue;
      ops.push_back(Post(HelloTensor(hellos.emplace_back(), Hello(options.secret, rank, peer)),
                         peer, true, kMeshChannel));
      received.emplace_back(peer, HelloTensor(hellos.emplace_back(), ""));
      ops.push_back(Post(received.back().second, peer, false, kMeshChannel));
    }
    for (const auto& op : ops) WaitOp(*op, Remaining(deadline));
    for (const auto& [peer, bytes] : received) {
      const std::string expected = Hello(options.secret, peer, rank);
      if (std::memcmp(bytes.raw(), expected.data(), kHelloBytes) != 0) {
        return fmt::format("the connection for rank {} did not carry this job's hello", peer);
      }
    }
  } catch (const std::exception& e) {
    return fmt::format("checking the pairs: {}", e.what());
  }
  return "";
}

std::string GlooCommunicator::Impl::MeshRound(KvStore& store, const std::string& prefix) {
  const int rank = options.rank;
  const std::string failed_key = prefix + "/failed";
  // The watch: once any rank reports the round failed, this rank's waits in it end at once (its
  // own listening pairs are knocked on, its hellos aborted), so no rank waits for a peer that
  // has given the round up.
  std::atomic<bool> stop{false};
  std::thread watch([&] {
    std::string why;
    while (!stop && why.empty()) {
      const auto slice_end = Clock::now() + kMeshWatchSlice;
      try {
        why = store.Get(failed_key, kMeshWatchSlice);
      } catch (const Error&) {
        std::this_thread::sleep_until(slice_end);  // paces a store that fails at once
      }
    }
    if (why.empty()) return;
    {
      std::lock_guard lock(mutex);
      if (abort_reason.empty()) abort_reason = "another rank failed this round: " + why;
    }
    AbortPending();
    const std::string own_key = fmt::format("{}/{}", prefix, rank);
    while (!stop) {
      std::string published;
      const auto slice_end = Clock::now() + kMeshWatchSlice;
      try {
        published = store.Get(own_key, kMeshWatchSlice);
      } catch (const Error&) {
        // Not published yet: this rank has not made its pairs; knock once it has.
        std::this_thread::sleep_until(slice_end);
        continue;
      }
      try {
        KnockOnListeners(published, options.size);
      } catch (const std::exception& e) {
        spdlog::debug("rank {}: could not knock on its own Gloo ports: {}", rank, e.what());
      }
      return;
    }
  });
  std::string failure;
  try {
    failure = ConnectAndGreet(store, prefix);
    if (!failure.empty()) store.Set(failed_key, fmt::format("rank {}: {}", rank, failure));
  } catch (...) {
    stop = true;
    watch.join();
    throw;
  }
  stop = true;
  watch.join();
  // Every rank says how its round went; all then decide alike.
  store.Set(fmt::format("{}/verdict/{}", prefix, rank), failure.empty() ? "ok" : failure);
  std::vector<std::string> failures;
  for (int r = 0; r < options.size; ++r) {
    const std::string verdict = store.Get(fmt::format("{}/verdict/{}", prefix, r), options.timeout);
    if (verdict != "ok") failures.push_back(fmt::format("rank {}: {}", r, verdict));
  }
  return fmt::format("{}", fmt::join(failures, "; "));
}

GlooCommunicator::GlooCommunicator(KvStore& store, Allocator& host_allocator,
                                   const GlooOptions& options) {
  BATON_CHECK(options.size > 0 && options.rank >= 0 && options.rank < options.size,
              "rank {} is outside the world of {} ranks", options.rank, options.size);
  std::string failure;
  for (int round = 0; round < kGlooMeshRounds; ++round) {
    const std::string prefix =
        round == 0 ? options.store_prefix : fmt::format("{}/round{}", options.store_prefix, round);
    impl_ = std::make_unique<Impl>(options, host_allocator);
    failure = impl_->MeshRound(store, prefix);
    if (failure.empty()) {
      if (options.shared_memory && options.size > 1) {
        SharedMemoryOptions shm;
        shm.rank = options.rank;
        shm.size = options.size;
        shm.host_key = HostKey(options.hostname);
        shm.job_hash = std::hash<std::string>{}(options.secret + "/" + prefix);
        shm.store_prefix = prefix + "/shm";
        shm.timeout = options.timeout;
        shm.peers = options.shared_memory_peers;
        impl_->shm = std::make_unique<SharedMemoryLinks>(store, host_allocator.ledger(), shm);
      }
      return;
    }
    spdlog::warn(
        "rank {}: the Gloo mesh failed (round {} of {}), connecting again on fresh "
        "ports: {}",
        options.rank, round + 1, kGlooMeshRounds, failure);
  }
  impl_.reset();
  BATON_FAIL(
      "rank {}: connecting the Gloo mesh of {} ranks on {} failed {} times (is something else "
      "connecting to this job's ports?); the last time: {}",
      options.rank, options.size, options.hostname, kGlooMeshRounds, failure);
}

GlooCommunicator::~GlooCommunicator() = default;

int GlooCommunicator::rank() const { return impl_->options.rank; }
int GlooCommunicator::size() const { return impl_->options.size; }

std::unique_ptr<Work> GlooCommunicator::Isend(const Tensor& tensor, int peer) {
  return std::make_unique<GlooWork>(impl_->Post(tensor, peer, true, kUserChannel));
}

std::unique_ptr<Work> GlooCommunicator::Irecv(Tensor& tensor, int peer) {
  return std::make_unique<GlooWork>(impl_->Post(tensor, peer, false, kUserChannel));
}

namespace {

template <typename T>
void SetSum(gloo::AllreduceOptions& options, void* data, size_t n) {
  options.setOutput(static_cast<T*>(data), n);
  void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<T>;
  options.setReduceFunction(sum);
}

}  // namespace

void GlooCommunicator::AllReduceSum(Tensor& tensor, CommTimeout timeout) {
  CheckTransferable(tensor, "AllReduceSum");
  BATON_CHECK(tensor.device().is_cpu(), "GlooCommunicator reduces host tensors only, got {}",
              tensor.ToString());
  if (size() == 1 || tensor.numel() == 0) return;
  const size_t n = tensor.numel();
  Tensor staging = BookGlooAllReduceStaging(impl_->allocator, tensor);
  void* data = tensor.raw();
  if (staging.defined()) {
    ConvertFloats(tensor.raw(), tensor.dtype(), staging.raw(), DType::kF32, n);
    data = staging.raw();
  }
  gloo::AllreduceOptions options(impl_->context);
  if (tensor.dtype() == DType::kI32) {
    SetSum<int32_t>(options, data, n);
  } else {
    SetSum<float>(options, data, n);
  }
  {
    std::lock_guard lock(impl_->mutex);
    options.setTag(impl_->next_tag++);
  }
  options.setTimeout(timeout);
  impl_->RunCollective(fmt::format("all-reduce of {} over all {} ranks", tensor.ToString(), size()),
                       timeout, [&] { gloo::allreduce(options); });
  if (staging.defined()) {
    ConvertFloats(staging.raw(), DType::kF32, tensor.raw(), tensor.dtype(), n);
  }
}

void GlooCommunicator::AllReduceSum(Tensor& tensor, const std::vector<int>& group,
                                    CommTimeout timeout) {
  std::vector<int> members = CheckedGroup(group, rank(), size());
  CheckTransferable(tensor, "AllReduceSum");
  if (members.size() == 1 || tensor.numel() == 0) return;
  try {
    impl_->GroupAllReduce(tensor, members, Clock::now() + timeout);
  } catch (const Error& e) {
    BATON_FAIL("all-reduce of {} over {}: {}", tensor.ToString(), DescribeGroup(members), e.what());
  }
}

void GlooCommunicator::Barrier(CommTimeout timeout) {
  if (size() == 1) return;
  gloo::BarrierOptions options(impl_->context);
  {
    std::lock_guard lock(impl_->mutex);
    options.setTag(impl_->next_tag++);
  }
  options.setTimeout(timeout);
  impl_->RunCollective(fmt::format("barrier over all {} ranks", size()), timeout,
                       [&] { gloo::barrier(options); });
}

void GlooCommunicator::Abort(const std::string& reason) {
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->abort_reason.empty()) return;
    impl_->abort_reason = reason;
  }
  impl_->AbortPending();
}

void GlooCommunicator::Close(const std::string& reason) {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->abort_reason.empty()) impl_->abort_reason = reason;
  }
  impl_->EndOperations();
}

}  // namespace baton
