#include "launcher/mpi_bootstrap.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "coordinator/coordinator_server.h"
#include "core/error.h"
#include "core/hash.h"

namespace baton {
namespace {

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  BATON_CHECK(colon != std::string::npos && colon > 0, "coordinator address '{}' is not HOST:PORT",
              address);
  return address.substr(0, colon);
}

std::string Broadcast(std::string value, int rank) {
  int length = static_cast<int>(value.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank != 0) value.assign(static_cast<size_t>(length), '\0');
  MPI_Bcast(value.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return value;
}

}  // namespace

std::string ListenHostFor(const std::string& coordinator_address) {
  const char* explicit_host = std::getenv("BATON_HOST");
  if (explicit_host != nullptr && *explicit_host != '\0') return explicit_host;
  const std::string host = HostOf(coordinator_address);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(host.c_str(), "9", &hints, &found);
  BATON_CHECK(error == 0 && found != nullptr,
              "the coordinator's host {} does not resolve ({}); set BATON_HOST to this node's "
              "address",
              host, error == 0 ? "no IPv4 address" : gai_strerror(error));
  // A UDP "connect" sends nothing: it asks the kernel which local address routes there.
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  BATON_CHECK(fd >= 0, "socket(): {}", std::strerror(errno));
  const bool routed = connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int route_errno = errno;
  freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  const bool named = routed && getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  close(fd);
  BATON_CHECK(routed && named,
              "no route from this node to the coordinator's host {} ({}); set BATON_HOST to this "
              "node's address",
              host, std::strerror(route_errno));
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  return text;
}

JobRendezvous ShareCoordinator(const LaunchEnvironment& env, const std::string& coordinator_flag) {
  JobRendezvous r;
  const std::string address = coordinator_flag.empty() ? env.coordinator : coordinator_flag;
  if (env.mode == LaunchMode::kMpi) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    if (env.rank == 0) {
      r.bind_address = address.empty() ? "127.0.0.1:0" : address;
      r.token = MakeJobToken();
      r.job_id = MakeJobToken().substr(0, 12);
    }
    return r;
  }
  BATON_CHECK(!address.empty(),
              "under {} set BATON_COORDINATOR=HOST:PORT (or --coordinator): the first node's "
              "address, where rank 0 hosts the coordinator",
              Name(env.mode));
  const char* token = std::getenv("BATON_TOKEN");
  r.bind_address = address;
  r.connect_address = address;
  if (env.mode == LaunchMode::kTorchrun) {
    // torchrun's variables carry no secret: without BATON_TOKEN the token is a digest of the
    // job's rendezvous, the same on every rank, which keeps jobs apart but authenticates nobody.
    const char* run_id = std::getenv("TORCHELASTIC_RUN_ID");
    const std::string job = run_id != nullptr && *run_id != '\0' ? run_id : "torchrun";
    Fnv1a64 digest;
    const std::string rendezvous = fmt::format("torchrun {} {} {}", address, env.world_size, job);
    digest.Update(rendezvous.data(), rendezvous.size());
    r.token = token != nullptr && *token != '\0' ? token : digest.hex();
    r.job_id = job;
    return r;
  }
  BATON_CHECK(token != nullptr && *token != '\0',
              "under {} set BATON_TOKEN to the same random secret for every task "
              "(e.g. BATON_TOKEN=$(openssl rand -hex 16))",
              Name(env.mode));
  const char* job = std::getenv("SLURM_JOB_ID");
  r.token = token;
  r.job_id = job != nullptr ? job : "slurm";
  return r;
}

JobRendezvous PublishCoordinator(const LaunchEnvironment& env, JobRendezvous r, int bound_port) {
  if (env.mode != LaunchMode::kMpi) return r;
  std::string message;
  if (env.rank == 0) {
    r.connect_address = HostOf(r.bind_address) + ":" + std::to_string(bound_port);
    message = r.connect_address + " " + r.token + " " + r.job_id;
  }
  message = Broadcast(message, env.rank);
  std::istringstream in(message);
  in >> r.connect_address >> r.token >> r.job_id;
  BATON_CHECK(!r.token.empty(), "rank {} received no coordinator address from rank 0", env.rank);
  MPI_Finalize();
  return r;
}

}  // namespace baton
