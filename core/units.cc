#include "core/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

#include "core/error.h"

namespace baton {

int64_t ParseByteSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  const std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  unit.erase(
      std::remove_if(unit.begin(), unit.end(), [](unsigned char ch) { return std::isspace(ch); }),
      unit.end());
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"B", 1},
                                                       {"KiB", 1024.0},
                                                       {"MiB", 1048576.0},
                                                       {"GiB", 1073741824.0},
                                                       {"TiB", 1099511627776.0},
                                                       {"KB", 1e3},
                                                       {"MB", 1e6},
                                                       {"GB", 1e9},
                                                       {"TB", 1e12},
                                                       {"K", 1024.0},
                                                       {"M", 1048576.0},
                                                       {"G", 1073741824.0},
                                                       {"T", 1099511627776.0}};
  const auto it = kUnits.find(unit);
  double value = 0;
  bool ok = !number.empty() && std::count(number.begin(), number.end(), '.') <= 1 &&
            number != "." && it != kUnits.end();
  if (ok) {
    value = std::stod(number) * it->second;
    ok = std::isfinite(value) && value < 9.2e18;
  }
  if (!ok) BATON_FAIL("'{}' is not a byte size (write e.g. 24GiB, 512MiB, 1.5GB or 4096)", text);
  return static_cast<int64_t>(std::llround(value));
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (std::llabs(bytes) < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

std::string CompactBytes(int64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  return mib >= 1024.0 ? fmt::format("{:.2f}GiB", mib / 1024.0) : fmt::format("{:.1f}MiB", mib);
}

}  // namespace baton
