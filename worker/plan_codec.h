// The job plan as a worker receives it, and its wire form (proto baton.pb.JobPlan).
//
// The launcher decides everything in it (planner/plan.h); the worker only reads it. Generated
// protobuf headers stay inside plan_codec.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/stage_model.h"

namespace baton {

struct WorkerPlan {
  std::string job_id;
  std::string config_yaml;  // the whole config, canonical (ToYaml)
  int num_ranks = 1;
  int num_chunks = 1;
  std::vector<std::vector<LayerRange>> chunk_ranges;  // [rank][chunk]
  std::string schedule_name;
  std::string schedule_csv;  // with communication, validated
  // Predicted bytes per memory category ("params", ..., "total") per rank; may be empty.
  std::vector<std::map<std::string, int64_t>> predicted_memory;
  // A checkpoint step directory every rank resumes from ("" = start fresh), resolved once by
  // the launcher so that all ranks load the same step.
  std::string resume_dir;
  int attempt = 0;  // restart attempt (--max-restarts); keeps store keys of attempts apart
  bool operator==(const WorkerPlan&) const = default;
};

std::string EncodePlan(const WorkerPlan& plan);
// Throws baton::Error when the bytes are not a well-formed plan.
WorkerPlan DecodePlan(const std::string& bytes);

}  // namespace baton
