#include "core/device.h"

#include "core/error.h"

namespace baton {

std::string Device::ToString() const {
  return type == DeviceType::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device ParseDevice(const std::string& text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    BATON_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos,
                "bad device '{}'", text);
    return Device::Cuda(std::stoi(digits));
  }
  BATON_FAIL("unknown device '{}' (expected cpu, cuda or cuda:N)", text);
}

}  // namespace baton
