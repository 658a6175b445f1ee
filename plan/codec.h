// The job's messages between its own processes, typed end to end (proto/baton.proto):
//   - the plan in (pb.JobPlan): the launcher encodes its Plan, every worker decodes the same Plan
//     and builds its rank from it (worker/trainer.h's TrainerSetupFor), re-deriving nothing;
//   - each rank's result out (pb.RankResult): digests, memory peaks, times, trace spans that
//     carry their actions.
// Generated protobuf headers stay inside codec.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/lr_segment.h"
#include "core/memory.h"
#include "plan/plan.h"
#include "plan/result.h"

namespace baton {

// What one launch adds to the plan: which job, where it starts.
struct Launch {
  std::string job_id;
  // A checkpoint step directory every rank resumes from ("" = start fresh), resolved once by the
  // launcher so that all ranks load the same step.
  std::string resume_dir;
  int attempt = 0;  // restart attempt (--max-restarts); keeps store keys of attempts apart
  // `baton eval`: every rank loads the weights, evaluates the held-out data once and stops;
  // nothing is trained or saved.
  bool evaluate_only = false;
  // The learning-rate schedule of an extended run (--steps-more; TrainingState::lr_segments),
  // resolved once by the launcher and kept by every restart; train.steps is the last one's end.
  std::vector<LrSegment> lr_segments;
  bool operator==(const Launch&) const = default;
};

std::string EncodeJobPlan(const Plan& plan, const Launch& launch);
// Throws baton::Error when the bytes are not a well-formed, self-consistent plan.
Plan DecodeJobPlan(const std::string& bytes, Launch* launch);

std::string EncodeRankResult(const RankResult& result);
// Throws baton::Error when the bytes are not a well-formed result.
RankResult DecodeRankResult(const std::string& bytes);

}  // namespace baton
