// The coordinator's gRPC service: token checks and message conversion around CoordinatorState,
// served through gRPC's generic callback API so that the token is checked before any message
// is read.
#include "coordinator/coordinator_server.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "coordinator/convert.h"
#include "coordinator/coordinator_state.h"
#include "core/error.h"
#include "core/happens_before.h"
#include "core/units.h"
#include "proto/baton.grpc.pb.h"

namespace baton {
namespace {

using grpc::Status;
using grpc::StatusCode;

Clock::time_point DeadlineAfterMs(int64_t timeout_ms) {
  return Clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
}

using Cancelled = CoordinatorState::Cancelled;

// The service's methods over CoordinatorState, each a function of the parsed request (the call's
// token already checked) to its response and status.
class CoordinatorHandlers {
 public:
  explicit CoordinatorHandlers(CoordinatorState& state) : state_(state) {}

  Status Join(const pb::JoinRequest& request, pb::JoinResponse* response, const Cancelled&) {
    std::string plan;
    Status status = state_.Join(FromProto(request), &plan);
    if (!status.ok()) return status;
    response->set_plan(std::move(plan));
    response->set_world_size(request.world_size());
    response->set_job_id(request.job_id());
    return Status::OK;
  }

  Status KvSet(const pb::KvSetRequest& request, pb::KvSetResponse*, const Cancelled&) {
    return state_.KvSet(request.key(), request.value());
  }

  Status KvGet(const pb::KvGetRequest& request, pb::KvGetResponse* response,
               const Cancelled& cancelled) {
    return state_.KvGet(request.key(), DeadlineAfterMs(request.timeout_ms()), cancelled,
                        response->mutable_value());
  }

  Status KvWait(const pb::KvWaitRequest& request, pb::KvWaitResponse*, const Cancelled& cancelled) {
    std::vector<std::string> keys(request.keys().begin(), request.keys().end());
    return state_.KvWait(keys, DeadlineAfterMs(request.timeout_ms()), cancelled);
  }

  Status Barrier(const pb::BarrierRequest& request, pb::BarrierResponse*,
                 const Cancelled& cancelled) {
    return state_.Barrier(request.name(), request.rank(), DeadlineAfterMs(request.timeout_ms()),
                          cancelled);
  }

  Status Report(const pb::ReportRequest& request, pb::ReportResponse* response, const Cancelled&) {
    std::string abort_reason;
    Status status = state_.Report(FromProto(request), &abort_reason);
    if (!status.ok()) return status;
    response->set_abort(!abort_reason.empty());
    response->set_abort_reason(abort_reason);
    return Status::OK;
  }

  Status Abort(const pb::AbortRequest& request, pb::AbortResponse*, const Cancelled&) {
    std::string who = request.rank() < 0 ? std::string("the launcher")
                                         : DescribeRank(request.rank(), request.stage());
    state_.Abort(fmt::format("{} asked to abort: {}", who, request.reason()));
    return Status::OK;
  }

  // A stream: `write` sends one event (false once the client is gone).
  Status Watch(const pb::WatchRequest& request, const std::function<bool(const pb::Event&)>& write,
               const Cancelled& cancelled) {
    pb::Event event;
    event.set_kind(pb::Event::KIND_WATCHING);  // tells the client the watch is established
    write(event);
    bool abort = false;
    std::string reason;
    Status status = state_.WatchRank(request.rank(), cancelled, &abort, &reason);
    if (!status.ok() || reason.empty()) return status;  // refused, or the client went away
    event.set_kind(abort ? pb::Event::KIND_ABORT : pb::Event::KIND_SHUTDOWN);
    event.set_reason(reason);
    write(event);
    return Status::OK;
  }

  Status AwaitAbort(const pb::AwaitAbortRequest& request, pb::AwaitAbortResponse* response,
                    const Cancelled& cancelled) {
    bool aborted = false;
    std::string reason;
    Status status =
        state_.AwaitAbort(request.rank(), request.attempt(), DeadlineAfterMs(request.timeout_ms()),
                          cancelled, &aborted, &reason);
    response->set_aborted(aborted);
    response->set_reason(reason);
    return status;
  }

  Status WorkerExited(const pb::WorkerExitRequest& request, pb::WorkerExitResponse* response,
                      const Cancelled& cancelled) {
    WorkerExit exit;
    exit.rank = request.rank();
    exit.exit_code = request.exit_code();
    exit.signal = request.signal();
    JobNext next;
    Status status = state_.WorkerExited(request.attempt(), exit,
                                        DeadlineAfterMs(request.timeout_ms()), cancelled, &next);
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

  Status CheckToken(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
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

 private:
  CoordinatorState& state_;
};

// Runs a handler's calls on threads of their own (they block: barriers, waits, watches) and
// lets the server's shutdown wait until the last has finished. Every thread is joined: by the
// next Start once it has finished, or by WaitUntilIdle, so none outlives the server.
class CallThreads {
 public:
  ~CallThreads() { WaitUntilIdle(); }

  void Start(std::function<void()> body) {
    std::lock_guard lock(mutex_);
    JoinFinishedLocked();
    const uint64_t id = next_id_++;
    running_.emplace(id, std::thread([this, id, body = std::move(body)]() mutable {
                       body();
                       body = nullptr;  // its captures go before the thread counts as finished
                       std::lock_guard lock(mutex_);
                       finished_.push_back(id);
                       idle_.notify_all();
                     }));
  }

  void WaitUntilIdle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return finished_.size() == running_.size(); });
    JoinFinishedLocked();
  }

 private:
  // A finished thread only returns from its body: joining it waits no longer than that.
  void JoinFinishedLocked() {
    for (uint64_t id : finished_) {
      auto it = running_.find(id);
      it->second.join();
      running_.erase(it);
    }
    finished_.clear();
  }

  std::mutex mutex_;
  std::condition_variable idle_;
  std::map<uint64_t, std::thread> running_;  // started and not yet joined
  std::vector<uint64_t> finished_;           // of those, the ones whose body has returned
  uint64_t next_id_ = 0;
};

// One call of any method, served generically so that the token is checked on the call's
// metadata before its message is read: a call with a wrong or missing token is refused at once
// and its body, however large, is never read (HTTP/2 flow control stops the sender after its
// first window). Then: read the one request, run the method on its own thread, write the
// response (or a Watch's events) and finish.
class Call final : public grpc::ServerGenericBidiReactor {
 public:
  using Method = std::function<Status(Call&)>;

  Call(grpc::GenericCallbackServerContext* context, CoordinatorHandlers& handlers,
       const std::map<std::string, Method>& methods, CallThreads& threads)
      : context_(context), threads_(threads) {
    const auto it = methods.find(context->method());
    if (it == methods.end()) {
      End(Status(StatusCode::UNIMPLEMENTED,
                 fmt::format("the coordinator has no method '{}'", context->method())));
      return;
    }
    if (Status status = handlers.CheckToken(context->client_metadata()); !status.ok()) {
      End(status);
      return;
    }
    method_ = &it->second;
    StartRead(&request_);
  }

  // gRPC runs each callback after the calls into it that led there, on a thread of its own, and
  // OnDone after every other: HappensAfter tells TSan of that order (core/happens_before.h).
  void OnReadDone(bool ok) override {
    HappensAfter(this);
    if (!ok) {
      End(Status(StatusCode::INVALID_ARGUMENT, "the call carried no request"));
      return;
    }
    threads_.Start([this] {
      const Status status = (*method_)(*this);
      End(status);  // the last use of this call
    });
  }

  void OnWriteDone(bool ok) override {
    HappensAfter(this);
    std::lock_guard lock(mutex_);
    writing_ = false;
    write_ok_ = ok;
    written_.notify_all();
  }

  void OnDone() override {
    HappensAfter(this);
    Release();
  }

  // For the method's thread: the parsed request, or false when it is malformed.
  template <typename Request>
  bool Read(Request* request) {
    return grpc::SerializationTraits<Request>::Deserialize(&request_, request).ok();
  }
  // Writes one message and waits until it is sent; false once the client is gone.
  template <typename Message>
  bool Write(const Message& message) {
    grpc::ByteBuffer buffer;
    bool own_buffer = false;
    if (!grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own_buffer).ok()) {
      return false;
    }
    std::unique_lock lock(mutex_);
    writing_ = true;
    HappensBefore(this);
    StartWrite(&buffer);
    written_.wait(lock, [&] { return !writing_; });
    return write_ok_;
  }
  Cancelled cancelled() const {
    return [context = context_] { return context->IsCancelled(); };
  }

 private:
  // Finishes the call. gRPC may run OnDone, on another thread, before Finish has returned (it still
  // reads the reactor after handing the status over): the call has two owners meanwhile, gRPC
  // until OnDone and the caller of Finish until it returns, and the last to let go deletes it.
  void End(Status status) {
    owners_.fetch_add(1, std::memory_order_relaxed);
    HappensBefore(this);
    Finish(std::move(status));
    Release();
  }

  void Release() {
    if (owners_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  std::atomic<int> owners_{1};  // gRPC's; End adds its caller while it runs
  grpc::GenericCallbackServerContext* context_;
  CallThreads& threads_;
  const Method* method_ = nullptr;
  grpc::ByteBuffer request_;
  std::mutex mutex_;
  std::condition_variable written_;
  bool writing_ = false;
  bool write_ok_ = false;
};

// A method that parses its one request, then runs `serve` on it.
template <typename Request>
Call::Method Parsed(std::function<Status(const Request&, Call&)> serve) {
  return [serve = std::move(serve)](Call& call) {
    Request request;
    if (!call.Read(&request)) {
      return Status(StatusCode::INVALID_ARGUMENT, "the request is not a valid message");
    }
    return serve(request, call);
  };
}

// A unary method: one response, written when the handler succeeds.
template <typename Request, typename Response>
Call::Method Unary(Status (CoordinatorHandlers::*method)(const Request&, Response*,
                                                         const Cancelled&),
                   CoordinatorHandlers& handlers) {
  return Parsed<Request>([method, &handlers](const Request& request, Call& call) {
    Response response;
    Status status = (handlers.*method)(request, &response, call.cancelled());
    if (status.ok() && !call.Write(response)) {
      return Status(StatusCode::CANCELLED, "the client went away");
    }
    return status;
  });
}

class CoordinatorService final : public grpc::CallbackGenericService {
 public:
  explicit CoordinatorService(CoordinatorState& state) : handlers_(state) {
    const std::string prefix = fmt::format("/{}/", pb::Coordinator::service_full_name());
    CoordinatorHandlers& h = handlers_;
    methods_[prefix + "Join"] = Unary(&CoordinatorHandlers::Join, h);
    methods_[prefix + "KvSet"] = Unary(&CoordinatorHandlers::KvSet, h);
    methods_[prefix + "KvGet"] = Unary(&CoordinatorHandlers::KvGet, h);
    methods_[prefix + "KvWait"] = Unary(&CoordinatorHandlers::KvWait, h);
    methods_[prefix + "Barrier"] = Unary(&CoordinatorHandlers::Barrier, h);
    methods_[prefix + "Report"] = Unary(&CoordinatorHandlers::Report, h);
    methods_[prefix + "Abort"] = Unary(&CoordinatorHandlers::Abort, h);
    methods_[prefix + "AwaitAbort"] = Unary(&CoordinatorHandlers::AwaitAbort, h);
    methods_[prefix + "WorkerExited"] = Unary(&CoordinatorHandlers::WorkerExited, h);
    methods_[prefix + "Watch"] = Parsed<pb::WatchRequest>([&h](const pb::WatchRequest& request,
                                                               Call& call) {
      return h.Watch(
          request, [&call](const pb::Event& event) { return call.Write(event); }, call.cancelled());
    });
    // Every method of the service (proto/baton.proto) is served here: a method added there and
    // not here fails every coordinator's start, not a worker's call.
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            pb::Coordinator::service_full_name());
    BATON_CHECK(service != nullptr, "no descriptor for {}", pb::Coordinator::service_full_name());
    for (int i = 0; i < service->method_count(); ++i) {
      BATON_CHECK(methods_.contains(prefix + service->method(i)->name()),
                  "the coordinator serves no handler for {}", service->method(i)->full_name());
    }
    BATON_CHECK(static_cast<int>(methods_.size()) == service->method_count(),
                "the coordinator serves methods that {} does not have",
                pb::Coordinator::service_full_name());
  }

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    // What the constructor asked for (a read, or a refusal's Finish) waits in the reactor until
    // gRPC binds it to the call, after this returns.
    Call* call = new Call(context, handlers_, methods_, threads_);
    HappensBefore(call);
    return call;
  }

  // After the server's shutdown: every call's thread has returned.
  void WaitForCalls() { threads_.WaitUntilIdle(); }

 private:
  CoordinatorHandlers handlers_;
  std::map<std::string, Call::Method> methods_;
  CallThreads threads_;
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
  builder.RegisterCallbackGenericService(impl_->service.get());
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
  impl_->service->WaitForCalls();
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
