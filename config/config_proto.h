// The run config in its protobuf form (baton.pb.RunConfig), as the job plan carries it.
//
// Field for field: each section is a message and each key a field of the same name (choices as
// their YAML names, `checkpoint` as its policy text, `layers` as kind names). The conversion walks
// the one schema (config_schema.cc), so a key without its proto field is an error at once, which
// config_test checks for every key.
#pragma once

#include <string>
#include <string_view>

#include "config/config.h"
#include "proto/baton.pb.h"

namespace baton {

void ToProto(const Config& config, pb::RunConfig* out);
// Throws baton::Error naming the key when a value is out of its range or names no choice; the
// result is validated (Validate()).
Config FromProto(const pb::RunConfig& message);

// The RunConfig field of a schema key: a nested key's dot becomes '_' ("share.group" ->
// share_group).
std::string ProtoFieldName(std::string_view key);

}  // namespace baton
