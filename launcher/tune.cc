// `baton tune` (see tune.h).
#include "launcher/tune.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/files.h"
#include "core/units.h"
#include "planner/measured_costs.h"
#include "planner/tune.h"

namespace baton {

int TuneCommand(const TuneCommandOptions& options, std::ostream& out) {
  const auto naming = [&](const auto& step) {
    try {
      return step();
    } catch (const Error& e) {
      throw Error(fmt::format("{}: tune: {}", options.config.path, e.what()));
    }
  };
  BATON_CHECK(options.max_stages >= 0, "--max-stages must be at least 1, got {}",
              options.max_stages);
  BATON_CHECK(options.max_processes >= 0, "--max-processes must be at least 1, got {}",
              options.max_processes);
  BATON_CHECK(options.repeats >= 1, "--repeats must be at least 1, got {}", options.repeats);
  BATON_CHECK(!options.out.empty(), "--out needs a file name");
  const Config config =
      naming([&] { return LoadConfig(options.config.path, options.config.overrides); });
  BATON_CHECK(config.device.type == DeviceType::kCpu,
              "baton tune profiles on this machine's CPU; GPU stages (device.type cuda) cannot be "
              "profiled here");
  TuneOptions tune;
  tune.budget = options.budget.empty() ? 0 : ParseByteSize(options.budget);
  BATON_CHECK(options.budget.empty() || tune.budget > 0, "--memory-budget must be positive, got {}",
              options.budget);
  tune.max_stages = options.max_stages;
  tune.max_processes = options.max_processes;
  tune.top = options.top;

  ProfileRequest request;
  request.dtypes = {config.precision.dtype};
  request.micro_batch_sizes = TuneMicroBatchSizes(config);
  request.states = {config.optimizer.state};
  request.repeats = options.repeats;
  const int processes = options.max_processes > 0
                            ? options.max_processes
                            : std::max(DefaultMaxProcesses(config), options.max_stages);
  request.concurrency.clear();
  for (int p = 1; p <= processes; ++p) request.concurrency.push_back(p);
  const Clock::time_point start = Clock::now();
  const MeasuredCosts measured = naming([&] { return MeasureCosts(config, request); });
  out << fmt::format("measured on this machine in {:.1f} s ({} thread{} per process):\n",
                     Seconds(Clock::now() - start), config.device.threads,
                     config.device.threads == 1 ? "" : "s")
      << FormatMeasuredCosts(measured) << "\n";
  const TuneResult result = naming([&] { return Tune(config, measured, tune); });
  out << FormatTuneTable(result, tune.budget, options.top);
  const TuneCandidate& best = result.ranked.front();
  WriteFileAtomically(
      options.out,
      fmt::format("# baton tune {}: predicted {:.1f} ms per step on the machine it measured\n{}",
                  options.config.path, 1e3 * best.prediction.seconds, ToYaml(best.config)));
  out << fmt::format("wrote {} (baton run {}); searched in {:.1f} s\n", options.out, options.out,
                     Seconds(Clock::now() - start));
  return 0;
}

}  // namespace baton
