// Units in one place: byte sizes as people write and read them, seconds from any duration, and
// the clocks: `Clock` (steady) for every interval, the system clock only for wall times that other
// processes and tools compare (traces, TensorBoard).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace baton {

// Byte sizes as people write them: "24GiB", "512MiB", "1.5GB", "4096", "64 KiB" (binary units
// KiB MiB GiB TiB; decimal KB MB GB TB; B or none for bytes). Throws baton::Error otherwise.
int64_t ParseByteSize(const std::string& text);
// 1536 -> "1.50 KiB"; exact below 1 KiB. For messages and tables.
std::string FormatBytes(int64_t bytes);
// 1536 -> "0.0MiB", 3 << 30 -> "3.00GiB": no space, for key=value lists (the rank table's
// memory column).
std::string CompactBytes(int64_t bytes);

using Clock = std::chrono::steady_clock;

// Wall-clock time since the Unix epoch: seconds, and microseconds (trace spans).
inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
inline double WallMicros() { return WallSeconds() * 1e6; }

template <typename Rep, typename Period>
constexpr double Seconds(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace baton
