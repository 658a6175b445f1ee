// A Communicator for device tensors over a host transport: every message is staged through host
// memory (booked as comm) and carried by an inner host Communicator (Gloo).
//
// Used when pipeline stages share a GPU: NCCL refuses two ranks on one device ("duplicate GPU"),
// so stages on the same GPU exchange through the host instead. Slower than NCCL (two copies per
// message), the same semantics (communicator.h): FIFO per link, bit-identical collectives.
//
// Not thread-safe beyond what the inner communicator allows; one engine thread drives it.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "kernels/backend.h"

namespace baton {

class HostStagedCommunicator final : public Communicator {
 public:
  // `inner` carries host tensors; `backend` copies between the device and `host_allocator`'s
  // memory. Both must outlive this communicator.
  HostStagedCommunicator(std::shared_ptr<Communicator> inner, Backend& backend,
                         Allocator& host_allocator);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override;
  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override;
  void AllReduceSum(Tensor& tensor, CommTimeout timeout) override;
  void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) override;
  void Barrier(CommTimeout timeout) override { inner_->Barrier(timeout); }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }
  void Close(const std::string& reason) override { inner_->Close(reason); }

 private:
  Tensor ToHost(const Tensor& device_tensor);

  std::shared_ptr<Communicator> inner_;
  Backend& backend_;
  Allocator& host_allocator_;
};

}  // namespace baton
