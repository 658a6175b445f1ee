#include "comm/meta_communicator.h"

#include "comm/shared_memory.h"
#include "comm/staging.h"
#include "core/error.h"

namespace baton {
namespace {

class MetaWork final : public Work {
 public:
  explicit MetaWork(bool done) : done_(done) {}
  void Wait(CommTimeout /*timeout*/) override { done_ = true; }
  bool Test() override { return done_; }

 private:
  bool done_;
};

class MetaCommunicator final : public Communicator {
 public:
  MetaCommunicator(int rank, int size, CommTransport transport, Allocator& allocator,
                   int linked_ranks)
      : rank_(rank), size_(size), transport_(transport), allocator_(allocator) {
    BATON_CHECK(size > 0 && rank >= 0 && rank < size, "rank {} is outside the world of {} ranks",
                rank, size);
    if (transport_ == CommTransport::kNccl) {
      barrier_scratch_ = BookNcclBarrierScratch(allocator_);
    }
    // The shared-memory segment of a rank whose linked peers all share its host (the local
    // launcher; across hosts fewer do, and this is an upper bound).
    const int peers = linked_ranks < 0 ? size_ - 1 : linked_ranks;
    if (transport_ == CommTransport::kGloo && peers > 0 && SharedMemoryEnabled()) {
      shared_memory_bytes_ = SharedMemorySegmentBytes(peers);
      allocator_.ledger().Book(MemCategory::kComm, shared_memory_bytes_);
    }
  }
  ~MetaCommunicator() override {
    if (shared_memory_bytes_ > 0)
      allocator_.ledger().Release(MemCategory::kComm, shared_memory_bytes_);
  }
  MetaCommunicator(const MetaCommunicator&) = delete;
  MetaCommunicator& operator=(const MetaCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override {
    CheckTransferable(tensor, "Isend");
    CheckPeer(peer, rank_, size_);
    return std::make_unique<MetaWork>(/*done=*/false);
  }

  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override {
    CheckTransferable(tensor, "Irecv");
    CheckPeer(peer, rank_, size_);
    return std::make_unique<MetaWork>(/*done=*/true);
  }

  void AllReduceSum(Tensor& tensor, CommTimeout /*timeout*/) override {
    CheckTransferable(tensor, "AllReduceSum");
    if (transport_ != CommTransport::kGloo || size_ == 1 || tensor.numel() == 0) return;
    const Tensor staging = BookGlooAllReduceStaging(allocator_, tensor);  // for the call, as Gloo's
  }

  void AllReduceSum(Tensor& tensor, const std::vector<int>& group,
                    CommTimeout /*timeout*/) override {
    CheckTransferable(tensor, "AllReduceSum");
    const std::vector<int> members = CheckedGroup(group, rank_, size_);
    if (transport_ != CommTransport::kGloo || members.size() < 2 || tensor.numel() == 0) return;
    // A pair on one host sums the peer's bytes as they stream through shared memory: no staging.
    if (members.size() == 2 && shared_memory_bytes_ > 0) return;
    const Tensor staged = BookGlooGroupAllReduceStaging(allocator_, tensor, members.size());
  }

  void Barrier(CommTimeout /*timeout*/) override {}
  void Abort(const std::string& /*reason*/) override {}

 private:
  int rank_;
  int size_;
  CommTransport transport_;
  Allocator& allocator_;
  Tensor barrier_scratch_;
  int64_t shared_memory_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> MakeMetaCommunicator(int rank, int size, CommTransport transport,
                                                   Allocator& allocator, int linked_ranks) {
  return std::make_unique<MetaCommunicator>(rank, size, transport, allocator, linked_ranks);
}

}  // namespace baton
