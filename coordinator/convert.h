// Conversions between the coordinator's plain C++ types and their protobuf messages. Internal to
// coordinator/ (includes generated code): only coordinator_server.cc and coordinator_client.cc use
// it.
#pragma once

#include "coordinator/coordinator_types.h"
#include "proto/baton.pb.h"

namespace baton {

// The gRPC metadata key that carries the job token on every call.
inline constexpr char kTokenMetadataKey[] = "x-baton-token";

void ToProto(const JoinInfo& info, pb::JoinRequest* out);
JoinInfo FromProto(const pb::JoinRequest& request);

void ToProto(const WorkerReport& report, pb::ReportRequest* out);
WorkerReport FromProto(const pb::ReportRequest& request);

}  // namespace baton
