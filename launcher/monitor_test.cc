// JobMonitor's failure headline: of the ranks that failed, it names the first cause (the rank
// whose failure aborted the job), not a rank that failed only because of the abort, whichever
// exits first.
#include "launcher/monitor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <regex>
#include <thread>

#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_server.h"

namespace baton {
namespace {

using std::chrono::milliseconds;

class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions options;
    options.token = token_;
    options.job_id = "job-1";
    options.world_size = 2;
    options.plan = "plan-bytes";
    server_.Start(options);
    for (int rank = 0; rank < 2; ++rank) {
      clients_.push_back(std::make_unique<CoordinatorClient>(server_.address(), token_));
      clients_.back()->Join(JoinInfo{rank, 2, "localhost", 1000 + rank, "cpu", "job-1", 0});
    }
  }
  void Fail(int rank, const std::string& error) {
    WorkerReport report;
    report.stage = rank;
    report.status = WorkerStatus::kFailed;
    report.error = error;
    clients_[rank]->Report(report);
  }
  void Exit(int rank, int code, int signal = 0) {
    WorkerExit exit;
    exit.rank = rank;
    exit.exit_code = code;
    exit.signal = signal;
    clients_[rank]->ReportWorkerExit(0, exit, milliseconds(0));  // recorded; no need to wait
  }
  std::string Failure(milliseconds cause_wait = MonitorOptions().cause_wait) {
    MonitorOptions options;
    options.layout = ParallelLayout(/*stages=*/2, /*tensor=*/1, /*replicas=*/1);
    options.cause_wait = cause_wait;
    JobMonitor monitor(server_, nullptr, options, nullptr);
    std::optional<std::string> failure = monitor.Run();
    EXPECT_TRUE(failure.has_value());
    return failure.value_or("");
  }
  std::string Headline() {
    const std::string text = Failure();
    return text.substr(0, text.find('\n'));
  }

  std::string token_ = MakeJobToken();
  CoordinatorServer server_;
  std::vector<std::unique_ptr<CoordinatorClient>> clients_;
};

TEST_F(MonitorTest, TheRankThatFailedFirstIsNamedThoughAnAbortedRankExitedBeforeIt) {
  Fail(1, "writing the checkpoint: No space left on device");
  Fail(0, "job aborted: stage 1 (rank 1) failed: writing the checkpoint: No space left on device");
  Exit(0, 1);  // the aborted rank leaves first
  Exit(1, 1);
  EXPECT_EQ(Headline(),
            "stage 1 failed (exited with code 1): writing the checkpoint: No space left on device");
}

TEST_F(MonitorTest, TheRankThatFailedFirstIsNamedBeforeItHasExited) {
  Fail(1, "writing the checkpoint: No space left on device");
  Fail(0, "job aborted: stage 1 (rank 1) failed: writing the checkpoint: No space left on device");
  Exit(0, 1);
  EXPECT_EQ(Headline(),
            "stage 1 failed (still exiting): writing the checkpoint: No space left on device");
}

TEST_F(MonitorTest, TheFirstFailureIsNamedBeforeAnyWorkerHasExited) {
  Fail(1, "writing the checkpoint: No space left on device");
  Fail(0, "job aborted: stage 1 (rank 1) failed: writing the checkpoint: No space left on device");
  EXPECT_EQ(Headline(), "stage 1 failed: writing the checkpoint: No space left on device");
}

// The issue's crash: rank 0 dies of SIGABRT; rank 1's "connection reset" report, which aborts the
// job, and its exit reach rank 0 (the monitor) before rank 0's agent reports the signal. The
// headline is the rank that died, and the table shows both as exited, not rank 0 as running.
TEST_F(MonitorTest, TheRankKilledByASignalIsNamedThoughAPeersFailureAndExitCameFirst) {
  Fail(1, "receiving the activation of micro-batch 3 from rank 0: Connection reset by peer");
  Exit(1, 1);
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(200));  // any moment: the monitor waits for a cause
    Exit(0, 0, 6);
  });
  const std::string text = Failure(std::chrono::minutes(5));  // ends at rank 0's exit
  late.join();
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "stage 0 worker process killed by signal 6 (Aborted) (not started)")
      << text;
  // Rank 0 exited (how, in the note), rank 1 failed (its error): neither is "running".
  EXPECT_TRUE(std::regex_search(
      text, std::regex(R"(\n\s+0\s+-\s+exited\s.*worker process killed by signal 6 \(Aborted\))")))
      << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\n\s+1\s+1\s+failed\s.*Connection reset)")))
      << text;
  EXPECT_EQ(text.find("running"), std::string::npos) << text;
}

TEST(TensorGroupHostsTest, GroupsSplitAcrossHostsAreNamedOnceEveryRankHasJoined) {
  // 2 stages x 2 tensor ranks: groups {0, 1} and {2, 3}.
  std::vector<RankState> ranks(4);
  const char* hosts[] = {"a", "a", "a", "b"};
  for (int r = 0; r < 4; ++r) {
    ranks[static_cast<size_t>(r)].rank = r;
    ranks[static_cast<size_t>(r)].joined = true;
    ranks[static_cast<size_t>(r)].host = hosts[r];
  }
  const std::optional<std::string> warning =
      TensorGroupsAcrossHosts(ranks, ParallelLayout(2, 2, 1));
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("1 of the job's tensor-parallel groups span hosts (ranks 2-3 on a, b)"),
            std::string::npos)
      << *warning;
  EXPECT_FALSE(
      TensorGroupsAcrossHosts(ranks, ParallelLayout(4, 1, 1)).has_value());  // no tensor groups
  ranks[3].host = "a";
  EXPECT_FALSE(TensorGroupsAcrossHosts(ranks, ParallelLayout(2, 2, 1))
                   .has_value());  // each group on one host
  ranks[3].host = "b";
  ranks[1].joined = false;
  EXPECT_FALSE(TensorGroupsAcrossHosts(ranks, ParallelLayout(2, 2, 1))
                   .has_value());  // not every rank is known yet
}

}  // namespace
}  // namespace baton
