#include "core/cpu_affinity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace baton {

std::optional<std::vector<int>> PinnedCpus(const std::vector<int>& allowed, int local_rank,
                                           int threads) {
  BATON_CHECK(local_rank >= 0 && threads >= 1, "local rank {} with {} threads", local_rank,
              threads);
  const size_t first = static_cast<size_t>(local_rank) * static_cast<size_t>(threads);
  if (first + static_cast<size_t>(threads) > allowed.size()) return std::nullopt;
  return std::vector<int>(allowed.begin() + static_cast<std::ptrdiff_t>(first),
                          allowed.begin() + static_cast<std::ptrdiff_t>(first) + threads);
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  BATON_CHECK(sched_getaffinity(0, sizeof(set), &set) == 0, "sched_getaffinity: {}",
              strerror(errno));
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

void PinThisThread(const std::vector<int>& cpus) {
  BATON_CHECK(!cpus.empty(), "no CPU to pin to");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  BATON_CHECK(sched_setaffinity(0, sizeof(set), &set) == 0, "sched_setaffinity to CPUs {}: {}",
              fmt::join(cpus, ","), strerror(errno));
}

}  // namespace baton
