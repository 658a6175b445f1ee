#include "launcher/environment.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

namespace baton {
namespace {
int ReadInt(const char* name) {
  const char* value = std::getenv(name);
  BATON_CHECK(value != nullptr, "{} is not set", name);
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  BATON_CHECK(end != value && *end == '\0' && parsed >= 0, "{}='{}' is not a non-negative integer",
              name, value);
  return static_cast<int>(parsed);
}
}  // namespace

std::string Name(LaunchMode mode) {
  switch (mode) {
    case LaunchMode::kLocal:
      return "local";
    case LaunchMode::kMpi:
      return "mpirun";
    case LaunchMode::kSlurm:
      return "slurm";
    case LaunchMode::kTorchrun:
      return "torchrun";
  }
  return "unknown";
}

LauncherChoice ParseLauncherChoice(const std::string& text) {
  if (text == "auto") return LauncherChoice::kAuto;
  if (text == "local") return LauncherChoice::kLocal;
  if (text == "mpi" || text == "mpirun") return LauncherChoice::kMpi;
  if (text == "slurm") return LauncherChoice::kSlurm;
  if (text == "torchrun") return LauncherChoice::kTorchrun;
  BATON_FAIL("--launcher {}: expected auto, local, mpi, slurm or torchrun", text);
}

std::string TorchrunCoordinator() {
  const char* host = std::getenv("MASTER_ADDR");
  BATON_CHECK(host != nullptr && *host != '\0',
              "MASTER_ADDR is not set: under torchrun it names the node that hosts rank 0");
  const int port = ReadInt("MASTER_PORT");
  const bool agent = std::getenv("TORCHELASTIC_RUN_ID") != nullptr;
  BATON_CHECK(port > 0 && port + (agent ? 1 : 0) <= 65535, "MASTER_PORT={} is not a TCP port{}",
              port, agent ? " with one after it (torchrun's store holds MASTER_PORT)" : "");
  return fmt::format("{}:{}", host, port + (agent ? 1 : 0));
}

LaunchEnvironment DetectLaunchEnvironment(LauncherChoice choice) {
  LaunchEnvironment env;
  if (choice == LauncherChoice::kLocal) return env;
  const bool mpi = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
  const bool slurm =
      std::getenv("SLURM_PROCID") != nullptr && std::getenv("SLURM_NTASKS") != nullptr;
  const bool torchrun = std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr &&
                        std::getenv("MASTER_ADDR") != nullptr;
  BATON_CHECK(choice != LauncherChoice::kMpi || mpi,
              "--launcher mpi: OMPI_COMM_WORLD_RANK is not set; start baton under mpirun");
  BATON_CHECK(
      choice != LauncherChoice::kSlurm || slurm,
      "--launcher slurm: SLURM_PROCID and SLURM_NTASKS are not set; start baton under srun");
  BATON_CHECK(choice != LauncherChoice::kTorchrun || torchrun,
              "--launcher torchrun: RANK, WORLD_SIZE and MASTER_ADDR are not all set; start "
              "baton under torchrun (or set them, with MASTER_PORT, for every process)");
  if (choice == LauncherChoice::kTorchrun ||
      (choice == LauncherChoice::kAuto && torchrun && !mpi && !slurm)) {
    env.mode = LaunchMode::kTorchrun;
    env.rank = ReadInt("RANK");
    env.world_size = ReadInt("WORLD_SIZE");
    env.local_rank = std::getenv("LOCAL_RANK") ? ReadInt("LOCAL_RANK") : 0;
  } else if (mpi && choice != LauncherChoice::kSlurm) {
    env.mode = LaunchMode::kMpi;
    env.rank = ReadInt("OMPI_COMM_WORLD_RANK");
    env.world_size = ReadInt("OMPI_COMM_WORLD_SIZE");
    env.local_rank =
        std::getenv("OMPI_COMM_WORLD_LOCAL_RANK") ? ReadInt("OMPI_COMM_WORLD_LOCAL_RANK") : 0;
  } else if (slurm) {
    env.mode = LaunchMode::kSlurm;
    env.rank = ReadInt("SLURM_PROCID");
    env.world_size = ReadInt("SLURM_NTASKS");
    env.local_rank = std::getenv("SLURM_LOCALID") ? ReadInt("SLURM_LOCALID") : 0;
  }
  BATON_CHECK(env.rank < env.world_size, "rank {} is not below the world size {}", env.rank,
              env.world_size);
  if (const char* address = std::getenv("BATON_COORDINATOR")) {
    env.coordinator = address;
  } else if (env.mode == LaunchMode::kTorchrun) {
    env.coordinator = TorchrunCoordinator();
  }
  return env;
}

}  // namespace baton
