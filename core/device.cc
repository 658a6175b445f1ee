#include "core/device.h"

#include "core/error.h"

namespace baton {

std::string Device::ToString() const {
  return type == DeviceType::kCpu ? std::string("cpu") : fmt::format("cuda:{}", index);
}

}  // namespace baton
