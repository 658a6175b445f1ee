// The coordinator client (see coordinator_client.h).
#include "coordinator/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "coordinator/convert.h"
#include "core/error.h"
#include "core/units.h"
#include "proto/baton.grpc.pb.h"

namespace baton {
namespace {

using grpc::StatusCode;

constexpr char kAbortedPrefix[] = "job aborted: ";
constexpr auto kWatchRetryInterval = std::chrono::milliseconds(200);

std::string CodeName(StatusCode code) {
  switch (code) {
    case StatusCode::CANCELLED:
      return "CANCELLED";
    case StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case StatusCode::ABORTED:
      return "ABORTED";
    case StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    default:
      return fmt::format("gRPC status {}", static_cast<int>(code));
  }
}

// Codes that retrying will not fix: the coordinator refuses us.
bool IsRefusal(StatusCode code) {
  return code == StatusCode::PERMISSION_DENIED || code == StatusCode::FAILED_PRECONDITION ||
         code == StatusCode::INVALID_ARGUMENT;
}

}  // namespace

struct CoordinatorClient::Impl {
  std::string address;
  std::string token;
  CoordinatorClientOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Coordinator::Stub> stub;

  mutable std::mutex mutex;
  mutable std::condition_variable cv;  // abort, closing, heartbeat wake-ups
  int rank = -1;
  WorkerReport report;  // the heartbeat payload
  std::optional<BlockedAction> blocked;
  Clock::time_point blocked_since;
  bool aborting = false;  // learned of the abort; callbacks may still be running
  bool aborted = false;   // ... and they have run
  std::string abort_reason;
  std::vector<std::function<void(const std::string&)>> callbacks;
  bool closing = false;
  bool heartbeat_now = false;
  std::thread heartbeat_thread;
  std::thread watch_thread;
  grpc::ClientContext* watch_context = nullptr;      // the live Watch call, to cancel on close
  grpc::ClientContext* heartbeat_context = nullptr;  // the heartbeat in flight, likewise

  void Prepare(grpc::ClientContext& context, std::chrono::milliseconds call_timeout) const {
    context.AddMetadata(kTokenMetadataKey, token);
    context.set_deadline(std::chrono::system_clock::now() + call_timeout + options.rpc_timeout);
  }

  // Runs one unary call; throws a baton::Error naming the call on failure.
  template <typename Invoke>
  void Call(const std::string& what, std::chrono::milliseconds timeout, Invoke invoke) {
    grpc::ClientContext context;
    Prepare(context, timeout);
    grpc::Status status = invoke(&context);
    if (status.ok()) return;
    std::string message = status.error_message();
    if (status.error_code() == StatusCode::ABORTED && message.starts_with(kAbortedPrefix)) {
      HandleAbort(message.substr(sizeof(kAbortedPrefix) - 1));
    }
    BATON_FAIL("coordinator {}: {}: {}: {}", address, what, CodeName(status.error_code()), message);
  }

  int JoinedRank(const char* what) const {
    std::lock_guard lock(mutex);
    BATON_CHECK(rank >= 0, "{} needs Join() first", what);
    return rank;
  }

  // Runs the callbacks, then announces the abort: once aborted() is true, every callback
  // registered before has run.
  void HandleAbort(const std::string& reason) {
    std::vector<std::function<void(const std::string&)>> to_run;
    {
      std::lock_guard lock(mutex);
      if (aborting) return;
      aborting = true;
      abort_reason = reason;
      heartbeat_now = true;  // one last heartbeat, so the launcher's hang table is fresh
      to_run = std::move(callbacks);
    }
    cv.notify_all();
    for (auto& callback : to_run) callback(reason);
    {
      std::lock_guard lock(mutex);
      aborted = true;
    }
    cv.notify_all();
  }

  pb::ReportRequest SnapshotLocked() const {
    WorkerReport snapshot = report;
    snapshot.rank = rank;
    if (!snapshot.blocked && blocked) {
      snapshot.blocked = *blocked;
      snapshot.blocked->waiting_s = Seconds(Clock::now() - blocked_since);
    }
    pb::ReportRequest request;
    ToProto(snapshot, &request);
    return request;
  }

  void HeartbeatLoop(std::chrono::milliseconds interval);
  void WatchLoop();
  // Returns true when the stream delivered an event (abort or shutdown): the watch is over.
  bool WatchOnce(int watch_rank, bool* established, grpc::Status* status);
};

void CoordinatorClient::Impl::HeartbeatLoop(std::chrono::milliseconds interval) {
  Clock::time_point last_ok = Clock::now();
  while (true) {
    pb::ReportRequest request;
    {
      std::unique_lock lock(mutex);
      cv.wait_for(lock, interval, [&] { return closing || heartbeat_now; });
      if (closing) return;
      heartbeat_now = false;
      request = SnapshotLocked();
    }
    grpc::ClientContext context;
    Prepare(context, std::chrono::milliseconds(0));
    {
      std::lock_guard lock(mutex);
      if (closing) return;
      heartbeat_context = &context;
    }
    pb::ReportResponse response;
    grpc::Status status = stub->Report(&context, request, &response);
    {
      std::lock_guard lock(mutex);
      heartbeat_context = nullptr;
      if (closing) return;
    }
    if (status.ok()) {
      last_ok = Clock::now();
      if (response.abort()) HandleAbort(response.abort_reason());
    } else if (IsRefusal(status.error_code())) {
      HandleAbort(fmt::format("the coordinator refused a heartbeat: {}", status.error_message()));
    } else if (Clock::now() - last_ok > options.lost_coordinator_timeout) {
      HandleAbort(fmt::format("lost contact with the coordinator at {} for {:.1f} s: {}", address,
                              Seconds(Clock::now() - last_ok), status.error_message()));
    }
  }
}

bool CoordinatorClient::Impl::WatchOnce(int watch_rank, bool* established, grpc::Status* status) {
  grpc::ClientContext context;
  context.AddMetadata(kTokenMetadataKey, token);
  {
    std::lock_guard lock(mutex);
    if (closing) return true;
    watch_context = &context;
  }
  pb::WatchRequest request;
  request.set_rank(watch_rank);
  auto reader = stub->Watch(&context, request);
  pb::Event event;
  bool got_event = false;
  while (reader->Read(&event)) {
    if (event.kind() == pb::Event::KIND_WATCHING) {
      *established = true;
      continue;
    }
    got_event = true;
    HandleAbort(event.kind() == pb::Event::KIND_SHUTDOWN
                    ? fmt::format("the coordinator shut down ({})", event.reason())
                    : event.reason());
  }
  *status = reader->Finish();
  std::lock_guard lock(mutex);
  watch_context = nullptr;
  return got_event || closing || aborting;
}

void CoordinatorClient::Impl::WatchLoop() {
  const int watch_rank = JoinedRank("Watch");
  Clock::time_point last_ok = Clock::now();
  while (true) {
    bool established = false;
    grpc::Status status;
    if (WatchOnce(watch_rank, &established, &status)) return;
    if (established) last_ok = Clock::now();
    if (IsRefusal(status.error_code())) {
      HandleAbort(
          fmt::format("the coordinator refused the abort watch: {}", status.error_message()));
      return;
    }
    if (Clock::now() - last_ok > options.lost_coordinator_timeout) {
      HandleAbort(fmt::format("lost contact with the coordinator at {}: {}", address,
                              status.error_message()));
      return;
    }
    std::unique_lock lock(mutex);
    if (cv.wait_for(lock, kWatchRetryInterval, [&] { return closing; })) return;
  }
}

CoordinatorClient::CoordinatorClient(const std::string& address, const std::string& token,
                                     const CoordinatorClientOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = address;
  impl_->token = token;
  impl_->options = options;
  grpc::ChannelArguments args;
  // Reconnect quickly: workers often start before the coordinator listens.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_MAX_METADATA_SIZE, kMaxMetadataBytes);
  impl_->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  bool connected =
      impl_->channel->WaitForConnected(std::chrono::system_clock::now() + options.connect_timeout);
  BATON_CHECK(connected, "cannot reach the coordinator at {} within {:.1f} s", address,
              Seconds(options.connect_timeout));
  impl_->stub = pb::Coordinator::NewStub(impl_->channel);
}

CoordinatorClient::~CoordinatorClient() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->closing = true;
    if (impl_->watch_context) impl_->watch_context->TryCancel();
    if (impl_->heartbeat_context) impl_->heartbeat_context->TryCancel();
  }
  impl_->cv.notify_all();
  if (impl_->heartbeat_thread.joinable()) impl_->heartbeat_thread.join();
  if (impl_->watch_thread.joinable()) impl_->watch_thread.join();
}

std::string CoordinatorClient::Join(const JoinInfo& info) {
  pb::JoinRequest request;
  ToProto(info, &request);
  pb::JoinResponse response;
  impl_->Call(fmt::format("Join as rank {}", info.rank), std::chrono::milliseconds(0),
              [&](grpc::ClientContext* c) { return impl_->stub->Join(c, request, &response); });
  std::lock_guard lock(impl_->mutex);
  impl_->rank = info.rank;
  impl_->report.rank = info.rank;
  return response.plan();
}

int CoordinatorClient::rank() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->rank;
}

void CoordinatorClient::KvSet(const std::string& key, const std::string& value) {
  pb::KvSetRequest request;
  request.set_key(key);
  request.set_value(value);
  pb::KvSetResponse response;
  impl_->Call(fmt::format("KvSet('{}')", key), std::chrono::milliseconds(0),
              [&](grpc::ClientContext* c) { return impl_->stub->KvSet(c, request, &response); });
}

std::string CoordinatorClient::KvGet(const std::string& key, std::chrono::milliseconds timeout) {
  pb::KvGetRequest request;
  request.set_key(key);
  request.set_timeout_ms(timeout.count());
  pb::KvGetResponse response;
  impl_->Call(fmt::format("KvGet('{}')", key), timeout,
              [&](grpc::ClientContext* c) { return impl_->stub->KvGet(c, request, &response); });
  return response.value();
}

void CoordinatorClient::KvWait(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
  pb::KvWaitRequest request;
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(timeout.count());
  pb::KvWaitResponse response;
  impl_->Call(fmt::format("KvWait({} keys)", keys.size()), timeout,
              [&](grpc::ClientContext* c) { return impl_->stub->KvWait(c, request, &response); });
}

void CoordinatorClient::Barrier(const std::string& name, std::chrono::milliseconds timeout) {
  pb::BarrierRequest request;
  request.set_name(name);
  request.set_rank(impl_->JoinedRank("Barrier"));
  request.set_timeout_ms(timeout.count());
  pb::BarrierResponse response;
  impl_->Call(fmt::format("Barrier('{}')", name), timeout,
              [&](grpc::ClientContext* c) { return impl_->stub->Barrier(c, request, &response); });
}

void CoordinatorClient::Report(const WorkerReport& report) {
  pb::ReportRequest request;
  {
    std::lock_guard lock(impl_->mutex);
    BATON_CHECK(impl_->rank >= 0, "Report needs Join() first");
    impl_->report = report;
    request = impl_->SnapshotLocked();
  }
  pb::ReportResponse response;
  impl_->Call("Report", std::chrono::milliseconds(0),
              [&](grpc::ClientContext* c) { return impl_->stub->Report(c, request, &response); });
  if (response.abort()) impl_->HandleAbort(response.abort_reason());
}

void CoordinatorClient::StartHeartbeat(std::chrono::milliseconds interval) {
  impl_->JoinedRank("StartHeartbeat");
  std::lock_guard lock(impl_->mutex);
  BATON_CHECK(!impl_->heartbeat_thread.joinable(), "the heartbeat is already running");
  impl_->heartbeat_thread =
      std::thread([impl = impl_.get(), interval] { impl->HeartbeatLoop(interval); });
}

void CoordinatorClient::SetBlocked(const std::string& action, int micro_batch, int peer_rank) {
  std::lock_guard lock(impl_->mutex);
  impl_->blocked = BlockedAction{action, micro_batch, peer_rank, 0.0};
  impl_->blocked_since = Clock::now();
}

void CoordinatorClient::ClearBlocked() {
  std::lock_guard lock(impl_->mutex);
  impl_->blocked.reset();
}

void CoordinatorClient::Watch() {
  impl_->JoinedRank("Watch");
  std::lock_guard lock(impl_->mutex);
  BATON_CHECK(!impl_->watch_thread.joinable(), "the abort watch is already running");
  impl_->watch_thread = std::thread([impl = impl_.get()] { impl->WatchLoop(); });
}

void CoordinatorClient::OnAbort(std::function<void(const std::string& reason)> callback) {
  std::string reason;
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->aborting) {
      impl_->callbacks.push_back(std::move(callback));
      return;
    }
    reason = impl_->abort_reason;
  }
  callback(reason);
}

void CoordinatorClient::RequestAbort(const std::string& reason, int stage) {
  pb::AbortRequest request;
  request.set_reason(reason);
  request.set_rank(rank());
  request.set_stage(stage);
  pb::AbortResponse response;
  impl_->Call("Abort", std::chrono::milliseconds(0),
              [&](grpc::ClientContext* c) { return impl_->stub->Abort(c, request, &response); });
}

std::optional<std::string> CoordinatorClient::AwaitAbort(int rank, int attempt,
                                                         std::chrono::milliseconds timeout) {
  pb::AwaitAbortRequest request;
  request.set_rank(rank);
  request.set_attempt(attempt);
  request.set_timeout_ms(timeout.count());
  pb::AwaitAbortResponse response;
  impl_->Call(
      fmt::format("AwaitAbort(rank {}, attempt {})", rank, attempt), timeout,
      [&](grpc::ClientContext* c) { return impl_->stub->AwaitAbort(c, request, &response); });
  if (!response.aborted()) return std::nullopt;
  return response.reason();
}

JobNext CoordinatorClient::ReportWorkerExit(int attempt, const WorkerExit& exit,
                                            std::chrono::milliseconds timeout) {
  pb::WorkerExitRequest request;
  request.set_rank(exit.rank);
  request.set_attempt(attempt);
  request.set_exit_code(exit.exit_code);
  request.set_signal(exit.signal);
  request.set_timeout_ms(timeout.count());
  pb::WorkerExitResponse response;
  impl_->Call(
      fmt::format("WorkerExited(rank {}, attempt {})", exit.rank, attempt), timeout,
      [&](grpc::ClientContext* c) { return impl_->stub->WorkerExited(c, request, &response); });
  JobNext next;
  switch (response.next()) {
    case pb::WorkerExitResponse::NEXT_RESTART:
      next.kind = JobNext::Kind::kRestart;
      break;
    case pb::WorkerExitResponse::NEXT_END:
      next.kind = JobNext::Kind::kEnd;
      break;
    default:
      next.kind = JobNext::Kind::kPending;
      break;
  }
  next.attempt = response.attempt();
  next.succeeded = response.succeeded();
  next.reason = response.reason();
  return next;
}

bool CoordinatorClient::aborted() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->aborted;
}

std::string CoordinatorClient::abort_reason() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->abort_reason;
}

bool CoordinatorClient::WaitForAbort(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(impl_->mutex);
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->aborted; });
}

}  // namespace baton
