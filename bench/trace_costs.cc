#include "bench/trace_costs.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

#include "core/error.h"

namespace baton::bench {

using nlohmann::json;

namespace {

constexpr std::string_view kWaitPrefix = "wait ";

TraceSpan ParseSpan(const std::string& name, int stage, int num_stages, ChunkLayout layout) {
  TraceSpan span;
  if (name == "optimizer") {
    span.kind = TraceSpan::Kind::kOptimizer;
  } else if (name == "step start") {
    span.kind = TraceSpan::Kind::kStepStart;
  } else if (name == "exchange") {
    span.kind = TraceSpan::Kind::kExchange;
  } else if (name.starts_with(kWaitPrefix)) {
    span.kind = TraceSpan::Kind::kWait;
    span.action =
        ParseAction(std::string_view(name).substr(kWaitPrefix.size()), stage, num_stages, layout);
    BATON_CHECK(IsCommunication(span.action.kind), "trace span '{}' waits on a compute action",
                name);
  } else {
    span.kind = TraceSpan::Kind::kCompute;
    span.action = ParseAction(name, stage, num_stages, layout);
    BATON_CHECK(IsCompute(span.action.kind), "trace span '{}' is not a compute action", name);
  }
  return span;
}

double Millis(double us) { return us / 1000.0; }

// The steps of one stage that are measured.
std::vector<const StepTrace*> Measured(const std::vector<StepTrace>& steps, int64_t first_step) {
  std::vector<const StepTrace*> measured;
  for (const StepTrace& step : steps) {
    if (step.step >= first_step) measured.push_back(&step);
  }
  return measured;
}

double StepBegin(const StepTrace& step) {
  double begin = step.spans.front().start_us;
  for (const TraceSpan& s : step.spans) begin = std::min(begin, s.start_us);
  return begin;
}

double StepEnd(const StepTrace& step) {
  double end = step.spans.front().end_us;
  for (const TraceSpan& s : step.spans) end = std::max(end, s.end_us);
  return end;
}

// One step's parts in milliseconds (not yet averaged).
StepParts PartsOf(const StepTrace& step) {
  StepParts parts;
  double optimizer = 0;
  for (const TraceSpan& s : step.spans) {
    const double ms = Millis(s.end_us - s.start_us);
    switch (s.kind) {
      case TraceSpan::Kind::kCompute:
        parts.compute += ms;
        break;
      case TraceSpan::Kind::kWait:
        if (s.action.kind == ActionKind::kRecvForward) {
          parts.recv_forward += ms;
        } else if (s.action.kind == ActionKind::kRecvBackward) {
          parts.recv_backward += ms;
        } else {
          parts.send += ms;
        }
        break;
      case TraceSpan::Kind::kOptimizer:
        optimizer += ms;
        break;
      case TraceSpan::Kind::kStepStart:
        parts.step_start += ms;
        break;
      case TraceSpan::Kind::kExchange:  // inside the optimizer span
        parts.exchange += ms;
        break;
    }
  }
  parts.update = optimizer - parts.exchange;
  parts.step = Millis(StepEnd(step) - StepBegin(step));
  parts.uncovered = parts.step - (parts.compute + parts.recv_forward + parts.recv_backward +
                                  parts.send + parts.step_start + optimizer);
  return parts;
}

void Add(StepParts& sum, const StepParts& p, double weight) {
  sum.compute += weight * p.compute;
  sum.update += weight * p.update;
  sum.recv_forward += weight * p.recv_forward;
  sum.recv_backward += weight * p.recv_backward;
  sum.send += weight * p.send;
  sum.step_start += weight * p.step_start;
  sum.exchange += weight * p.exchange;
  sum.uncovered += weight * p.uncovered;
  sum.step += weight * p.step;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The compute actions of a program, in order.
std::vector<Action> ComputeActions(const std::vector<Action>& program) {
  std::vector<Action> compute;
  for (const Action& a : program) {
    if (IsCompute(a.kind)) compute.push_back(a);
  }
  return compute;
}

}  // namespace

PipelineTrace ReadChromeTrace(const json& trace, int num_stages, ChunkLayout layout) {
  std::vector<std::map<int64_t, std::vector<TraceSpan>>> by_step(static_cast<size_t>(num_stages));
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X") continue;
    const int rank = event.at("tid").get<int>();
    BATON_CHECK(rank >= 0, "trace event of rank {}", rank);
    if (rank >= num_stages) continue;  // another replica's pipeline
    TraceSpan span = ParseSpan(event.at("name").get<std::string>(), rank, num_stages, layout);
    span.start_us = event.at("ts").get<double>();
    span.end_us = span.start_us + event.at("dur").get<double>();
    by_step[static_cast<size_t>(rank)][event.at("args").at("step").get<int64_t>()].push_back(span);
  }
  PipelineTrace pipeline(static_cast<size_t>(num_stages));
  for (int stage = 0; stage < num_stages; ++stage) {
    for (auto& [step, spans] : by_step[static_cast<size_t>(stage)]) {
      pipeline[static_cast<size_t>(stage)].push_back({step, std::move(spans)});
    }
  }
  return pipeline;
}

std::vector<StepParts> MeasureBreakdown(const PipelineTrace& trace, int64_t first_step) {
  std::vector<StepParts> result;
  for (size_t stage = 0; stage < trace.size(); ++stage) {
    const std::vector<const StepTrace*> measured = Measured(trace[stage], first_step);
    BATON_CHECK(!measured.empty(), "stage {} traced no step from step {} on", stage, first_step);
    StepParts mean;
    for (const StepTrace* step : measured) {
      BATON_CHECK(!step->spans.empty(), "stage {} step {} has no spans", stage, step->step);
      Add(mean, PartsOf(*step), 1.0 / static_cast<double>(measured.size()));
    }
    result.push_back(mean);
  }
  return result;
}

double BubbleOf(const std::vector<StepParts>& parts) {
  double busy = 0, step = 0;
  for (const StepParts& p : parts) {
    busy += p.busy();
    step += p.step;
  }
  BATON_CHECK(step > 0, "no step time");
  return 1.0 - busy / step;
}

DerivedCosts DeriveCosts(const PipelineTrace& trace, const Schedule& schedule, int64_t first_step) {
  const int p = schedule.stages;
  BATON_CHECK(static_cast<int>(trace.size()) == p, "a trace of {} stages for a {}-stage schedule",
              trace.size(), p);
  DerivedCosts derived;
  // (virtual stage, kind) -> total ms and count; (step, virtual stage, kind, micro-batch) -> end.
  std::map<std::pair<int, ActionKind>, std::pair<double, int>> totals;
  std::map<std::tuple<int64_t, int, ActionKind, int>, double> ends;
  for (int stage = 0; stage < p; ++stage) {
    const std::vector<Action> program =
        ComputeActions(schedule.per_stage[static_cast<size_t>(stage)]);
    for (const StepTrace* step : Measured(trace[static_cast<size_t>(stage)], first_step)) {
      std::vector<Action> ran;
      for (const TraceSpan& s : step->spans) {
        if (s.kind != TraceSpan::Kind::kCompute) continue;
        ran.push_back(s.action);
        const int j = schedule.VirtualStageOf(s.action);
        auto& [total, count] = totals[{j, s.action.kind}];
        total += Millis(s.end_us - s.start_us);
        ++count;
        ends[{step->step, j, s.action.kind, s.action.microbatch}] = s.end_us;
      }
      BATON_CHECK(ran == program,
                  "stage {} step {}: the trace's compute actions are not schedule '{}''s", stage,
                  step->step, schedule.name);
    }
  }
  // Latency: a receiver already waiting when its producer finished gets the message after it.
  std::vector<double> latencies;
  for (int stage = 0; stage < p; ++stage) {
    for (const StepTrace* step : Measured(trace[static_cast<size_t>(stage)], first_step)) {
      for (const TraceSpan& s : step->spans) {
        if (s.kind != TraceSpan::Kind::kWait || !IsRecv(s.action.kind)) continue;
        const int j = schedule.VirtualStageOf(s.action);
        const bool forward = s.action.kind == ActionKind::kRecvForward;
        const int producer = forward ? j - 1 : j + 1;
        const int mb = s.action.microbatch;
        std::vector<ActionKind> kinds = {ActionKind::kForward};
        if (!forward) kinds = {ActionKind::kBackward, ActionKind::kBackwardInput};
        for (ActionKind kind : kinds) {
          const auto it = ends.find({step->step, producer, kind, mb});
          if (it == ends.end()) continue;
          if (s.start_us <= it->second && it->second <= s.end_us) {
            latencies.push_back(Millis(s.end_us - it->second));
          }
        }
      }
    }
  }
  derived.latency_samples = static_cast<int>(latencies.size());
  const double latency = Median(latencies);
  derived.costs.defaults = ActionCosts{0, 0, 0, 0, latency};
  for (const auto& [key, sum] : totals) {
    ActionCosts& c =
        derived.costs.per_virtual_stage.try_emplace(key.first, ActionCosts{0, 0, 0, 0, latency})
            .first->second;
    const double mean = sum.first / sum.second;
    switch (key.second) {
      case ActionKind::kForward:
        c.forward = mean;
        break;
      case ActionKind::kBackward:
        c.backward = mean;
        break;
      case ActionKind::kBackwardInput:
        c.backward_input = mean;
        break;
      case ActionKind::kBackwardWeight:
        c.backward_weight = mean;
        break;
      default:
        BATON_FAIL("not a compute kind");
    }
  }
  // The step's other parts, per stage.
  const std::vector<StepParts> parts = MeasureBreakdown(trace, first_step);
  std::map<int64_t, std::vector<double>> exchange_by_step;
  for (int stage = 0; stage < p; ++stage) {
    const StepParts& part = parts[static_cast<size_t>(stage)];
    // Post: the engine's time in no span, shared by the stage's messages (sends and receives).
    const std::vector<Action>& program = schedule.per_stage[static_cast<size_t>(stage)];
    const auto messages = std::count_if(program.begin(), program.end(),
                                        [](const Action& a) { return IsCommunication(a.kind); });
    if (messages > 0) {
      for (auto& [j, c] : derived.costs.per_virtual_stage) {
        if (StageOfVirtualStage(j, p, schedule.layout) == stage) {
          c.post = part.uncovered / static_cast<double>(messages);
        }
      }
    }
    derived.step_start.push_back(part.step_start);
    derived.update.push_back(part.update);
    const std::vector<const StepTrace*> measured =
        Measured(trace[static_cast<size_t>(stage)], first_step);
    double between = 0;
    int gaps = 0;
    for (size_t i = 0; i + 1 < measured.size(); ++i) {
      if (measured[i + 1]->step != measured[i]->step + 1) continue;
      between += Millis(StepBegin(*measured[i + 1]) - StepEnd(*measured[i]));
      ++gaps;
    }
    derived.between.push_back(gaps > 0 ? between / gaps : 0);
    for (const StepTrace* step : measured) {
      exchange_by_step[step->step].push_back(PartsOf(*step).exchange);
    }
  }
  double exchange = 0;
  int steps = 0;
  for (const auto& [step, per_stage] : exchange_by_step) {
    if (static_cast<int>(per_stage.size()) != p) continue;  // a step not every stage traced
    exchange += *std::min_element(per_stage.begin(), per_stage.end());
    ++steps;
  }
  derived.exchange = steps > 0 ? exchange / steps : 0;
  return derived;
}

namespace {

// The part of a stage's step that the idle time before `next` is (before a SEND: its wait for
// the receive under rendezvous).
double& WaitPart(StepParts& parts, ActionKind next) {
  switch (next) {
    case ActionKind::kForward:
    case ActionKind::kRecvForward:
      return parts.recv_forward;
    case ActionKind::kSendForward:
    case ActionKind::kSendBackward:
      return parts.send;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight:  // a W needs no message: it never waits in the simulator
    case ActionKind::kRecvBackward:
      return parts.recv_backward;
  }
  BATON_FAIL("unknown action kind {}", static_cast<int>(next));
}

}  // namespace

SimulatedStep SimulateStep(const Schedule& schedule, const DerivedCosts& costs,
                           CommSemantics semantics) {
  const int p = schedule.stages;
  BATON_CHECK(static_cast<int>(costs.update.size()) == p, "costs for {} stages, schedule has {}",
              costs.update.size(), p);
  SimulatedStep sim;
  const SimulationResult async = Simulate(schedule, costs.costs);  // validates the schedule
  const DryRunResult run = DryRun(schedule, semantics, costs.costs);
  BATON_CHECK(run.ok, "schedule '{}' fails the dry run: {}", schedule.name, run.reason);
  std::vector<double> stage_end(static_cast<size_t>(p), 0.0);
  for (int r = 0; r < p; ++r) {
    for (double end : run.end[static_cast<size_t>(r)]) {
      stage_end[static_cast<size_t>(r)] = std::max(stage_end[static_cast<size_t>(r)], end);
    }
    sim.makespan = std::max(sim.makespan, stage_end[static_cast<size_t>(r)]);
  }
  // Every stage leaves the step end's exchange together; stage r then updates, is between steps
  // and starts its next step before its first action: its offset. Stage 0's first forward gates
  // the pipeline, so the period is stage 0's offset, the makespan and the exchange.
  const auto offset = [&](int r) {
    const size_t i = static_cast<size_t>(r);
    return costs.update[i] + costs.between[i] + costs.step_start[i];
  };
  sim.period = offset(0) + sim.makespan + costs.exchange;
  for (int r = 0; r < p; ++r) {
    const size_t i = static_cast<size_t>(r);
    const std::vector<Action>& actions = schedule.per_stage[i];
    StepParts parts;
    parts.update = costs.update[i];
    parts.step_start = costs.step_start[i];
    double previous_end = 0;
    bool first_compute = true;
    for (size_t k = 0; k < actions.size(); ++k) {
      const Action& a = actions[k];
      double idle = run.start[i][k] - previous_end;
      if (first_compute && IsCompute(a.kind)) {
        idle += offset(0) - offset(r);  // a later start shortens the first wait
        first_compute = false;
      }
      WaitPart(parts, a.kind) += idle;
      const double own = run.end[i][k] - run.start[i][k];  // a SEND or RECV: its post
      (IsCompute(a.kind) ? parts.compute : parts.uncovered) += own;
      previous_end = run.end[i][k];
    }
    parts.exchange = sim.makespan - stage_end[i] + costs.exchange;
    parts.step = sim.period - costs.between[i];
    sim.parts.push_back(parts);
  }
  sim.bubble = BubbleOf(sim.parts);
  // Simulate()'s own step: the same parts around its makespan.
  double busy = 0, step = 0;
  for (int r = 0; r < p; ++r) {
    const size_t i = static_cast<size_t>(r);
    busy += async.per_stage[i].busy + costs.update[i];
    step += offset(0) + async.makespan + costs.exchange - costs.between[i];
  }
  sim.async_bubble = 1.0 - busy / step;
  return sim;
}

std::vector<DerivedCosts> StepCosts(const PipelineTrace& trace, const Schedule& schedule,
                                    int64_t first_step, const DerivedCosts& derived) {
  const int p = schedule.stages;
  BATON_CHECK(static_cast<int>(trace.size()) == p, "a trace of {} stages for a {}-stage schedule",
              trace.size(), p);
  // step -> (its costs, the stages that traced it)
  std::map<int64_t, std::pair<DerivedCosts, int>> steps;
  for (int stage = 0; stage < p; ++stage) {
    for (const StepTrace* step : Measured(trace[static_cast<size_t>(stage)], first_step)) {
      auto [it, inserted] = steps.try_emplace(step->step, derived, 0);
      ++it->second.second;
      for (const TraceSpan& s : step->spans) {
        if (s.kind != TraceSpan::Kind::kCompute) continue;
        it->second.first.costs
            .per_action[{schedule.VirtualStageOf(s.action), s.action.kind, s.action.microbatch}] =
            Millis(s.end_us - s.start_us);
      }
    }
  }
  std::vector<DerivedCosts> out;
  for (auto& [step, costs] : steps) {
    if (costs.second == p) out.push_back(std::move(costs.first));
  }
  return out;
}

double ReplayedBubble(const Schedule& schedule, const std::vector<DerivedCosts>& steps,
                      CommSemantics semantics) {
  std::vector<StepParts> all;
  for (const DerivedCosts& costs : steps) {
    const SimulatedStep step = SimulateStep(schedule, costs, semantics);
    all.insert(all.end(), step.parts.begin(), step.parts.end());
  }
  return BubbleOf(all);
}

}  // namespace baton::bench
