#include "comm/host_staged_communicator.h"

namespace baton {
namespace {

// A receive into host memory, copied to the device tensor once it has arrived.
class StagedRecv final : public Work {
 public:
  StagedRecv(std::unique_ptr<Work> inner, Tensor host, Tensor device, Backend& backend)
      : inner_(std::move(inner)),
        host_(std::move(host)),
        device_(std::move(device)),
        backend_(backend) {}

  void Wait(CommTimeout timeout) override {
    inner_->Wait(timeout);
    Finish();
  }
  bool Test() override {
    if (!inner_->Test()) return false;
    Finish();
    return true;
  }

 private:
  void Finish() {
    if (copied_) return;
    backend_.Copy(host_, device_);
    backend_.Synchronize();
    copied_ = true;
  }

  std::unique_ptr<Work> inner_;
  Tensor host_;
  Tensor device_;
  Backend& backend_;
  bool copied_ = false;
};

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::shared_ptr<Communicator> inner,
                                               Backend& backend, Allocator& host_allocator)
    : inner_(std::move(inner)), backend_(backend), host_allocator_(host_allocator) {}

Tensor HostStagedCommunicator::ToHost(const Tensor& device_tensor) {
  Tensor host = Tensor::Empty(host_allocator_, device_tensor.shape(), device_tensor.dtype(),
                              MemCategory::kComm);
  backend_.Copy(device_tensor, host);
  backend_.Synchronize();
  return host;
}

std::unique_ptr<Work> HostStagedCommunicator::Isend(const Tensor& tensor, int peer) {
  // The inner send keeps the host copy alive until it completes.
  return inner_->Isend(ToHost(tensor), peer);
}

std::unique_ptr<Work> HostStagedCommunicator::Irecv(Tensor& tensor, int peer) {
  Tensor host = Tensor::Empty(host_allocator_, tensor.shape(), tensor.dtype(), MemCategory::kComm);
  std::unique_ptr<Work> inner = inner_->Irecv(host, peer);
  return std::make_unique<StagedRecv>(std::move(inner), std::move(host), tensor, backend_);
}

void HostStagedCommunicator::AllReduceSum(Tensor& tensor, CommTimeout timeout) {
  Tensor host = ToHost(tensor);
  inner_->AllReduceSum(host, timeout);
  backend_.Copy(host, tensor);
  backend_.Synchronize();
}

void HostStagedCommunicator::AllReduceSum(Tensor& tensor, const std::vector<int>& group,
                                          CommTimeout timeout) {
  Tensor host = ToHost(tensor);
  inner_->AllReduceSum(host, group, timeout);
  backend_.Copy(host, tensor);
  backend_.Synchronize();
}

}  // namespace baton
