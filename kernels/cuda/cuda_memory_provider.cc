// CudaMemoryProvider: the caching allocator's source of device memory (cudaMalloc / cudaFree).
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace baton::cuda {
namespace {

// Makes `device` current for the scope and restores the previous device.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    BATON_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) BATON_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~ScopedDevice() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};

class CudaMemoryProvider final : public DeviceMemoryProvider {
 public:
  explicit CudaMemoryProvider(int device_index) : index_(device_index) {}

  Device device() const override { return Device::Cuda(index_); }

  void* Malloc(size_t bytes) override {
    ScopedDevice scoped(index_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky, but clear it for the next check
      return nullptr;
    }
    if (status != cudaSuccess)
      ThrowCudaError(status, "cudaMalloc(&ptr, bytes)", __FILE__, __LINE__);
    return ptr;
  }

  void Free(void* ptr) override {
    ScopedDevice scoped(index_);
    BATON_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int index_;
};

}  // namespace

std::unique_ptr<DeviceMemoryProvider> MakeCudaMemoryProvider(int device_index) {
  return std::make_unique<CudaMemoryProvider>(device_index);
}

}  // namespace baton::cuda
