#include "scheduler/schedule_command.h"

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/costs.h"
#include "scheduler/generators.h"
#include "scheduler/schedule.h"
#include "scheduler/simulator.h"
#include "scheduler/timeline.h"
#include "scheduler/validator.h"

namespace baton {
namespace {

// Bad options or unreadable input (exit code 2), as opposed to an invalid schedule (exit code 1).
struct BadArguments : Error {
  using Error::Error;
};

CommSemantics ParseComm(const std::string& comm) {
  if (comm == "async") return CommSemantics::kAsync;
  if (comm == "rendezvous") return CommSemantics::kRendezvous;
  throw BadArguments("--comm must be async or rendezvous, got '" + comm + "'");
}

Schedule LoadFromFile(const ScheduleCommandOptions& options) {
  Schedule schedule;
  try {
    schedule = LoadScheduleCsv(options.file);
  } catch (const std::exception& error) {
    throw BadArguments(error.what());
  }
  auto check = [&](const char* flag, int given, int actual) {
    if (given != 0 && given != actual) {
      throw BadArguments(std::string(flag) + " " + std::to_string(given) + " disagrees with " +
                         options.file + ", which has " + std::to_string(actual));
    }
  };
  check("--stages", options.stages, schedule.stages);
  check("--microbatches", options.microbatches, schedule.microbatches);
  return schedule;
}

Schedule Generate(const ScheduleCommandOptions& options) {
  if (options.stages < 1 || options.microbatches < 1 || options.chunks < 0) {
    throw BadArguments("--stages and --microbatches must be >= 1 (or give --file), --chunks too");
  }
  try {
    int requested = options.chunks;
    if (requested == 0) {  // not given: the least the schedule runs
      const ScheduleKindInfo* info = FindScheduleKind(options.schedule);
      requested = info != nullptr && info->chunks != ChunkRule::kOne ? 2 : 1;
    }
    const int chunks = ChunksFor(options.schedule, requested);
    return MakeSchedule(options.schedule, options.stages, options.microbatches, chunks);
  } catch (const Error& error) {
    throw BadArguments(error.what());
  }
}

// `schedule` without its SEND/RECV actions.
Schedule ComputeOnly(Schedule schedule) {
  for (auto& actions : schedule.per_stage) {
    std::erase_if(actions, [](const Action& action) { return IsCommunication(action.kind); });
  }
  return schedule;
}

std::string Render(const std::string& format, const Schedule& schedule,
                   const SimulationResult& simulation) {
  if (format == "text") return RenderText(schedule, simulation);
  if (format == "csv") return ScheduleToCsv(schedule);
  // torch's compute-only form (its runtime adds the communication, as Baton does).
  if (format == "torch-csv") return ScheduleToTorchCsv(ComputeOnly(schedule));
  if (format == "json") return RenderJson(schedule, simulation);
  if (format == "svg") return RenderSvg(schedule, simulation);
  return RenderChromeTrace(schedule, simulation);
}

int Run(const ScheduleCommandOptions& options, std::ostream& out, std::ostream& err) {
  const std::string& format = options.format;
  if (format != "text" && format != "csv" && format != "torch-csv" && format != "json" &&
      format != "svg" && format != "chrome") {
    throw BadArguments("--format must be text, csv, torch-csv, json, svg or chrome, got '" +
                       format + "'");
  }
  const CommSemantics semantics = ParseComm(options.comm);
  Costs costs;
  try {
    costs = ParseCosts(options.costs);
  } catch (const Error& error) {
    throw BadArguments(std::string("--costs: ") + error.what());
  }
  Schedule schedule = options.file.empty() ? Generate(options) : LoadFromFile(options);
  if (!HasCommunication(schedule)) {
    if (ValidationResult compute = Validate(schedule); !compute) {
      err << compute.message;
      return kScheduleCommandInvalidSchedule;
    }
    schedule = InsertCommunication(schedule, semantics == CommSemantics::kRendezvous
                                                 ? CommPlacement::kRendezvousSafe
                                                 : CommPlacement::kJustInTime);
  }
  if (ValidationResult result = Validate(schedule, semantics); !result) {
    err << result.message;
    return kScheduleCommandInvalidSchedule;
  }
  SimulationResult simulation;
  try {
    simulation = Simulate(schedule, costs);
  } catch (const Error& error) {
    throw BadArguments(std::string("--costs: ") + error.what());
  }
  out << Render(format, schedule, simulation);
  return kScheduleCommandOk;
}

}  // namespace

int RunScheduleCommand(const ScheduleCommandOptions& options, std::ostream& out,
                       std::ostream& err) {
  try {
    return Run(options, out, err);
  } catch (const BadArguments& error) {
    err << "baton schedule: " << error.what() << "\n";
    return kScheduleCommandBadArguments;
  }
}

}  // namespace baton
