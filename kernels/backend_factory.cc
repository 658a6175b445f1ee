// MakeBackend (see backend_factory.h). BATON_BACKEND_WITH_CUDA is defined by kernels/CMakeLists.txt
// when the CUDA backend is built and linked.
#include "kernels/backend_factory.h"

#include <string>

#include "core/error.h"

#if BATON_BACKEND_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace baton {

bool BuiltWithCuda() { return BATON_BACKEND_WITH_CUDA != 0; }

std::unique_ptr<Backend> MakeBackend(Device device, MemoryLedger& ledger, int threads) {
  switch (device.type) {
    case DeviceType::kCpu:
      return MakeCpuBackend(ledger, threads);
    case DeviceType::kCuda:
#if BATON_BACKEND_WITH_CUDA
      return MakeCudaBackend(ledger, device.index);
#else
      BATON_FAIL(
          "device {} asked for, but this binary was built without CUDA (configure with the CUDA "
          "toolkit installed: see docs/cuda.md)",
          device.ToString());
#endif
  }
  BATON_FAIL("unknown device type {}", static_cast<int>(device.type));
}

std::unique_ptr<Backend> MakeMetaBackend(Device device, MemoryLedger& ledger, int threads) {
  switch (device.type) {
    case DeviceType::kCpu:
      return MakeCpuMetaBackend(ledger, threads);
    case DeviceType::kCuda:
#if BATON_BACKEND_WITH_CUDA
      return MakeCudaMetaBackend(ledger, device.index);
#else
      BATON_FAIL(
          "predicting memory on {} needs the CUDA backend's own bookings, and this binary was "
          "built without CUDA (see docs/cuda.md)",
          device.ToString());
#endif
  }
  BATON_FAIL("unknown device type {}", static_cast<int>(device.type));
}

Device DeviceForLocalRank(DeviceType type, int local_rank) {
  BATON_CHECK(local_rank >= 0, "local rank {} is negative", local_rank);
  if (type == DeviceType::kCpu) return Device::Cpu();
#if BATON_BACKEND_WITH_CUDA
  std::string why;
  const int count = cuda::CudaDeviceCount(&why);
  BATON_CHECK(count > 0, "no CUDA device: {}", why);
  return Device::Cuda(local_rank % count);
#else
  BATON_FAIL("device cuda asked for, but this binary was built without CUDA (see docs/cuda.md)");
#endif
}

int CudaDevicesVisible() {
#if BATON_BACKEND_WITH_CUDA
  return cuda::CudaDeviceCount();
#else
  return 0;
#endif
}

void* NativeStream([[maybe_unused]] Backend& backend) {
#if BATON_BACKEND_WITH_CUDA
  if (auto* cuda_backend = dynamic_cast<cuda::CudaBackend*>(&backend)) {
    return static_cast<void*>(cuda_backend->stream());
  }
#endif
  return nullptr;
}

}  // namespace baton
