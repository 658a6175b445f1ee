// Conversions between plain coordinator types and protobuf messages (see convert.h).
#include "coordinator/convert.h"

namespace baton {
namespace {

pb::WorkerStatus ToProto(WorkerStatus status) {
  switch (status) {
    case WorkerStatus::kRunning:
      return pb::WORKER_STATUS_RUNNING;
    case WorkerStatus::kDone:
      return pb::WORKER_STATUS_DONE;
    case WorkerStatus::kFailed:
      return pb::WORKER_STATUS_FAILED;
  }
  return pb::WORKER_STATUS_RUNNING;
}

WorkerStatus FromProto(pb::WorkerStatus status) {
  switch (status) {
    case pb::WORKER_STATUS_DONE:
      return WorkerStatus::kDone;
    case pb::WORKER_STATUS_FAILED:
      return WorkerStatus::kFailed;
    default:
      return WorkerStatus::kRunning;
  }
}

}  // namespace

void ToProto(const JoinInfo& info, pb::JoinRequest* out) {
  out->set_rank(info.rank);
  out->set_world_size(info.world_size);
  out->set_host(info.host);
  out->set_pid(info.pid);
  out->set_device(info.device);
  out->set_job_id(info.job_id);
  out->set_attempt(info.attempt);
}

JoinInfo FromProto(const pb::JoinRequest& request) {
  JoinInfo info;
  info.rank = request.rank();
  info.world_size = request.world_size();
  info.host = request.host();
  info.pid = request.pid();
  info.device = request.device();
  info.job_id = request.job_id();
  info.attempt = request.attempt();
  return info;
}

void ToProto(const WorkerReport& report, pb::ReportRequest* out) {
  out->set_rank(report.rank);
  out->set_stage(report.stage);
  out->set_replica(report.replica);
  out->set_tensor(report.tensor);
  out->set_step(report.step);
  out->set_loss(report.loss);
  out->mutable_metrics()->insert(report.metrics.begin(), report.metrics.end());
  out->mutable_timings_s()->insert(report.timings_s.begin(), report.timings_s.end());
  out->mutable_memory_peak()->insert(report.memory_peak.begin(), report.memory_peak.end());
  out->set_status(ToProto(report.status));
  out->set_error(report.error);
  if (report.blocked) {
    pb::BlockedAction* blocked = out->mutable_blocked();
    blocked->set_action(report.blocked->action);
    blocked->set_micro_batch(report.blocked->micro_batch);
    blocked->set_peer_rank(report.blocked->peer_rank);
    blocked->set_waiting_s(report.blocked->waiting_s);
  }
}

WorkerReport FromProto(const pb::ReportRequest& request) {
  WorkerReport report;
  report.rank = request.rank();
  report.stage = request.stage();
  report.replica = request.replica();
  report.tensor = request.tensor();
  report.step = request.step();
  report.loss = request.loss();
  report.metrics.insert(request.metrics().begin(), request.metrics().end());
  report.timings_s.insert(request.timings_s().begin(), request.timings_s().end());
  report.memory_peak.insert(request.memory_peak().begin(), request.memory_peak().end());
  report.status = FromProto(request.status());
  report.error = request.error();
  if (request.has_blocked()) {
    const pb::BlockedAction& blocked = request.blocked();
    report.blocked = BlockedAction{blocked.action(), blocked.micro_batch(), blocked.peer_rank(),
                                   blocked.waiting_s()};
  }
  return report;
}

}  // namespace baton
