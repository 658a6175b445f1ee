// Tests of the coordinator service through real gRPC on loopback: join, token, key-value store,
// barriers, reports, heartbeats and abort.
#include <fmt/format.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "core/error.h"
#include "proto/baton.grpc.pb.h"

namespace baton {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kGenerous{20000};  // safety limit only: tests pass far sooner

class CoordinatorTest : public ::testing::Test {
 protected:
  void StartServer(int world_size, double heartbeat_timeout_s = 0, bool keep_step_reports = false,
                   double startup_silence_s = 0) {
    CoordinatorOptions options;
    options.startup_silence_s = startup_silence_s;
    options.keep_step_reports = keep_step_reports;
    options.token = token_;
    options.job_id = "job-1";
    options.world_size = world_size;
    options.plan = "plan-bytes";
    options.heartbeat_timeout_s = heartbeat_timeout_s;
    server_.Start(options);
  }
  std::unique_ptr<CoordinatorClient> Connect(const std::string& token = "") {
    return std::make_unique<CoordinatorClient>(server_.address(), token.empty() ? token_ : token);
  }
  static JoinInfo Info(int rank, int world_size, int attempt = 0) {
    return JoinInfo{rank, world_size, "localhost", 1000 + rank, "cpu", "job-1", attempt};
  }
  std::unique_ptr<CoordinatorClient> ConnectAndJoin(int rank, int world_size) {
    auto client = Connect();
    client->Join(Info(rank, world_size));
    return client;
  }

  std::string token_ = MakeJobToken();
  CoordinatorServer server_;
};

std::string ErrorOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(CoordinatorTest, JoinDeliversThePlanAndAllJoinedReturns) {
  StartServer(2);
  auto a = Connect();
  auto b = Connect();
  EXPECT_EQ(a->Join(Info(0, 2)), "plan-bytes");
  EXPECT_EQ(b->Join(Info(1, 2)), "plan-bytes");
  EXPECT_EQ(a->rank(), 0);
  server_.WaitForAllJoined(kGenerous);
  auto ranks = server_.Ranks();
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_TRUE(ranks[1].joined);
  EXPECT_EQ(ranks[1].pid, 1001);
}

TEST_F(CoordinatorTest, WaitForAllJoinedNamesTheMissingRanks) {
  StartServer(3);
  auto a = ConnectAndJoin(1, 3);
  std::string error = ErrorOf([&] { server_.WaitForAllJoined(milliseconds(200)); });
  EXPECT_NE(error.find("ranks 0, 2 did not join"), std::string::npos) << error;
}

TEST_F(CoordinatorTest, JoiningATakenRankIsRefused) {
  StartServer(2);
  auto a = ConnectAndJoin(0, 2);
  auto b = Connect();
  std::string error = ErrorOf([&] { b->Join(Info(0, 2)); });
  EXPECT_NE(error.find("ALREADY_EXISTS"), std::string::npos) << error;
  EXPECT_NE(error.find("rank 0 already joined"), std::string::npos) << error;
}

TEST_F(CoordinatorTest, JoiningOutsideTheWorldOrAnotherJobIsRefused) {
  StartServer(2);
  auto client = Connect();
  std::string error = ErrorOf([&] { client->Join(Info(2, 2)); });
  EXPECT_NE(error.find("rank 2 is outside the world of 2 ranks"), std::string::npos) << error;
  JoinInfo other = Info(0, 2);
  other.job_id = "job-2";
  error = ErrorOf([&] { client->Join(other); });
  EXPECT_NE(error.find("another job"), std::string::npos) << error;
  error = ErrorOf([&] { client->Join(Info(0, 3)); });
  EXPECT_NE(error.find("expects a world of 3 ranks but the job has 2"), std::string::npos) << error;
}

TEST_F(CoordinatorTest, WrongTokenIsRefusedWithPermissionDenied) {
  StartServer(1);
  auto client = Connect("not-the-token");
  std::string error = ErrorOf([&] { client->Join(Info(0, 1)); });
  EXPECT_NE(error.find("PERMISSION_DENIED"), std::string::npos) << error;
  EXPECT_NE(error.find("wrong job token"), std::string::npos) << error;
}

TEST_F(CoordinatorTest, MissingTokenIsRefusedWithPermissionDenied) {
  StartServer(1);
  auto stub = pb::Coordinator::NewStub(
      grpc::CreateChannel(server_.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kGenerous);
  pb::KvSetRequest request;
  pb::KvSetResponse response;
  grpc::Status status = stub->KvSet(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(status.error_message().find("missing job token"), std::string::npos);
}

// A call that sends its metadata and then no message at all: the coordinator checks the token
// on the metadata, so a wrong one is refused without waiting for (or reading) a body. A server
// that read the message first would leave this call waiting until its deadline.
grpc::Status CallWithoutABody(const std::string& address, const std::string& method,
                              const std::string& token) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kGenerous);
  if (!token.empty()) context.AddMetadata("x-baton-token", token);
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &queue);
  void* tag = nullptr;
  bool ok = false;
  call->StartCall(reinterpret_cast<void*>(1));
  EXPECT_TRUE(queue.Next(&tag, &ok));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(2));
  EXPECT_TRUE(queue.Next(&tag, &ok));
  EXPECT_EQ(tag, reinterpret_cast<void*>(2));
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

TEST_F(CoordinatorTest, AWrongTokenIsRefusedBeforeTheMessageIsRead) {
  StartServer(1);
  for (const char* method : {"/baton.pb.Coordinator/KvSet", "/baton.pb.Coordinator/Join",
                             "/baton.pb.Coordinator/Watch"}) {
    grpc::Status status = CallWithoutABody(server_.address(), method, "not-the-token");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
    EXPECT_NE(status.error_message().find("wrong job token"), std::string::npos) << method;
    status = CallWithoutABody(server_.address(), method, "");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << method;
    EXPECT_NE(status.error_message().find("missing job token"), std::string::npos) << method;
  }
  grpc::Status status = CallWithoutABody(server_.address(), "/baton.pb.Coordinator/Nope", token_);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(CoordinatorTest, AWrongTokenWithAHugeMessageIsRefused) {
  StartServer(1);
  auto stub = pb::Coordinator::NewStub(
      grpc::CreateCustomChannel(server_.address(), grpc::InsecureChannelCredentials(), [] {
        grpc::ChannelArguments args;
        args.SetMaxSendMessageSize(64 << 20);
        return args;
      }()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kGenerous);
  context.AddMetadata("x-baton-token", "not-the-token");
  pb::KvSetRequest request;
  request.set_key("k");
  request.set_value(std::string(48 << 20, 'x'));
  pb::KvSetResponse response;
  const grpc::Status status = stub->KvSet(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  // The store is untouched and the coordinator serves the job's own calls.
  auto client = Connect();
  client->KvSet("k", "v");
  EXPECT_EQ(client->KvGet("k", kGenerous), "v");
}

TEST_F(CoordinatorTest, KvGetBlocksUntilALaterSet) {
  StartServer(2);
  auto reader = Connect();
  auto writer = Connect();
  std::atomic<bool> set_done = false;
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(100));
    set_done = true;
    writer->KvSet("nccl/id", std::string("\0\1\2", 3));
  });
  std::string value = reader->KvGet("nccl/id", kGenerous);
  EXPECT_TRUE(set_done);
  EXPECT_EQ(value, std::string("\0\1\2", 3));
  later.join();
  reader->KvWait({"nccl/id"}, kGenerous);
}

// An error's status text travels as gRPC metadata; the coordinator's carry rank tables that pass
// gRPC's default 8 KiB limit from about 80 ranks ("gRPC status 8: received initial metadata size
// exceeds limit" at 256 processes). A 200 KiB reason arrives whole.
TEST_F(CoordinatorTest, AnErrorTextLargerThanGrpcsDefaultMetadataLimitArrivesWhole) {
  StartServer(1);
  auto client = ConnectAndJoin(0, 1);
  std::string reason = "a rank table:";
  while (reason.size() < 200 * 1024) reason += fmt::format(" rank {} running;", reason.size());
  server_.RequestAbort(reason);
  const std::string error = ErrorOf([&] { client->KvGet("never/set", kGenerous); });
  EXPECT_NE(error.find(reason), std::string::npos) << error.substr(0, 300);
  EXPECT_EQ(error.find("metadata size exceeds limit"), std::string::npos) << error.substr(0, 300);
}

TEST_F(CoordinatorTest, KvGetTimeoutNamesTheKey) {
  StartServer(1);
  auto client = Connect();
  std::string error = ErrorOf([&] { client->KvGet("never/set", milliseconds(100)); });
  EXPECT_NE(error.find("DEADLINE_EXCEEDED"), std::string::npos) << error;
  EXPECT_NE(error.find("key 'never/set' was not set"), std::string::npos) << error;
}

TEST_F(CoordinatorTest, BarrierReleasesThreeClientsOnlyWhenAllArrived) {
  StartServer(3);
  std::atomic<int> arrived = 0;
  std::atomic<int> released_early = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      auto client = ConnectAndJoin(rank, 3);
      for (int round = 0; round < 2; ++round) {  // the same name, reused in sequence
        std::this_thread::sleep_for(milliseconds(20 * rank));
        arrived++;
        client->Barrier("step", kGenerous);
        if (arrived.load() < 3 * (round + 1)) released_early++;
        client->Barrier("after-step", kGenerous);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(arrived.load(), 6);
  EXPECT_EQ(released_early.load(), 0);
}

TEST_F(CoordinatorTest, BarrierTimeoutNamesTheMissingRanks) {
  StartServer(3);
  auto client = ConnectAndJoin(1, 3);
  std::string error = ErrorOf([&] { client->Barrier("init", milliseconds(100)); });
  EXPECT_NE(error.find("barrier 'init' timed out"), std::string::npos) << error;
  EXPECT_NE(error.find("waiting for ranks 0, 2"), std::string::npos) << error;
}

TEST_F(CoordinatorTest, AbortIsPushedToEveryWatchingClient) {
  StartServer(3);
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  std::atomic<int> callbacks = 0;
  for (int rank = 0; rank < 3; ++rank) {
    clients.push_back(ConnectAndJoin(rank, 3));
    clients.back()->OnAbort([&](const std::string&) { callbacks++; });
    clients.back()->Watch();
  }
  clients[2]->RequestAbort("out of memory", /*stage=*/2);
  for (auto& client : clients) {
    ASSERT_TRUE(client->WaitForAbort(kGenerous));
    EXPECT_NE(client->abort_reason().find("stage 2 (rank 2) asked to abort: out of memory"),
              std::string::npos)
        << client->abort_reason();
  }
  EXPECT_EQ(callbacks.load(), 3);
  EXPECT_TRUE(server_.aborted());
}

TEST_F(CoordinatorTest, BlockedCallsReturnAbortedWhenTheJobAborts) {
  StartServer(2);
  auto client = ConnectAndJoin(0, 2);
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    server_.RequestAbort("launcher stopped the job");
  });
  std::string error = ErrorOf([&] { client->Barrier("never", kGenerous); });
  aborter.join();
  EXPECT_NE(error.find("ABORTED"), std::string::npos) << error;
  EXPECT_TRUE(client->aborted());
  EXPECT_EQ(client->abort_reason(), "launcher stopped the job");
}

TEST_F(CoordinatorTest, HeartbeatAnswersCarryTheAbort) {
  StartServer(1);
  auto client = ConnectAndJoin(0, 1);
  client->StartHeartbeat(milliseconds(20));
  server_.RequestAbort("stop now");
  ASSERT_TRUE(client->WaitForAbort(kGenerous));
  EXPECT_EQ(client->abort_reason(), "stop now");
}

TEST_F(CoordinatorTest, SilentRankIsDeclaredDeadAndTheAbortNamesItsStage) {
  // The live rank heartbeats every 20 ms: a 2 s timeout cannot catch it even on a loaded machine.
  StartServer(2, /*heartbeat_timeout_s=*/2.0);
  auto alive = ConnectAndJoin(0, 2);
  auto silent = ConnectAndJoin(1, 2);
  WorkerReport report;
  report.stage = 1;
  silent->SetBlocked("RECV_B", 4, 0);
  silent->Report(report);  // one report, then silence
  report.stage = 0;
  alive->Report(report);
  alive->StartHeartbeat(milliseconds(20));
  ASSERT_TRUE(alive->WaitForAbort(kGenerous));
  EXPECT_NE(alive->abort_reason().find("stage 1 (rank 1) sent no heartbeat"), std::string::npos)
      << alive->abort_reason();
  EXPECT_NE(alive->abort_reason().find("RECV_B mb 4"), std::string::npos) << alive->abort_reason();
  EXPECT_TRUE(server_.Ranks()[1].dead);
  EXPECT_FALSE(server_.Ranks()[0].dead);
}

// Before its first step a rank may be silent for the start-up bound (hundreds of processes
// starting on few cores); after it, the heartbeat timeout applies.
TEST_F(CoordinatorTest, ARankStillStartingIsJudgedByTheStartUpSilenceBound) {
  StartServer(3, /*heartbeat_timeout_s=*/2.0, /*keep_step_reports=*/false,
              /*startup_silence_s=*/4.0);
  auto alive = ConnectAndJoin(0, 3);
  auto stepped = ConnectAndJoin(1, 3);
  auto starting = ConnectAndJoin(2, 3);
  WorkerReport report;
  report.stage = 2;
  starting->Report(report);  // a start-up report, then silence
  report.stage = 0;
  alive->Report(report);
  alive->StartHeartbeat(milliseconds(20));
  report.stage = 1;
  report.step = 1;
  report.metrics = {{"lr", 1e-3}};
  stepped->Report(report);
  stepped->StartHeartbeat(milliseconds(20));
  ASSERT_TRUE(alive->WaitForAbort(kGenerous));
  EXPECT_NE(alive->abort_reason().find("stage 2 (rank 2) sent no heartbeat for"), std::string::npos)
      << alive->abort_reason();
  EXPECT_NE(alive->abort_reason().find("(timeout 4.0 s, while starting)"), std::string::npos)
      << alive->abort_reason();
  EXPECT_FALSE(server_.Ranks()[1].dead);
}

TEST_F(CoordinatorTest, ReportsCarryTheBlockedActionToTheServer) {
  StartServer(1);
  auto client = ConnectAndJoin(0, 1);
  WorkerReport report;
  report.stage = 0;
  report.step = 7;
  report.loss = 2.5;
  report.memory_peak["activations"] = 1 << 20;
  client->Report(report);
  client->SetBlocked("RECV_F", 3, 2);
  client->StartHeartbeat(milliseconds(20));
  std::optional<BlockedAction> blocked;
  uint64_t version = 0;
  for (int i = 0; i < 1000 && !blocked; ++i) {
    version = server_.WaitForUpdate(version, milliseconds(20));
    auto latest = server_.LatestReport(0);
    if (latest && latest->blocked) blocked = latest->blocked;
  }
  ASSERT_TRUE(blocked.has_value());
  EXPECT_EQ(blocked->action, "RECV_F");
  EXPECT_EQ(blocked->micro_batch, 3);
  EXPECT_EQ(blocked->peer_rank, 2);
  EXPECT_GE(blocked->waiting_s, 0.0);
  auto latest = server_.LatestReport(0);
  EXPECT_EQ(latest->step, 7);
  EXPECT_EQ(latest->loss, 2.5);
  EXPECT_EQ(latest->memory_peak.at("activations"), 1 << 20);
  EXPECT_NE(FormatRankTable(server_.Ranks()).find("RECV_F"), std::string::npos);
}

TEST(RankTableTest, ReplicasGetAColumnAndTheirNames) {
  RankState a;
  a.rank = 3;
  a.joined = true;
  a.has_report = true;
  a.report.stage = 1;
  a.report.replica = 1;
  a.report.blocked = BlockedAction{"ALLREDUCE", -1, 1, 2.5};
  const std::string table = FormatRankTable({a});
  EXPECT_NE(table.find("replica"), std::string::npos) << table;
  EXPECT_NE(table.find("ALLREDUCE"), std::string::npos) << table;
  a.report.replica = -1;
  EXPECT_EQ(FormatRankTable({a}).find("replica"), std::string::npos);
  EXPECT_EQ(DescribeRank(3, 1, 1), "stage 1 replica 1 (rank 3)");
  EXPECT_EQ(DescribeRank(1, 1), "stage 1 (rank 1)");
}

TEST_F(CoordinatorTest, StepReportsKeepEachNewStepOnceInArrivalOrderUntilTaken) {
  StartServer(2, /*heartbeat_timeout_s=*/0, /*keep_step_reports=*/true);
  auto head = ConnectAndJoin(1, 2);
  auto first = ConnectAndJoin(0, 2);
  WorkerReport report;
  report.rank = 1;
  report.stage = 1;
  for (int64_t step : {1, 1, 2}) {  // the repeated step is what a heartbeat sends
    report.step = step;
    report.loss = 3.0 - static_cast<double>(step);
    head->Report(report);
  }
  WorkerReport other;
  other.stage = 0;
  other.step = 1;
  first->Report(other);
  const std::vector<WorkerReport> taken = server_.TakeStepReports();
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[0].rank, 1);
  EXPECT_EQ(taken[0].step, 1);
  EXPECT_EQ(taken[0].loss, 2.0);
  EXPECT_EQ(taken[1].rank, 1);
  EXPECT_EQ(taken[1].step, 2);
  EXPECT_EQ(taken[2].rank, 0);
  EXPECT_TRUE(server_.TakeStepReports().empty());
  // Neither done nor failed reports are steps; a reset forgets what was not taken.
  report.status = WorkerStatus::kDone;
  report.step = 3;
  head->Report(report);
  other.step = 2;
  first->Report(other);
  server_.ResetJob("plan-2");
  EXPECT_TRUE(server_.TakeStepReports().empty());
}

TEST_F(CoordinatorTest, StepReportsAreNotKeptUnlessAsked) {
  StartServer(1);
  auto client = ConnectAndJoin(0, 1);
  WorkerReport report;
  report.step = 1;
  client->Report(report);
  EXPECT_TRUE(server_.TakeStepReports().empty());
}

TEST_F(CoordinatorTest, FailedReportAbortsTheJobNamingTheStage) {
  StartServer(2);
  auto failing = ConnectAndJoin(0, 2);
  auto other = ConnectAndJoin(1, 2);
  other->Watch();
  WorkerReport report;
  report.stage = 0;
  report.status = WorkerStatus::kFailed;
  report.error = "RECV_F mb 2 timed out";
  failing->Report(report);
  ASSERT_TRUE(other->WaitForAbort(kGenerous));
  EXPECT_EQ(other->abort_reason(), "stage 0 (rank 0) failed: RECV_F mb 2 timed out");
}

TEST_F(CoordinatorTest, RunningRankWhoseWatchDropsIsDeclaredDead) {
  StartServer(2);
  auto survivor = ConnectAndJoin(0, 2);
  survivor->Watch();
  {
    auto dying = ConnectAndJoin(1, 2);
    dying->Watch();
    uint64_t version = 0;
    while (!server_.Ranks()[1].watching) version = server_.WaitForUpdate(version, kGenerous);
  }  // the client goes away while its rank is running
  ASSERT_TRUE(survivor->WaitForAbort(kGenerous));
  EXPECT_NE(survivor->abort_reason().find("rank 1 lost its connection"), std::string::npos)
      << survivor->abort_reason();
}

TEST_F(CoordinatorTest, DoneRanksMayLeaveWithoutAborting) {
  StartServer(1);
  {
    auto client = ConnectAndJoin(0, 1);
    client->Watch();
    WorkerReport report;
    report.status = WorkerStatus::kDone;
    client->Report(report);
  }
  EXPECT_TRUE(server_.AllDone());
  EXPECT_FALSE(server_.aborted());
}

TEST_F(CoordinatorTest, AReportAfterDoneCannotReopenTheRank) {
  StartServer(2);
  auto other = ConnectAndJoin(1, 2);
  other->Watch();
  {
    auto client = ConnectAndJoin(0, 2);
    client->Watch();
    WorkerReport done;
    done.status = WorkerStatus::kDone;
    client->Report(done);
    WorkerReport late;  // a heartbeat that was in flight when the rank finished
    late.status = WorkerStatus::kRunning;
    late.step = 7;
    client->Report(late);
    WorkerReport failed;
    failed.status = WorkerStatus::kFailed;
    failed.error = "late";
    client->Report(failed);
  }  // and then the process leaves: wait until the server has seen its watch end
  uint64_t version = 0;
  while (server_.Ranks()[0].watching) version = server_.WaitForUpdate(version, kGenerous);
  WorkerReport done;
  done.status = WorkerStatus::kDone;
  other->Report(done);
  EXPECT_EQ(server_.Ranks()[0].report.status, WorkerStatus::kDone);
  EXPECT_TRUE(server_.AllDone());
  EXPECT_FALSE(server_.aborted()) << server_.abort_reason();
}

TEST_F(CoordinatorTest, ShutdownEndsEveryWatch) {
  StartServer(1);
  auto client = ConnectAndJoin(0, 1);
  client->Watch();
  uint64_t version = 0;
  while (!server_.Ranks()[0].watching) version = server_.WaitForUpdate(version, kGenerous);
  server_.Shutdown();
  ASSERT_TRUE(client->WaitForAbort(kGenerous));
  EXPECT_NE(client->abort_reason().find("shut down"), std::string::npos) << client->abort_reason();
}

TEST_F(CoordinatorTest, ClientAbortsItselfWhenTheCoordinatorIsGone) {
  StartServer(1);
  CoordinatorClientOptions options;
  options.lost_coordinator_timeout = milliseconds(300);
  CoordinatorClient client(server_.address(), token_, options);
  client.Join(Info(0, 1));
  client.StartHeartbeat(milliseconds(20));
  server_.Shutdown();
  ASSERT_TRUE(client.WaitForAbort(kGenerous));
  EXPECT_NE(client.abort_reason().find("lost contact with the coordinator"), std::string::npos)
      << client.abort_reason();
}

TEST_F(CoordinatorTest, ResetJobAcceptsTheSameRanksAgainForTheNextAttemptOnly) {
  StartServer(1);
  const std::string early = ErrorOf([&] { Connect()->Join(Info(0, 1, /*attempt=*/1)); });
  EXPECT_NE(early.find("rank 0 was started for attempt 1 but the job is at attempt 0"),
            std::string::npos)
      << early;
  auto first = ConnectAndJoin(0, 1);
  first->KvSet("k", "v1");
  server_.RequestAbort("restart");
  server_.ResetJob("plan-2");
  EXPECT_EQ(server_.attempt(), 1);
  const std::string stale = ErrorOf([&] { Connect()->Join(Info(0, 1, /*attempt=*/0)); });
  EXPECT_NE(stale.find("started for attempt 0 but the job is at attempt 1"), std::string::npos)
      << stale;
  auto second = Connect();
  EXPECT_EQ(second->Join(Info(0, 1, /*attempt=*/1)), "plan-2");
  EXPECT_FALSE(server_.aborted());
  EXPECT_NE(ErrorOf([&] { second->KvGet("k", milliseconds(50)); }).find("not set"),
            std::string::npos);
}

// Agents (mpirun / srun) report their workers' exits and learn what comes next.

TEST_F(CoordinatorTest, AgentsFailedWorkerExitAbortsNamingTheStageAndResetAnnouncesTheRestart) {
  StartServer(2);
  auto agent0 = Connect();
  auto agent1 = Connect();
  std::optional<std::string> abort_seen;
  std::thread watch([&] { abort_seen = agent0->AwaitAbort(0, 0, kGenerous); });
  // Rank 1's worker was killed: the attempt aborts naming it; nothing is decided yet.
  const JobNext pending = agent1->ReportWorkerExit(0, WorkerExit{1, 0, 9}, milliseconds(50));
  EXPECT_EQ(pending.kind, JobNext::Kind::kPending);
  EXPECT_TRUE(server_.aborted());
  EXPECT_NE(server_.abort_reason().find("rank 1 worker process killed by signal 9"),
            std::string::npos)
      << server_.abort_reason();
  watch.join();
  ASSERT_TRUE(abort_seen.has_value());
  EXPECT_EQ(*abort_seen, server_.abort_reason());
  EXPECT_EQ(server_.WaitForWorkerExits(milliseconds(50)), std::vector<int>{0});

  // Rank 0's worker exits too; once both are in, the launcher starts attempt 1.
  JobNext next0;
  std::thread report0([&] { next0 = agent0->ReportWorkerExit(0, WorkerExit{0, 1, 0}, kGenerous); });
  EXPECT_TRUE(server_.WaitForWorkerExits(kGenerous).empty());
  const std::vector<WorkerExit> exits = server_.WorkerExits();
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(exits[0].rank, 1);
  EXPECT_EQ(exits[0].Describe(), "killed by signal 9 (Killed)");
  EXPECT_EQ(exits[1].rank, 0);
  EXPECT_EQ(exits[1].Describe(), "exited with code 1");
  server_.ResetJob("plan-2");
  report0.join();
  EXPECT_EQ(next0.kind, JobNext::Kind::kRestart);
  EXPECT_EQ(next0.attempt, 1);
  const JobNext next1 = agent1->ReportWorkerExit(0, WorkerExit{1, 0, 9}, kGenerous);
  EXPECT_EQ(next1.kind, JobNext::Kind::kRestart);
  EXPECT_EQ(next1.attempt, 1);
  EXPECT_TRUE(server_.WorkerExits().empty());  // attempt 1 has none yet
  EXPECT_FALSE(server_.aborted());
}

TEST_F(CoordinatorTest, AgentsLearnHowTheJobEnded) {
  StartServer(2);
  auto agent0 = Connect();
  auto agent1 = Connect();
  // A clean exit aborts nothing; the watch of that rank ends with it.
  std::optional<std::string> abort_seen = std::string("(still waiting)");
  std::thread watch([&] { abort_seen = agent0->AwaitAbort(0, 0, kGenerous); });
  std::vector<JobNext> next(2);
  std::thread report0([&] {
    next[0] = agent0->ReportWorkerExit(0, WorkerExit{0, 0, 0}, kGenerous);
  });
  watch.join();
  EXPECT_FALSE(abort_seen.has_value()) << *abort_seen;
  EXPECT_FALSE(server_.aborted());
  std::thread report1([&] {
    next[1] = agent1->ReportWorkerExit(0, WorkerExit{1, 0, 0}, kGenerous);
  });
  EXPECT_TRUE(server_.WaitForWorkerExits(kGenerous).empty());
  EXPECT_FALSE(server_.WaitForAgentsToLearnTheEnd(milliseconds(50)));
  server_.EndJob(/*succeeded=*/true, "");
  server_.EndJob(/*succeeded=*/false, "too late: the first end wins");
  report0.join();
  report1.join();
  EXPECT_TRUE(server_.WaitForAgentsToLearnTheEnd(kGenerous));
  for (const JobNext& n : next) {
    EXPECT_EQ(n.kind, JobNext::Kind::kEnd);
    EXPECT_TRUE(n.succeeded);
  }
  EXPECT_FALSE(server_.aborted());
}

TEST_F(CoordinatorTest, AFailedEndAbortsTheAttemptAndTellsTheAgentsWhy) {
  StartServer(1);
  auto agent = Connect();
  server_.EndJob(/*succeeded=*/false, "stage 0 failed: boom");
  EXPECT_TRUE(server_.aborted());
  EXPECT_EQ(agent->AwaitAbort(0, 0, kGenerous), std::optional<std::string>("stage 0 failed: boom"));
  const JobNext next = agent->ReportWorkerExit(0, WorkerExit{0, 1, 0}, kGenerous);
  EXPECT_EQ(next.kind, JobNext::Kind::kEnd);
  EXPECT_FALSE(next.succeeded);
  EXPECT_EQ(next.reason, "stage 0 failed: boom");
}

}  // namespace
}  // namespace baton
