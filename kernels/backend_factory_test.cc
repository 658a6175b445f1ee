// MakeBackend picks the CPU or CUDA backend from a Device and fails clearly otherwise.
#include "kernels/backend_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"

namespace baton {
namespace {

TEST(BackendFactory, CpuDeviceGivesTheCpuBackend) {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeBackend(Device::Cpu(), ledger, 2);
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->device().is_cpu());
  EXPECT_TRUE(backend->allocator().device().is_cpu());
}

TEST(BackendFactory, CudaDeviceGivesTheCudaBackendOrSaysWhyNot) {
  MemoryLedger ledger;
  try {
    std::unique_ptr<Backend> backend = MakeBackend(Device::Cuda(0), ledger, 1);
    ASSERT_TRUE(BuiltWithCuda());
    EXPECT_EQ(backend->device(), Device::Cuda(0));
  } catch (const Error& e) {
    // Without the toolkit: "built without CUDA"; with it but no GPU: "no CUDA device".
    EXPECT_THAT(e.what(), BuiltWithCuda() ? ::testing::HasSubstr("no CUDA device")
                                          : ::testing::HasSubstr("built without CUDA"));
  }
}

TEST(BackendFactory, MissingGpuIndexIsAnError) {
  MemoryLedger ledger;
  EXPECT_THROW(MakeBackend(Device::Cuda(1 << 20), ledger, 1), Error);
}

TEST(BackendFactory, CpuDeviceForAnyLocalRankAndNoNativeStream) {
  EXPECT_EQ(DeviceForLocalRank(DeviceType::kCpu, 3), Device::Cpu());
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeBackend(Device::Cpu(), ledger, 1);
  EXPECT_EQ(NativeStream(*backend), nullptr);
}

TEST(BackendFactory, CudaDeviceForLocalRankWrapsAroundTheGpus) {
  try {
    const Device device = DeviceForLocalRank(DeviceType::kCuda, 5);
    EXPECT_EQ(device.type, DeviceType::kCuda);
    EXPECT_LE(device.index, 5);
  } catch (const Error& e) {  // no GPU here, or no CUDA in this build
    EXPECT_THAT(e.what(), BuiltWithCuda() ? ::testing::HasSubstr("no CUDA device")
                                          : ::testing::HasSubstr("built without CUDA"));
  }
}

}  // namespace
}  // namespace baton
