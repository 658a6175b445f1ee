// ListenHostFor: the address a rank's transport listens on in a multi-node job; torchrun's
// variables read as a launch environment and a rendezvous.
#include "launcher/mpi_bootstrap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/scoped_env.h"
#include "launcher/environment.h"

namespace baton {
namespace {

TEST(ListenHostTest, ALoopbackCoordinatorMeansLoopback) {
  ScopedEnv none("BATON_HOST", nullptr);
  EXPECT_EQ(ListenHostFor("127.0.0.1:29500"), "127.0.0.1");
  EXPECT_EQ(ListenHostFor("localhost:29500"), "127.0.0.1");
}

TEST(ListenHostTest, BatonHostWins) {
  ScopedEnv host("BATON_HOST", "10.9.8.7");
  EXPECT_EQ(ListenHostFor("127.0.0.1:29500"), "10.9.8.7");
}

TEST(ListenHostTest, AnUnresolvableCoordinatorNamesItAndBatonHost) {
  ScopedEnv none("BATON_HOST", nullptr);
  try {
    ListenHostFor("no-such-host.invalid:29500");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the coordinator's host no-such-host.invalid does not resolve"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("set BATON_HOST"), std::string::npos) << what;
  }
  EXPECT_THROW(ListenHostFor("no-port"), Error);
}

// torchrun's variables for rank 2 of 4 on 10.1.2.3, no other launcher's.
struct TorchrunVariables {
  ScopedEnv rank{"RANK", "2"}, world{"WORLD_SIZE", "4"}, local{"LOCAL_RANK", "1"};
  ScopedEnv addr{"MASTER_ADDR", "10.1.2.3"}, port{"MASTER_PORT", "29500"};
  ScopedEnv run_id{"TORCHELASTIC_RUN_ID", nullptr}, coordinator{"BATON_COORDINATOR", nullptr};
  ScopedEnv token{"BATON_TOKEN", nullptr}, mpi{"OMPI_COMM_WORLD_RANK", nullptr};
  ScopedEnv slurm{"SLURM_PROCID", nullptr};
};

TEST(TorchrunTest, ItsVariablesAreTheRankTheWorldAndTheCoordinator) {
  TorchrunVariables vars;
  LaunchEnvironment env = DetectLaunchEnvironment();
  EXPECT_EQ(env.mode, LaunchMode::kTorchrun);
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.coordinator, "10.1.2.3:29500");  // a PyTorchJob pod running baton itself
  {
    ScopedEnv agent("TORCHELASTIC_RUN_ID", "job7");  // torchrun's agent holds MASTER_PORT
    EXPECT_EQ(DetectLaunchEnvironment().coordinator, "10.1.2.3:29501");
    ScopedEnv explicit_address("BATON_COORDINATOR", "10.9.9.9:1234");
    EXPECT_EQ(DetectLaunchEnvironment(LauncherChoice::kTorchrun).coordinator, "10.9.9.9:1234");
  }
  EXPECT_EQ(DetectLaunchEnvironment(LauncherChoice::kLocal).mode, LaunchMode::kLocal);
  {
    ScopedEnv mpi("OMPI_COMM_WORLD_RANK", "0"), mpi_size("OMPI_COMM_WORLD_SIZE", "1");
    EXPECT_EQ(DetectLaunchEnvironment().mode, LaunchMode::kMpi);  // Open MPI's first
  }
  ScopedEnv no_addr("MASTER_ADDR", nullptr);
  EXPECT_EQ(DetectLaunchEnvironment().mode, LaunchMode::kLocal);
  try {
    DetectLaunchEnvironment(LauncherChoice::kTorchrun);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK, WORLD_SIZE and MASTER_ADDR are not all set"),
              std::string::npos)
        << e.what();
  }
}

// Every rank derives the same token from the rendezvous without BATON_TOKEN (another job's
// differs), and takes BATON_TOKEN where it is set.
TEST(TorchrunTest, EveryRankAgreesOnTheTokenAndTheJob) {
  TorchrunVariables vars;
  ScopedEnv agent("TORCHELASTIC_RUN_ID", "job7");
  const LaunchEnvironment env = DetectLaunchEnvironment();
  const JobRendezvous mine = ShareCoordinator(env, "");
  EXPECT_EQ(mine.bind_address, "10.1.2.3:29501");
  EXPECT_EQ(mine.connect_address, "10.1.2.3:29501");
  EXPECT_EQ(mine.job_id, "job7");
  EXPECT_EQ(mine.token.size(), 16u);
  LaunchEnvironment rank0 = env;
  rank0.rank = 0;
  EXPECT_EQ(ShareCoordinator(rank0, "").token, mine.token);
  {
    ScopedEnv other_job("TORCHELASTIC_RUN_ID", "job8");
    EXPECT_NE(ShareCoordinator(DetectLaunchEnvironment(), "").token, mine.token);
  }
  ScopedEnv secret("BATON_TOKEN", "s3cret");
  EXPECT_EQ(ShareCoordinator(env, "").token, "s3cret");
}

}  // namespace
}  // namespace baton
