// Tests of trace.json -> costs, breakdown and simulated step (trace_costs.h) on synthetic traces:
// spans of known length give known costs. No timing is measured.
#include "bench/trace_costs.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"

namespace baton::bench {
namespace {

using nlohmann::json;

// The planner's lowering of a generated schedule (planner/planner.cc).
Schedule Lowered(const std::string& name, int stages, int microbatches) {
  return PostReceivesEarly(
      InsertCommunication(MakeSchedule(name, stages, microbatches, ChunksFor(name, 1)),
                          CommPlacement::kRendezvousSafe));
}

// What a synthetic stage does around its actions, in ms.
struct Around {
  double step_start = 0;
  double update = 0;
  double between = 0;
};

// Traces `steps` steps of `schedule` as the runtime would if every action took exactly what
// `costs` says, each step's pipeline starting when stage 0 is ready, the step end's exchange
// taking `exchange` once the last stage arrives; step 1's compute takes `first_step_factor`
// times as long (a warm-up the derivation must leave out). A SEND or RECV that takes stage time
// (its post) leaves that time in no span, as the engine's posting does. Times in microseconds.
PipelineTrace Synthesize(const Schedule& schedule, const Costs& costs,
                         const std::vector<Around>& around, double exchange, int steps,
                         double first_step_factor) {
  const int p = schedule.stages;
  PipelineTrace trace(static_cast<size_t>(p));
  double leave_exchange = 0;  // when every stage leaves the previous step's exchange
  for (int step = 1; step <= steps; ++step) {
    Costs scaled = costs;
    for (auto& [j, c] : scaled.per_virtual_stage) {
      const double f = step == 1 ? first_step_factor : 1.0;
      c.forward *= f;
      c.backward *= f;
      c.backward_input *= f;
      c.backward_weight *= f;
    }
    const SimulationResult sim = Simulate(schedule, scaled);
    const DryRunResult run = DryRun(schedule, CommSemantics::kAsync, scaled);  // Simulate()'s
    const Around& a0 = around[0];
    const double zero = leave_exchange + a0.update + a0.between + a0.step_start;  // sim's t = 0
    const double exchange_end = zero + sim.makespan + exchange;
    for (int r = 0; r < p; ++r) {
      const Around& a = around[static_cast<size_t>(r)];
      StepTrace st{step, {}};
      const double begin = leave_exchange + a.update + a.between;
      const auto us = [](double ms) { return ms * 1000; };
      st.spans.push_back({TraceSpan::Kind::kStepStart, {}, us(begin), us(begin + a.step_start)});
      double free = begin + a.step_start;
      const std::vector<Action>& actions = schedule.per_stage[static_cast<size_t>(r)];
      for (size_t k = 0; k < actions.size(); ++k) {
        const Action& action = actions[k];
        const double start = zero + run.start[static_cast<size_t>(r)][k];
        const double end = zero + run.end[static_cast<size_t>(r)][k];
        if (!IsCompute(action.kind)) {  // posting: no span
          free = std::max(free, end);
          continue;
        }
        if (start > free) {
          const ActionKind waited = action.kind == ActionKind::kForward ? ActionKind::kRecvForward
                                                                        : ActionKind::kRecvBackward;
          Action on = action;
          on.kind = waited;
          st.spans.push_back({TraceSpan::Kind::kWait, on, us(free), us(start)});
        }
        st.spans.push_back({TraceSpan::Kind::kCompute, action, us(start), us(end)});
        free = end;
      }
      st.spans.push_back({TraceSpan::Kind::kExchange, {}, us(free), us(exchange_end)});
      st.spans.push_back({TraceSpan::Kind::kOptimizer, {}, us(free), us(exchange_end + a.update)});
      trace[static_cast<size_t>(r)].push_back(st);
    }
    leave_exchange = exchange_end;
  }
  return trace;
}

Costs TwoStageCosts(double latency) {
  Costs costs;
  costs.per_virtual_stage[0] = ActionCosts{10, 20, 0, 0, latency};
  costs.per_virtual_stage[1] = ActionCosts{12, 26, 0, 0, latency};
  costs.defaults = ActionCosts{0, 0, 0, 0, latency};
  return costs;
}

TEST(DeriveCosts, RecoversTheCostsOfASyntheticOneFOneBTrace) {
  const Schedule schedule = Lowered("1f1b", 2, 4);
  const Costs costs = TwoStageCosts(1.5);
  const PipelineTrace trace =
      Synthesize(schedule, costs, {{2, 5, 0.5}, {1, 7, 0.25}}, 3, 4, /*first_step_factor=*/3);
  const DerivedCosts derived = DeriveCosts(trace, schedule, 2);
  ASSERT_EQ(derived.costs.per_virtual_stage.size(), 2u);
  for (int j = 0; j < 2; ++j) {
    const ActionCosts& want = costs.per_virtual_stage.at(j);
    const ActionCosts& got = derived.costs.per_virtual_stage.at(j);
    EXPECT_NEAR(got.forward, want.forward, 1e-9) << j;  // step 1's slow F left out
    EXPECT_NEAR(got.backward, want.backward, 1e-9) << j;
    EXPECT_NEAR(got.communication, 1.5, 1e-9) << j;
  }
  EXPECT_GT(derived.latency_samples, 0);
  EXPECT_NEAR(derived.step_start[0], 2, 1e-9);
  EXPECT_NEAR(derived.step_start[1], 1, 1e-9);
  EXPECT_NEAR(derived.update[0], 5, 1e-9);
  EXPECT_NEAR(derived.update[1], 7, 1e-9);
  EXPECT_NEAR(derived.between[0], 0.5, 1e-9);
  EXPECT_NEAR(derived.between[1], 0.25, 1e-9);
  EXPECT_NEAR(derived.exchange, 3, 1e-9);  // the last stage to arrive waits for no one
}

TEST(SimulateStep, ReproducesTheMeasuredStepOfATraceThatFollowsTheModel) {
  for (const char* name : {"1f1b", "gpipe", "zb-h1", "zb-v"}) {
    const Schedule schedule = Lowered(name, 2, 4);
    Costs costs = TwoStageCosts(0.5);
    for (auto& [j, c] : costs.per_virtual_stage) {
      c.backward_input = c.backward / 2;
      c.backward_weight = c.backward / 2;
    }
    const PipelineTrace trace = Synthesize(schedule, costs, {{2, 5, 0.5}, {1, 7, 0.25}}, 3, 4, 2);
    const std::vector<StepParts> measured = MeasureBreakdown(trace, 2);
    const SimulatedStep sim = SimulateStep(schedule, DeriveCosts(trace, schedule, 2));
    ASSERT_EQ(sim.parts.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      const StepParts& m = measured[r];
      const StepParts& s = sim.parts[r];
      EXPECT_NEAR(m.step, s.step, 1e-6) << name << " stage " << r;
      EXPECT_NEAR(m.compute, s.compute, 1e-6) << name << " stage " << r;
      EXPECT_NEAR(m.recv_forward, s.recv_forward, 1e-6) << name << " stage " << r;
      EXPECT_NEAR(m.recv_backward, s.recv_backward, 1e-6) << name << " stage " << r;
      EXPECT_NEAR(m.exchange, s.exchange, 1e-6) << name << " stage " << r;
      EXPECT_NEAR(m.uncovered, 0, 1e-6) << name << " stage " << r;
    }
    EXPECT_NEAR(BubbleOf(measured), sim.bubble, 1e-9) << name;
    EXPECT_GT(sim.bubble, 0.05) << name;  // a 2-stage pipeline of 4 micro-batches idles
  }
}

TEST(SimulateStep, ChargesTheTimeInNoSpanToTheMessagesAsTheirPost) {
  // Every SEND and RECV holds its stage 0.25 ms (or 0.5 on stage 1) to be posted: that time is
  // in no span in the trace; the derivation shares it among the stage's messages, and the
  // simulator, charging it back, reproduces the measured step and bubble. (The stages start
  // their steps together here: the simulator posts a stage's first receives at its time 0.)
  for (const char* name : {"1f1b", "zb-h1", "zb-v"}) {
    const Schedule schedule = Lowered(name, 2, 4);
    Costs costs = TwoStageCosts(0.5);
    for (int j = 0; j < schedule.num_virtual_stages(); ++j) {
      ActionCosts& c =
          costs.per_virtual_stage.try_emplace(j, costs.per_virtual_stage.at(j % 2)).first->second;
      c.backward_input = c.backward / 2;
      c.backward_weight = c.backward / 2;
      c.post = StageOfVirtualStage(j, 2, schedule.layout) == 0 ? 0.25 : 0.5;
    }
    const PipelineTrace trace = Synthesize(schedule, costs, {{2, 5, 0.5}, {2, 5, 0.5}}, 3, 4, 1);
    const std::vector<StepParts> measured = MeasureBreakdown(trace, 2);
    const DerivedCosts derived = DeriveCosts(trace, schedule, 2);
    for (const auto& [j, c] : derived.costs.per_virtual_stage) {
      EXPECT_NEAR(c.post, costs.per_virtual_stage.at(j).post, 1e-9) << name << " " << j;
    }
    const SimulatedStep sim = SimulateStep(schedule, derived);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_GT(measured[r].uncovered, 1) << name << " stage " << r;
      EXPECT_NEAR(measured[r].uncovered, sim.parts[r].uncovered, 1e-6) << name << " stage " << r;
      EXPECT_NEAR(measured[r].step, sim.parts[r].step, 1e-6) << name << " stage " << r;
    }
    EXPECT_NEAR(BubbleOf(measured), sim.bubble, 1e-9) << name;
    DerivedCosts free_posts = derived;  // the simulator without posts misses the measured step
    for (auto& [j, c] : free_posts.costs.per_virtual_stage) c.post = 0;
    EXPECT_LT(SimulateStep(schedule, free_posts).bubble, BubbleOf(measured) - 1e-3) << name;
  }
}

TEST(SimulateStep, UnderRendezvousASendHoldsItsStageUntilItsReceiveIsPosted) {
  // ZB-H1's stage 0 sends forwards that stage 1, busy with I and W, receives later: with sends
  // that complete before the next compute the stage waits, with async sends it does not.
  const Schedule schedule = Lowered("zb-h1", 2, 8);
  Costs costs = TwoStageCosts(0.5);
  for (auto& [j, c] : costs.per_virtual_stage) {
    c.backward_input = 15;
    c.backward_weight = 10;
  }
  const PipelineTrace trace = Synthesize(schedule, costs, {{1, 5, 0}, {1, 5, 0}}, 1, 3, 1);
  const DerivedCosts derived = DeriveCosts(trace, schedule, 2);
  const SimulatedStep async = SimulateStep(schedule, derived, CommSemantics::kAsync);
  const SimulatedStep rendezvous = SimulateStep(schedule, derived, CommSemantics::kRendezvous);
  EXPECT_DOUBLE_EQ(async.parts[0].send, 0.0);
  EXPECT_GT(rendezvous.parts[0].send, 0.0);
  EXPECT_GE(rendezvous.bubble, async.bubble);
  EXPECT_NEAR(async.bubble, async.async_bubble, 1e-12);  // DryRun(kAsync) is Simulate()'s
  for (const SimulatedStep* sim : {&async, &rendezvous}) {
    for (const StepParts& p : sim->parts) {  // the parts add up to the step
      EXPECT_NEAR(p.compute + p.update + p.recv_forward + p.recv_backward + p.send + p.step_start +
                      p.exchange + p.uncovered,
                  p.step, 1e-9);
    }
  }
}

TEST(ReplayedBubble, ReplaysEachActionsOwnDurationWhereTheMeansMissASlowOne) {
  const Schedule schedule = Lowered("1f1b", 2, 4);
  Costs costs = TwoStageCosts(0.5);
  // Stage 0's forward of micro-batch 1 takes three times its kind's usual 10 ms: it delays
  // stage 1, which a simulator fed each kind's mean (15 ms) spreads over every forward.
  costs.per_action[{0, ActionKind::kForward, 1}] = 30;
  const PipelineTrace trace = Synthesize(schedule, costs, {{2, 5, 0.5}, {1, 7, 0.25}}, 3, 4, 1);
  const double measured = BubbleOf(MeasureBreakdown(trace, 2));
  const DerivedCosts derived = DeriveCosts(trace, schedule, 2);
  const std::vector<DerivedCosts> steps = StepCosts(trace, schedule, 2, derived);
  ASSERT_EQ(steps.size(), 3u);  // steps 2, 3 and 4
  EXPECT_EQ(steps[0].costs.per_action.at({0, ActionKind::kForward, 1}), 30);
  EXPECT_EQ(steps[0].costs.per_action.at({1, ActionKind::kBackward, 3}), 26);
  EXPECT_NEAR(ReplayedBubble(schedule, steps), measured, 1e-9);
  EXPECT_GT(std::abs(SimulateStep(schedule, derived).bubble - measured), 1e-3);
}

TEST(MeasureBreakdown, SplitsAStepByKindAndCountsTimeInNoSpan) {
  // One stage: step start 0-1 ms, F0 1-4, a 0.5 ms gap, wait SEND_F0 4.5-5, B0 5-9,
  // optimizer 9-12 with an exchange 9-10 inside.
  StepTrace step{2, {}};
  step.spans.push_back({TraceSpan::Kind::kStepStart, {}, 0, 1000});
  step.spans.push_back({TraceSpan::Kind::kCompute, {0, ActionKind::kForward, 0, 0}, 1000, 4000});
  step.spans.push_back({TraceSpan::Kind::kWait, {0, ActionKind::kSendForward, 0, 0}, 4500, 5000});
  step.spans.push_back({TraceSpan::Kind::kCompute, {0, ActionKind::kBackward, 0, 0}, 5000, 9000});
  step.spans.push_back({TraceSpan::Kind::kExchange, {}, 9000, 10000});
  step.spans.push_back({TraceSpan::Kind::kOptimizer, {}, 9000, 12000});
  const std::vector<StepParts> parts = MeasureBreakdown({{step}}, 2);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_DOUBLE_EQ(parts[0].step, 12);
  EXPECT_DOUBLE_EQ(parts[0].compute, 7);
  EXPECT_DOUBLE_EQ(parts[0].send, 0.5);
  EXPECT_DOUBLE_EQ(parts[0].step_start, 1);
  EXPECT_DOUBLE_EQ(parts[0].exchange, 1);
  EXPECT_DOUBLE_EQ(parts[0].update, 2);
  EXPECT_DOUBLE_EQ(parts[0].uncovered, 0.5);
  EXPECT_DOUBLE_EQ(BubbleOf(parts), 1.0 - 9.0 / 12.0);
}

TEST(DeriveCosts, AveragesDurationsRatherThanTakingTheMedian) {
  const Schedule schedule = Lowered("1f1b", 1, 1);  // F0, B0 on one stage
  PipelineTrace trace(1);
  const double durations[][2] = {{10, 20}, {10, 20}, {40, 20}};  // F, B of steps 2..4
  double t = 0;
  for (int k = 0; k < 3; ++k) {
    StepTrace step{k + 2, {}};
    step.spans.push_back(
        {TraceSpan::Kind::kCompute, {0, ActionKind::kForward, 0, 0}, t, t + durations[k][0] * 1e3});
    t += durations[k][0] * 1e3;
    step.spans.push_back({TraceSpan::Kind::kCompute,
                          {0, ActionKind::kBackward, 0, 0},
                          t,
                          t + durations[k][1] * 1e3});
    t += durations[k][1] * 1e3;
    step.spans.push_back({TraceSpan::Kind::kOptimizer, {}, t, t});
    trace[0].push_back(step);
  }
  const DerivedCosts derived = DeriveCosts(trace, schedule, 2);
  EXPECT_DOUBLE_EQ(derived.costs.per_virtual_stage.at(0).forward, 20.0);  // median would say 10
  EXPECT_DOUBLE_EQ(derived.costs.per_virtual_stage.at(0).backward, 20.0);
  EXPECT_EQ(derived.latency_samples, 0);
  // The simulated step of one stage has no bubble: compute and update only.
  const SimulatedStep sim = SimulateStep(schedule, derived);
  EXPECT_DOUBLE_EQ(sim.period, 40.0);
  EXPECT_DOUBLE_EQ(sim.bubble, 0.0);
}

TEST(DeriveCosts, RejectsATraceOfAnotherSchedule) {
  const Schedule one_f_one_b = Lowered("1f1b", 2, 4);
  const PipelineTrace trace =
      Synthesize(Lowered("gpipe", 2, 4), TwoStageCosts(0), {{1, 1, 0}, {1, 1, 0}}, 1, 3, 1);
  EXPECT_THROW(DeriveCosts(trace, one_f_one_b, 2), Error);
}

TEST(ReadChromeTrace, ParsesEverySpanNameAndGroupsByStageAndStep) {
  const json trace = json::parse(R"({"traceEvents": [
    {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "stage 1"}},
    {"name": "step start", "cat": "data", "ph": "X", "ts": 0, "dur": 5, "pid": 0, "tid": 1,
     "args": {"step": 3}},
    {"name": "wait RECV_F0", "cat": "wait", "ph": "X", "ts": 5, "dur": 10, "pid": 0, "tid": 1,
     "args": {"step": 3, "microbatch": 0}},
    {"name": "3F0", "cat": "compute", "ph": "X", "ts": 15, "dur": 20, "pid": 0, "tid": 1,
     "args": {"step": 3, "microbatch": 0}},
    {"name": "exchange", "cat": "wait", "ph": "X", "ts": 35, "dur": 1, "pid": 0, "tid": 1,
     "args": {"step": 3}},
    {"name": "optimizer", "cat": "compute", "ph": "X", "ts": 35, "dur": 4, "pid": 0, "tid": 1,
     "args": {"step": 3}},
    {"name": "F1", "cat": "compute", "ph": "X", "ts": 0, "dur": 7, "pid": 0, "tid": 0,
     "args": {"step": 2, "microbatch": 1}},
    {"name": "F1", "cat": "compute", "ph": "X", "ts": 0, "dur": 7, "pid": 0, "tid": 2,
     "args": {"step": 2, "microbatch": 1}}]})");
  const PipelineTrace pipeline =
      ReadChromeTrace(trace, 2, ChunkLayout::kLoop);  // tid 2: another replica's
  ASSERT_EQ(pipeline.size(), 2u);
  ASSERT_EQ(pipeline[0].size(), 1u);
  EXPECT_EQ(pipeline[0][0].step, 2);
  ASSERT_EQ(pipeline[1].size(), 1u);
  const std::vector<TraceSpan>& spans = pipeline[1][0].spans;
  ASSERT_EQ(spans.size(), 5u);
  EXPECT_EQ(spans[0].kind, TraceSpan::Kind::kStepStart);
  EXPECT_EQ(spans[1].kind, TraceSpan::Kind::kWait);
  EXPECT_EQ(spans[1].action, (Action{1, ActionKind::kRecvForward, 0, 0}));
  EXPECT_EQ(spans[2].action, (Action{1, ActionKind::kForward, 0, 1}));  // virtual stage 3
  EXPECT_DOUBLE_EQ(spans[2].end_us, 35);
  EXPECT_EQ(spans[3].kind, TraceSpan::Kind::kExchange);
  EXPECT_EQ(spans[4].kind, TraceSpan::Kind::kOptimizer);
  // Under the V layout stage 1's chunk 1 is virtual stage 2 (2p-1-s), named so.
  const json v = json::parse(R"({"traceEvents": [{"name": "2F0", "ph": "X", "ts": 0, "dur": 1,
      "tid": 1, "args": {"step": 2}}]})");
  EXPECT_EQ(ReadChromeTrace(v, 2, ChunkLayout::kV)[1][0].spans[0].action,
            (Action{1, ActionKind::kForward, 0, 1}));
  EXPECT_THROW(ReadChromeTrace(json::parse(R"({"traceEvents": [{"name": "wait F0", "ph": "X",
      "ts": 0, "dur": 1, "tid": 0, "args": {"step": 1}}]})"),
                               1, ChunkLayout::kLoop),
               Error);
}

}  // namespace
}  // namespace baton::bench
