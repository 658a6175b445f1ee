// Conversions between the coordinator's plain C++ types and their protobuf messages. Internal to
// coordinator/ (includes generated code): only coordinator_server.cc and coordinator_client.cc use
// it.
#pragma once

#include "coordinator/coordinator_types.h"
#include "proto/baton.pb.h"

namespace baton {

// The gRPC metadata key that carries the job token on every call.
inline constexpr char kTokenMetadataKey[] = "x-baton-token";

// The largest metadata either side accepts (GRPC_ARG_MAX_METADATA_SIZE; gRPC's default is 8 KiB).
// An error answered without a message travels as metadata, its status text included, and the
// coordinator's texts carry a rank table: a line per rank, over 8 KiB from about 80 ranks on
// ("gRPC status 8: received initial metadata size exceeds limit" at 256 processes).
inline constexpr int kMaxMetadataBytes = 4 << 20;

void ToProto(const JoinInfo& info, pb::JoinRequest* out);
JoinInfo FromProto(const pb::JoinRequest& request);

void ToProto(const WorkerReport& report, pb::ReportRequest* out);
WorkerReport FromProto(const pb::ReportRequest& request);

}  // namespace baton
