// `baton plan` (launcher/run.h's PlanCommand), and the planning `baton run` shares with it.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"
#include "launcher/run.h"
#include "plan/plan.h"
#include "planner/fit.h"

namespace baton {

// --memory-budget in bytes (0: none); --fit without a budget is an error.
int64_t BudgetBytes(const MemoryArgs& args);

// What both commands plan: `config` under --memory-budget (`budget`) and --fit (filling `fit`).
// A config that cannot be planned is an error naming `config_path`.
Plan PlanConfig(const Config& config, const std::string& config_path, int64_t budget,
                const MemoryArgs& memory, FitResult* fit);

}  // namespace baton
