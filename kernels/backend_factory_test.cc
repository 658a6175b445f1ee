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

}  // namespace
}  // namespace baton
