// The coordinator's gRPC service: token checks and message conversion around CoordinatorState.
#include "coordinator/coordinator_server.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <random>
#include <thread>

#include "coordinator/convert.h"
#include "coordinator/coordinator_state.h"
#include "core/error.h"
#include "core/units.h"
#include "proto/baton.grpc.pb.h"

namespace baton {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

Clock::time_point DeadlineAfterMs(int64_t timeout_ms) {
  return Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
}

class CoordinatorService final : public pb::Coordinator::Service {
 public:
  explicit CoordinatorService(CoordinatorState& state) : state_(state) {}

  Status Join(ServerContext* context, const pb::JoinRequest* request,
              pb::JoinResponse* response) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    std::string plan;
    Status status = state_.Join(FromProto(*request), &plan);
    if (!status.ok()) return status;
    response->set_plan(std::move(plan));
    response->set_world_size(request->world_size());
    response->set_job_id(request->job_id());
    return Status::OK;
  }

  Status KvSet(ServerContext* context, const pb::KvSetRequest* request,
               pb::KvSetResponse*) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    return state_.KvSet(request->key(), request->value());
  }

  Status KvGet(ServerContext* context, const pb::KvGetRequest* request,
               pb::KvGetResponse* response) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    return state_.KvGet(request->key(), DeadlineAfterMs(request->timeout_ms()), Cancelled(context),
                        response->mutable_value());
  }

  Status KvWait(ServerContext* context, const pb::KvWaitRequest* request,
                pb::KvWaitResponse*) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    std::vector<std::string> keys(request->keys().begin(), request->keys().end());
    return state_.KvWait(keys, DeadlineAfterMs(request->timeout_ms()), Cancelled(context));
  }

  Status Barrier(ServerContext* context, const pb::BarrierRequest* request,
                 pb::BarrierResponse*) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    return state_.Barrier(request->name(), request->rank(), DeadlineAfterMs(request->timeout_ms()),
                          Cancelled(context));
  }

  Status Report(ServerContext* context, const pb::ReportRequest* request,
                pb::ReportResponse* response) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    std::string abort_reason;
    Status status = state_.Report(FromProto(*request), &abort_reason);
    if (!status.ok()) return status;
    response->set_abort(!abort_reason.empty());
    response->set_abort_reason(abort_reason);
    return Status::OK;
  }

  Status Abort(ServerContext* context, const pb::AbortRequest* request,
               pb::AbortResponse*) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    std::string who = request->rank() < 0 ? std::string("the launcher")
                                          : DescribeRank(request->rank(), request->stage());
    state_.Abort(fmt::format("{} asked to abort: {}", who, request->reason()));
    return Status::OK;
  }

  Status Watch(ServerContext* context, const pb::WatchRequest* request,
               grpc::ServerWriter<pb::Event>* writer) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    pb::Event event;
    event.set_kind(pb::Event::KIND_WATCHING);  // tells the client the watch is established
    writer->Write(event);
    bool abort = false;
    std::string reason;
    Status status = state_.WatchRank(request->rank(), Cancelled(context), &abort, &reason);
    if (!status.ok() || reason.empty()) return status;  // refused, or the client went away
    event.set_kind(abort ? pb::Event::KIND_ABORT : pb::Event::KIND_SHUTDOWN);
    event.set_reason(reason);
    writer->Write(event);
    return Status::OK;
  }

  Status AwaitAbort(ServerContext* context, const pb::AwaitAbortRequest* request,
                    pb::AwaitAbortResponse* response) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    bool aborted = false;
    std::string reason;
    Status status = state_.AwaitAbort(request->rank(), request->attempt(),
                                      DeadlineAfterMs(request->timeout_ms()), Cancelled(context),
                                      &aborted, &reason);
    response->set_aborted(aborted);
    response->set_reason(reason);
    return status;
  }

  Status WorkerExited(ServerContext* context, const pb::WorkerExitRequest* request,
                      pb::WorkerExitResponse* response) override {
    if (Status status = CheckToken(context); !status.ok()) return status;
    WorkerExit exit;
    exit.rank = request->rank();
    exit.exit_code = request->exit_code();
    exit.signal = request->signal();
    JobNext next;
    Status status =
        state_.WorkerExited(request->attempt(), exit, DeadlineAfterMs(request->timeout_ms()),
                            Cancelled(context), &next);
    if (!status.ok()) return status;
    switch (next.kind) {
      case JobNext::Kind::kPending:
        response->set_next(pb::WorkerExitResponse::NEXT_PENDING);
        break;
      case JobNext::Kind::kRestart:
        response->set_next(pb::WorkerExitResponse::NEXT_RESTART);
        break;
      case JobNext::Kind::kEnd:
        response->set_next(pb::WorkerExitResponse::NEXT_END);
        break;
    }
    response->set_attempt(next.attempt);
    response->set_succeeded(next.succeeded);
    response->set_reason(next.reason);
    return Status::OK;
  }

 private:
  Status CheckToken(ServerContext* context) const {
    const auto& metadata = context->client_metadata();
    auto it = metadata.find(kTokenMetadataKey);
    if (it == metadata.end()) {
      return Status(StatusCode::PERMISSION_DENIED,
                    fmt::format("missing job token: every call must carry the job's secret in "
                                "metadata '{}'",
                                kTokenMetadataKey));
    }
    if (!state_.TokenMatches(std::string_view(it->second.data(), it->second.size()))) {
      return Status(StatusCode::PERMISSION_DENIED,
                    "wrong job token: this coordinator serves another job (or the token is stale)");
    }
    return Status::OK;
  }

  static CoordinatorState::Cancelled Cancelled(ServerContext* context) {
    return [context] { return context->IsCancelled(); };
  }

  CoordinatorState& state_;
};

}  // namespace

struct CoordinatorServer::Impl {
  std::unique_ptr<CoordinatorState> state;
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<grpc::Server> server;
  std::string host;
  std::thread monitor;
  std::mutex mutex;
  std::condition_variable stop_cv;
  bool stop = false;
  std::mutex shutdown_mutex;
  bool shut_down = false;

  CoordinatorState& State() const {
    BATON_CHECK(state != nullptr, "the coordinator is not started");
    return *state;
  }
};

CoordinatorServer::CoordinatorServer() : impl_(std::make_unique<Impl>()) {}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

int CoordinatorServer::Start(const CoordinatorOptions& options) {
  BATON_CHECK(!impl_->server, "the coordinator is already started");
  size_t colon = options.address.rfind(':');
  BATON_CHECK(colon != std::string::npos, "coordinator address '{}' is not host:port",
              options.address);
  impl_->host = options.address.substr(0, colon);
  impl_->state = std::make_unique<CoordinatorState>(options);
  impl_->service = std::make_unique<CoordinatorService>(*impl_->state);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(impl_->service.get());
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  impl_->server = builder.BuildAndStart();
  BATON_CHECK(impl_->server && port_ > 0, "the coordinator could not bind {}", options.address);

  impl_->monitor = std::thread([impl = impl_.get()] {
    std::unique_lock lock(impl->mutex);
    while (
        !impl->stop_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return impl->stop; })) {
      impl->state->CheckLiveness();
    }
  });
  return port_;
}

std::string CoordinatorServer::address() const { return fmt::format("{}:{}", impl_->host, port_); }

void CoordinatorServer::WaitForAllJoined(std::chrono::milliseconds timeout) {
  impl_->State().WaitForAllJoined(timeout);
}

std::vector<RankState> CoordinatorServer::Ranks() const { return impl_->State().Ranks(); }

std::optional<WorkerReport> CoordinatorServer::LatestReport(int rank) const {
  for (const RankState& state : impl_->State().Ranks()) {
    if (state.rank == rank && state.has_report) return state.report;
  }
  return std::nullopt;
}

uint64_t CoordinatorServer::WaitForUpdate(uint64_t seen, std::chrono::milliseconds timeout) const {
  return impl_->State().WaitForUpdate(seen, timeout);
}

bool CoordinatorServer::AllDone() const { return impl_->State().AllDone(); }

std::vector<WorkerReport> CoordinatorServer::TakeStepReports() {
  return impl_->State().TakeStepReports();
}

void CoordinatorServer::RequestAbort(const std::string& reason) { impl_->State().Abort(reason); }

bool CoordinatorServer::aborted() const { return impl_->State().aborted(); }

std::string CoordinatorServer::abort_reason() const { return impl_->State().abort_reason(); }

int CoordinatorServer::abort_rank() const { return impl_->State().abort_rank(); }

void CoordinatorServer::ResetJob(const std::string& plan) { impl_->State().Reset(plan); }

int CoordinatorServer::attempt() const { return impl_->State().attempt(); }

std::vector<WorkerExit> CoordinatorServer::WorkerExits() const {
  return impl_->State().WorkerExits();
}

std::vector<int> CoordinatorServer::WaitForWorkerExits(std::chrono::milliseconds timeout) {
  return impl_->State().WaitForWorkerExits(timeout);
}

void CoordinatorServer::EndJob(bool succeeded, const std::string& reason) {
  impl_->State().EndJob(succeeded, reason);
}

bool CoordinatorServer::ended() const { return impl_->State().ended(); }

bool CoordinatorServer::WaitForAgentsToLearnTheEnd(std::chrono::milliseconds timeout) {
  return impl_->State().WaitForAgentsToLearnTheEnd(timeout);
}

void CoordinatorServer::Shutdown() {
  std::lock_guard shutdown_lock(impl_->shutdown_mutex);
  if (!impl_->server || impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->state->Shutdown();  // wakes blocked calls; Watch streams send SHUTDOWN and end
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->stop_cv.notify_all();
  if (impl_->monitor.joinable()) impl_->monitor.join();
}

std::string MakeJobToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", device());
  return token;
}

}  // namespace baton
