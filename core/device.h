// Where a tensor lives.
#pragma once

#include <string>

namespace baton {

enum class DeviceType { kCpu, kCuda };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // GPU ordinal for kCuda; 0 for the CPU

  static Device Cpu() { return {}; }
  static Device Cuda(int index) { return {DeviceType::kCuda, index}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool operator==(const Device&) const = default;
  std::string ToString() const;  // "cpu" or "cuda:1"
};

}  // namespace baton
