// The planner: makes the job plan (plan/plan.h) the launcher hands every worker.
//
// From a validated Config it builds the layer graph, cuts it into p*v virtual stages
// (planner/partitioner.h), generates the schedule, inserts its communication and validates it
// (an invalid schedule is an error with the marked rank x time grid). Workers receive the plan
// (plan/codec.h) and never decide any of it themselves.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/plan.h"

namespace baton {

// With `memory_budget` > 0 the cut also keeps every rank's predicted memory total within it
// (the Gloo transport's figures: what `baton run` measures); throws baton::Error naming the
// smallest peak any cut reaches when none fits.
Plan MakePlan(const Config& config, int64_t memory_budget = 0);

// The share groups (model.share) that the cut spreads over more than one rank, each as
// "blocks 0-7 (layers 1-8) on stages 0, 1": every such stage holds a copy of the group's shared
// parameters, their gradients summed across those stages at every step end.
std::vector<std::string> SplitShareGroups(const Plan& plan);

// The table `baton plan` prints: stage, layers, parameters, FLOPs, activation bytes per
// micro-batch.
std::string FormatPartitionTable(const Plan& plan);

}  // namespace baton
