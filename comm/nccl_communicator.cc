// The NCCL (GPU) communicator (see nccl_communicator.h).
#include "comm/nccl_communicator.h"

#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "comm/staging.h"
#include "core/error.h"
#include "core/units.h"

// Every CUDA and NCCL call goes through these: the error names the call, file:line and the
// thread's ErrorContext() (added by ThrowError).
#define BATON_CUDA_CALL(call)                                                        \
  do {                                                                               \
    cudaError_t baton_cuda_status = (call);                                          \
    if (baton_cuda_status != cudaSuccess) {                                          \
      BATON_FAIL("{} failed: {} ({})", #call, cudaGetErrorString(baton_cuda_status), \
                 cudaGetErrorName(baton_cuda_status));                               \
    }                                                                                \
  } while (0)

// Non-blocking communicators may answer ncclInProgress; the caller then polls for readiness.
#define BATON_NCCL_CALL(call)                                                        \
  do {                                                                               \
    ncclResult_t baton_nccl_status = (call);                                         \
    if (baton_nccl_status != ncclSuccess && baton_nccl_status != ncclInProgress) {   \
      BATON_FAIL("{} failed: {} ({})", #call, ncclGetErrorString(baton_nccl_status), \
                 ncclGetLastError(nullptr));                                         \
    }                                                                                \
  } while (0)

namespace baton {
namespace {

constexpr auto kPollInterval = std::chrono::microseconds(20);

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kU8:
      return ncclUint8;
    case DType::kI8:
      return ncclInt8;
  }
  BATON_FAIL("no NCCL type for {}", Name(dtype));
}

// One NCCL communicator with its own stream. `mutex` serialises the calls on it (a non-blocking
// communicator must be ready before the next call).
struct NcclComm {
  std::string key;           // its rendezvous key, also its NCCL name
  std::vector<int> members;  // world ranks, in communicator-rank order
  int creator = 0;           // the member who creates the unique id
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::mutex mutex;
  uint64_t count = 0;  // operations posted, for messages

  int Index(int rank) const {
    return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  }
};

// A (done event, tensor) pair whose Work was dropped before the GPU finished with the tensor.
struct Retained {
  cudaEvent_t done;
  Tensor tensor;
};

}  // namespace

struct NcclCommunicator::Impl {
  Impl(const NcclOptions& opts, Allocator& alloc) : options(opts), allocator(alloc) {}
  ~Impl() { Teardown(); }

  const NcclOptions options;
  Allocator& allocator;
  std::unique_ptr<NcclComm> world;
  std::map<int, std::unique_ptr<NcclComm>> send_links;  // by peer
  std::map<int, std::unique_ptr<NcclComm>> recv_links;
  std::map<std::vector<int>, std::unique_ptr<NcclComm>> groups;
  Tensor barrier_scratch;

  std::atomic<bool> aborted = false;
  std::mutex mutex;  // guards below
  std::string abort_reason;
  std::string failure;  // an operation timed out or failed: NCCL kernels may be stuck
  std::vector<Retained> retained;

  std::vector<NcclComm*> AllComms() {
    std::vector<NcclComm*> all;
    if (world) all.push_back(world.get());
    for (auto* links : {&send_links, &recv_links}) {
      for (auto& [peer, link] : *links) all.push_back(link.get());
    }
    for (auto& [group, comm] : groups) all.push_back(comm.get());
    return all;
  }

  void Setup(KvStore& store);
  void WaitReady(NcclComm& comm, Clock::time_point deadline, const std::string& what);
  void WaitEvent(cudaEvent_t done, NcclComm& comm, Clock::time_point deadline,
                 const std::function<std::string()>& what);
  void CheckUsable();
  std::string AbortReason() {
    std::lock_guard lock(mutex);
    return abort_reason;
  }
  void MarkFailed(const std::string& what);
  void ReleaseCompleted();
  cudaEvent_t Enqueue(NcclComm& comm, const std::function<void()>& launch);
  void Collective(NcclComm& comm, Tensor& tensor, CommTimeout timeout, const std::string& what);
  void Teardown();
};

// Polls a non-blocking communicator until its last call finished.
void NcclCommunicator::Impl::WaitReady(NcclComm& comm, Clock::time_point deadline,
                                       const std::string& what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    BATON_NCCL_CALL(ncclCommGetAsyncError(comm.comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      BATON_FAIL("{} on NCCL communicator {}: {} ({})", what, comm.key, ncclGetErrorString(state),
                 ncclGetLastError(comm.comm));
    }
    if (aborted) BATON_FAIL("{} aborted: {}", what, AbortReason());
    BATON_CHECK(Clock::now() < deadline, "{} on NCCL communicator {} did not finish in time", what,
                comm.key);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void NcclCommunicator::Impl::Setup(KvStore& store) {
  const int rank = options.rank;
  auto add = [&](std::string key, std::vector<int> members, int creator) {
    auto comm = std::make_unique<NcclComm>();
    comm->key = options.store_prefix + "/" + std::move(key);
    comm->members = std::move(members);
    comm->creator = creator;
    return comm;
  };
  std::vector<int> everyone(options.size);
  for (int r = 0; r < options.size; ++r) everyone[r] = r;
  world = add("world", everyone, 0);
  for (int peer : std::set<int>(options.peers.begin(), options.peers.end())) {
    CheckPeer(peer, rank, options.size);
    send_links[peer] = add(fmt::format("link/{}->{}", rank, peer), {rank, peer}, rank);
    recv_links[peer] = add(fmt::format("link/{}->{}", peer, rank), {peer, rank}, peer);
  }
  for (const auto& listed : options.groups) {
    std::vector<int> group = CheckedGroup(listed, rank, options.size);
    if (group.size() < 2 || group == everyone || groups.count(group)) continue;
    groups[group] = add(fmt::format("group/{}", fmt::join(group, ",")), group, group[0]);
  }
  // Creators publish their ids first, so that no Get waits on a rank that is itself waiting.
  std::vector<NcclComm*> all = AllComms();
  std::map<NcclComm*, ncclUniqueId> ids;
  for (NcclComm* comm : all) {
    if (comm->creator != rank) continue;
    BATON_NCCL_CALL(ncclGetUniqueId(&ids[comm]));
    store.Set(comm->key, std::string(ids[comm].internal, NCCL_UNIQUE_ID_BYTES));
  }
  for (NcclComm* comm : all) {
    if (comm->creator == rank) continue;
    std::string id = store.Get(comm->key, options.timeout);
    BATON_CHECK(id.size() == NCCL_UNIQUE_ID_BYTES, "key '{}' holds {} bytes, not an NCCL id",
                comm->key, id.size());
    std::memcpy(ids[comm].internal, id.data(), NCCL_UNIQUE_ID_BYTES);
  }
  BATON_NCCL_CALL(ncclGroupStart());
  for (NcclComm* comm : all) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a missing peer times out instead of hanging
    config.commName = comm->key.c_str();
    BATON_NCCL_CALL(ncclCommInitRankConfig(&comm->comm, static_cast<int>(comm->members.size()),
                                           ids[comm], comm->Index(rank), &config));
  }
  BATON_NCCL_CALL(ncclGroupEnd());
  const auto deadline = Clock::now() + options.timeout;
  for (NcclComm* comm : all) {
    WaitReady(*comm, deadline, "creating the communicator");
    BATON_CUDA_CALL(cudaStreamCreateWithFlags(&comm->stream, cudaStreamNonBlocking));
  }
}

// Host-side wait for `done`, watching the communicator for errors and the abort flag.
void NcclCommunicator::Impl::WaitEvent(cudaEvent_t done, NcclComm& comm, Clock::time_point deadline,
                                       const std::function<std::string()>& what) {
  while (true) {
    cudaError_t status = cudaEventQuery(done);
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) BATON_CUDA_CALL(status);
    ncclResult_t state = ncclSuccess;
    BATON_NCCL_CALL(ncclCommGetAsyncError(comm.comm, &state));
    if (state != ncclSuccess && state != ncclInProgress) {
      MarkFailed(what());
      BATON_FAIL("{} failed: {} ({})", what(), ncclGetErrorString(state),
                 ncclGetLastError(comm.comm));
    }
    if (aborted) {
      MarkFailed(what());
      BATON_FAIL("{} aborted: {}", what(), AbortReason());
    }
    if (Clock::now() >= deadline) {
      MarkFailed(what());
      BATON_FAIL("timed out waiting for the {}", what());
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void NcclCommunicator::Impl::CheckUsable() {
  std::lock_guard lock(mutex);
  if (!abort_reason.empty()) BATON_FAIL("communicator aborted: {}", abort_reason);
  if (!failure.empty()) BATON_FAIL("communicator unusable since an earlier failure: {}", failure);
}

void NcclCommunicator::Impl::MarkFailed(const std::string& what) {
  std::lock_guard lock(mutex);
  if (failure.empty()) failure = what;
}

void NcclCommunicator::Impl::ReleaseCompleted() {
  std::lock_guard lock(mutex);
  std::erase_if(retained, [](Retained& r) {
    if (cudaEventQuery(r.done) != cudaSuccess) return false;
    cudaEventDestroy(r.done);
    return true;
  });
}

// Runs `launch` (NCCL calls) on comm's stream after the compute stream's queued work; returns an
// event recorded after it. Caller holds comm.mutex.
cudaEvent_t NcclCommunicator::Impl::Enqueue(NcclComm& comm, const std::function<void()>& launch) {
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  BATON_CUDA_CALL(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  BATON_CUDA_CALL(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  BATON_CUDA_CALL(cudaEventRecord(ready, options.compute_stream));
  BATON_CUDA_CALL(cudaStreamWaitEvent(comm.stream, ready, 0));
  BATON_CUDA_CALL(cudaEventDestroy(ready));  // released once recorded work completes
  BATON_NCCL_CALL(ncclGroupStart());
  launch();
  BATON_NCCL_CALL(ncclGroupEnd());
  WaitReady(comm, Clock::now() + options.timeout, "enqueueing an operation");
  BATON_CUDA_CALL(cudaEventRecord(done, comm.stream));
  return done;
}

void NcclCommunicator::Impl::Collective(NcclComm& comm, Tensor& tensor, CommTimeout timeout,
                                        const std::string& what) {
  CheckTransferable(tensor, "AllReduceSum");
  BATON_CHECK(tensor.device() == Device::Cuda(options.device), "{} needs a tensor on cuda:{}", what,
              options.device);
  CheckUsable();
  std::lock_guard lock(comm.mutex);
  cudaEvent_t done = Enqueue(comm, [&] {
    BATON_NCCL_CALL(ncclAllReduce(tensor.raw(), tensor.raw(), tensor.numel(),
                                  NcclType(tensor.dtype()), ncclSum, comm.comm, comm.stream));
  });
  try {
    WaitEvent(done, comm, Clock::now() + timeout,
              [&] { return fmt::format("{} ({:.1f} s limit)", what, Seconds(timeout)); });
  } catch (...) {
    std::lock_guard retain_lock(mutex);
    retained.push_back({done, tensor});
    throw;
  }
  BATON_CUDA_CALL(cudaStreamWaitEvent(options.compute_stream, done, 0));
  BATON_CUDA_CALL(cudaEventDestroy(done));
}

void NcclCommunicator::Impl::Teardown() {
  cudaSetDevice(options.device);
  ReleaseCompleted();
  const bool clean = !aborted && failure.empty() && retained.empty();
  for (NcclComm* comm : AllComms()) {
    if (!comm->comm) continue;
    bool finalized = false;
    if (clean) {
      try {
        BATON_NCCL_CALL(ncclCommFinalize(comm->comm));
        WaitReady(*comm, Clock::now() + std::chrono::seconds(10), "finalizing");
        finalized = true;
      } catch (const Error&) {
        finalized = false;
      }
    }
    if (finalized) {
      ncclCommDestroy(comm->comm);
    } else {
      ncclCommAbort(comm->comm);  // also stops kernels stuck waiting on a peer
    }
    comm->comm = nullptr;
    if (comm->stream) cudaStreamDestroy(comm->stream);
  }
  for (Retained& r : retained) cudaEventDestroy(r.done);
  retained.clear();
}

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator::Impl& impl, NcclComm& comm, cudaEvent_t done, Tensor tensor,
           bool is_recv, std::string what)
      : impl_(impl),
        comm_(comm),
        done_(done),
        tensor_(std::move(tensor)),
        is_recv_(is_recv),
        what_(std::move(what)) {}

  ~NcclWork() override {
    if (completed_) return;
    // The GPU may still use the tensor: keep it until the event completes.
    std::lock_guard lock(impl_.mutex);
    impl_.retained.push_back({done_, std::move(tensor_)});
  }

  void Wait(CommTimeout timeout) override {
    if (completed_) return;
    impl_.WaitEvent(done_, comm_, Clock::now() + timeout,
                    [&] { return fmt::format("{} ({:.1f} s limit)", what_, Seconds(timeout)); });
    Complete();
  }

  bool Test() override {
    if (completed_) return true;
    cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    BATON_CUDA_CALL(status);
    Complete();
    return true;
  }

 private:
  void Complete() {
    if (is_recv_) BATON_CUDA_CALL(cudaStreamWaitEvent(impl_.options.compute_stream, done_, 0));
    BATON_CUDA_CALL(cudaEventDestroy(done_));
    tensor_ = Tensor();
    completed_ = true;
  }

  NcclCommunicator::Impl& impl_;
  NcclComm& comm_;
  cudaEvent_t done_;
  Tensor tensor_;
  const bool is_recv_;
  const std::string what_;
  bool completed_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(KvStore& store, Allocator& device_allocator,
                                   const NcclOptions& options) {
  BATON_CHECK(options.size > 0 && options.rank >= 0 && options.rank < options.size,
              "rank {} is outside the world of {} ranks", options.rank, options.size);
  BATON_CHECK(device_allocator.device() == Device::Cuda(options.device),
              "NcclCommunicator needs an allocator for cuda:{}, got one for {}", options.device,
              device_allocator.device().ToString());
  BATON_CUDA_CALL(cudaSetDevice(options.device));
  impl_ = std::make_unique<Impl>(options, device_allocator);
  impl_->Setup(store);
  impl_->barrier_scratch = BookNcclBarrierScratch(device_allocator);
}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return impl_->options.rank; }
int NcclCommunicator::size() const { return impl_->options.size; }

std::unique_ptr<Work> NcclCommunicator::Isend(const Tensor& tensor, int peer) {
  CheckPeer(peer, rank(), size());
  CheckTransferable(tensor, "Isend");
  BATON_CHECK(tensor.device() == Device::Cuda(impl_->options.device),
              "Isend needs a tensor on cuda:{}, got {}", impl_->options.device,
              tensor.device().ToString());
  auto it = impl_->send_links.find(peer);
  BATON_CHECK(it != impl_->send_links.end(), "rank {} is not among this rank's NCCL peers", peer);
  impl_->CheckUsable();
  impl_->ReleaseCompleted();
  NcclComm& link = *it->second;
  std::lock_guard lock(link.mutex);
  std::string what = DescribeMessage(true, tensor.ToString(), rank(), peer, link.count++);
  cudaEvent_t done = impl_->Enqueue(link, [&] {
    BATON_NCCL_CALL(ncclSend(tensor.raw(), tensor.nbytes(), ncclUint8, 1, link.comm, link.stream));
  });
  return std::make_unique<NcclWork>(*impl_, link, done, tensor, false, std::move(what));
}

std::unique_ptr<Work> NcclCommunicator::Irecv(Tensor& tensor, int peer) {
  CheckPeer(peer, rank(), size());
  CheckTransferable(tensor, "Irecv");
  BATON_CHECK(tensor.device() == Device::Cuda(impl_->options.device),
              "Irecv needs a tensor on cuda:{}, got {}", impl_->options.device,
              tensor.device().ToString());
  auto it = impl_->recv_links.find(peer);
  BATON_CHECK(it != impl_->recv_links.end(), "rank {} is not among this rank's NCCL peers", peer);
  impl_->CheckUsable();
  impl_->ReleaseCompleted();
  NcclComm& link = *it->second;
  std::lock_guard lock(link.mutex);
  std::string what = DescribeMessage(false, tensor.ToString(), peer, rank(), link.count++);
  cudaEvent_t done = impl_->Enqueue(link, [&] {
    BATON_NCCL_CALL(ncclRecv(tensor.raw(), tensor.nbytes(), ncclUint8, 0, link.comm, link.stream));
  });
  return std::make_unique<NcclWork>(*impl_, link, done, tensor, true, std::move(what));
}

void NcclCommunicator::AllReduceSum(Tensor& tensor, CommTimeout timeout) {
  if (tensor.numel() == 0) return;
  impl_->Collective(*impl_->world, tensor, timeout,
                    fmt::format("all-reduce of {} over all {} ranks", tensor.ToString(), size()));
}

void NcclCommunicator::AllReduceSum(Tensor& tensor, const std::vector<int>& group,
                                    CommTimeout timeout) {
  std::vector<int> members = CheckedGroup(group, rank(), size());
  if (members.size() == 1 || tensor.numel() == 0) return;
  if (static_cast<int>(members.size()) == size()) return AllReduceSum(tensor, timeout);
  auto it = impl_->groups.find(members);
  BATON_CHECK(it != impl_->groups.end(),
              "all-reduce over {}: the group was not listed in NcclOptions::groups",
              DescribeGroup(members));
  impl_->Collective(
      *it->second, tensor, timeout,
      fmt::format("all-reduce of {} over {}", tensor.ToString(), DescribeGroup(members)));
}

void NcclCommunicator::Barrier(CommTimeout timeout) {
  impl_->Collective(*impl_->world, impl_->barrier_scratch, timeout,
                    fmt::format("barrier over all {} ranks", size()));
}

void NcclCommunicator::Abort(const std::string& reason) {
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->abort_reason.empty()) return;
    impl_->abort_reason = reason;
  }
  impl_->aborted = true;
}

}  // namespace baton
