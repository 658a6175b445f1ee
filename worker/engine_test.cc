// The stage engine on its own: tiny GPT stages over the fake communicator (FakeHub), driven by
// programs written out action by action, and by generated schedules against a one-stage run.
#include "worker/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/fake_communicator.h"
#include "comm/group.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "model/graph.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"
#include "worker/stage_model.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kBatch = 2;
constexpr int kSeq = 5;
// V=11, maxT=5, L=2, NH=2, C=8: embedding, block.0, block.1, head.
const ModelDims kDims{11, 5, 2, 2, 8};

// One rank of a pipeline over `ranges` (one chunk each), with its own ledger and backend.
struct Stage {
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend = MakeCpuBackend(ledger, 1);
  std::unique_ptr<StageModel> model;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<StageEngine> engine;
  int microbatches = 1;

  // `view`, when given, is the pipeline's communicator instead of the hub's rank `rank`.
  Stage(const std::vector<LayerRange>& chunks, int rank, int num_stages, FakeHub* hub,
        int microbatches_, std::chrono::milliseconds timeout = std::chrono::seconds(120),
        Communicator* view = nullptr)
      : microbatches(microbatches_) {
    model = std::make_unique<StageModel>(GptGraph(kDims), kDims, chunks, rank, num_stages,
                                         ChunkLayout::kLoop, *backend, DType::kF32, DType::kF32,
                                         /*seed=*/7);
    if (hub != nullptr) comm = hub->Make(rank);
    EngineOptions options;
    options.num_microbatches = microbatches;
    options.timeout = timeout;
    options.activation_shape = {kBatch, kSeq, kDims.width};
    engine = std::make_unique<StageEngine>(*backend, *model, view ? view : comm.get(), options);
  }
};

// Micro-batch k: tokens and next-token targets drawn from k.
std::vector<MicroBatch> Batches(Backend& backend, int count) {
  std::vector<MicroBatch> batches;
  for (int k = 0; k < count; ++k) {
    MicroBatch batch;
    batch.tokens =
        Tensor::Zeros(backend.allocator(), {kBatch, kSeq}, DType::kI32, MemCategory::kActivations);
    batch.targets =
        Tensor::Zeros(backend.allocator(), {kBatch, kSeq}, DType::kI32, MemCategory::kActivations);
    for (int i = 0; i < kBatch * kSeq; ++i) {
      batch.tokens.data<int32_t>()[i] = (3 * k + 5 * i + 1) % kDims.vocab_size;
      batch.targets.data<int32_t>()[i] = (3 * k + 5 * i + 2) % kDims.vocab_size;
    }
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::vector<Action> Program(const std::string& text, int rank, int num_stages) {
  std::vector<Action> actions;
  std::istringstream in(text);
  for (std::string word; in >> word;)
    actions.push_back(ParseAction(word, rank, num_stages, ChunkLayout::kLoop));
  return actions;
}

// Every gradient of `models`' parameters, in graph order, as float vectors.
std::vector<std::vector<float>> Gradients(const std::vector<StageModel*>& models) {
  std::vector<std::vector<float>> grads;
  for (StageModel* model : models) {
    for (Param* p : model->params()) {
      const float* g = p->grad.data<float>();
      grads.emplace_back(g, g + p->grad.numel());
    }
  }
  return grads;
}

// Runs each stage's program on a thread of its own; rethrows the first stage's error.
void RunAll(std::vector<Stage*> stages, const std::vector<std::vector<Action>>& programs,
            std::vector<std::vector<float>>* losses) {
  std::vector<std::exception_ptr> errors(stages.size());
  std::vector<std::thread> threads;
  losses->assign(stages.size(), {});
  for (size_t r = 0; r < stages.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        const std::vector<MicroBatch> batches =
            Batches(*stages[r]->backend, stages[r]->microbatches);
        (*losses)[r] = stages[r]->engine->RunStep(programs[r], batches, 1.0f);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

// One rank's program of a two-stage GPipe step, as InsertCommunication writes it.
TEST(StageEngineTest, TwoStagesEndWithTheOneStageGradientsAndLossesBitForBit) {
  constexpr int kMicro = 3;
  Stage whole({{0, 3}}, 0, 1, nullptr, kMicro);
  const std::vector<Action> one = MakeSchedule("gpipe", 1, kMicro).per_stage.at(0);
  const std::vector<float> expected =
      whole.engine->RunStep(one, Batches(*whole.backend, kMicro), 1.0f);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kMicro));

  FakeHub hub(2);
  Stage first({{0, 1}}, 0, 2, &hub, kMicro);
  Stage last({{2, 3}}, 1, 2, &hub, kMicro);
  const Schedule two = InsertCommunication(MakeSchedule("gpipe", 2, kMicro));
  std::vector<std::vector<float>> losses;
  RunAll({&first, &last}, two.per_stage, &losses);

  EXPECT_TRUE(losses[0].empty());  // only the head's rank has losses
  EXPECT_EQ(losses[1], expected);
  EXPECT_EQ(Gradients({first.model.get(), last.model.get()}), Gradients({whole.model.get()}));
  for (const float loss : expected) EXPECT_GT(loss, 0.0f);
}

// GPipe keeps every micro-batch in flight on every stage; 1F1B at most p - stage on each.
TEST(StageEngineTest, OneFOneBBoundsTheFirstStagesStashedMicroBatches) {
  constexpr int kMicro = 3;
  for (const char* name : {"gpipe", "1f1b"}) {
    FakeHub hub(2);
    Stage first({{0, 1}}, 0, 2, &hub, kMicro);
    Stage last({{2, 3}}, 1, 2, &hub, kMicro);
    const Schedule schedule = InsertCommunication(MakeSchedule(name, 2, kMicro));
    std::vector<std::vector<float>> losses;
    RunAll({&first, &last}, schedule.per_stage, &losses);
    const bool gpipe = std::string(name) == "gpipe";
    EXPECT_EQ(first.engine->peak_stashed(), gpipe ? 3 : 2) << name;
    EXPECT_EQ(last.engine->peak_stashed(), gpipe ? 3 : 1) << name;
  }
}

// Driven by hand: F0 sends on, the first stage waits for a gradient its peer never sends. The
// wait ends at the engine's timeout, naming the stage, the action and the micro-batch.
TEST(StageEngineTest, AGradientThatNeverComesTimesOutNamingStageActionAndMicroBatch) {
  FakeHub hub(2);
  Stage first({{0, 1}}, 0, 2, &hub, 1, std::chrono::milliseconds(300));
  try {
    first.engine->RunStep(Program("F0 SEND_F0 RECV_B0 B0", 0, 2), Batches(*first.backend, 1), 1.0f);
    FAIL() << "no timeout";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("stage 0 action B0 (micro-batch 0, chunk 0)"));
    EXPECT_THAT(e.what(), HasSubstr("gradient from stage 1"));
  }
  EXPECT_EQ(first.engine->status().action, "RECV_B");
}

// The pipeline of tensor rank 1 in a job of 2 stages x 2 tensor ranks is world ranks {1, 3}: the
// engine talks to stage 1, but its status names world rank 3, which the launcher prints as
// "peer rank 3" (a stage printed as a rank misled hang reports: "peer rank 1" was itself).
TEST(StageEngineTest, TheStatusNamesThePeersWorldRankNotItsStage) {
  FakeHub hub(4);
  std::unique_ptr<Communicator> world = hub.Make(1);
  Group pipeline(*world, {1, 3});
  Stage first({{0, 1}}, 0, 2, nullptr, 1, std::chrono::milliseconds(300), &pipeline);
  std::vector<EngineStatus> seen;
  first.engine->set_status_callback([&seen](const EngineStatus& s) { seen.push_back(s); });
  EXPECT_THROW(first.engine->RunStep(Program("F0 SEND_F0 RECV_B0 B0", 0, 2),
                                     Batches(*first.backend, 1), 1.0f),
               Error);  // stage 1 never sends the gradient
  std::vector<int> waited_on;
  for (const EngineStatus& s : seen) {
    if (s.action == "RECV_B") waited_on.push_back(s.peer_rank);
  }
  EXPECT_EQ(waited_on, std::vector<int>{3});
  EXPECT_EQ(first.engine->status().peer_rank, 3);
  world.reset();  // with the pending send, whose tensor is the backend's, which goes first
}

TEST(StageEngineTest, AProgramThatBreaksItsOwnOrderIsRefused) {
  Stage whole({{0, 3}}, 0, 1, nullptr, 2);
  const std::vector<MicroBatch> batches = Batches(*whole.backend, 2);
  // A backward before its forward.
  EXPECT_THROW(whole.engine->RunStep(Program("B0 F0", 0, 1), batches, 1.0f), Error);
  // Another rank's action.
  FakeHub hub(2);
  Stage first({{0, 1}}, 0, 2, &hub, 1);
  try {
    first.engine->RunStep({Action{1, ActionKind::kForward, 0, 0}}, Batches(*first.backend, 1),
                          1.0f);
    FAIL() << "ran another stage's action";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("stage 0 was given"));
  }
  // A send of what no compute action has produced.
  try {
    first.engine->RunStep(Program("SEND_F0", 0, 2), Batches(*first.backend, 1), 1.0f);
    FAIL() << "sent nothing";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("nothing to send"));
  }
}

TEST(StageEngineTest, AForwardOnlyProgramHoldsNoBackwardAndStashesLess) {
  const auto activations = [](const MemoryFigures& f) {
    return f.bytes[static_cast<size_t>(MemCategory::kActivations)];
  };
  Stage evaluating({{0, 3}}, 0, 1, nullptr, 2);
  const std::vector<MicroBatch> batches = Batches(*evaluating.backend, 2);
  EXPECT_THROW(evaluating.engine->RunForward(Program("F0 B0", 0, 1), batches), Error);
  const std::vector<float> losses = evaluating.engine->RunForward(Program("F0 F1", 0, 1), batches);

  Stage training({{0, 3}}, 0, 1, nullptr, 2);
  const std::vector<float> trained =
      training.engine->RunStep(Program("F0 F1 B0 B1", 0, 1), Batches(*training.backend, 2), 1.0f);
  EXPECT_EQ(losses, trained);  // the same forward
  // Evaluation drops each layer's stash once it ran; training keeps both micro-batches'.
  EXPECT_LT(activations(evaluating.ledger.Peak()), activations(training.ledger.Peak()));
}

// A trace span per compute action, in program order, and a wait span per wait.
TEST(StageEngineTest, TheTraceHasOneComputeSpanPerComputeActionInProgramOrder) {
  FakeHub hub(2);
  Stage first({{0, 1}}, 0, 2, &hub, 2);
  Stage last({{2, 3}}, 1, 2, &hub, 2);
  const Schedule schedule = InsertCommunication(MakeSchedule("1f1b", 2, 2));
  std::vector<std::vector<float>> losses;
  RunAll({&first, &last}, schedule.per_stage, &losses);
  for (Stage* stage : {&first, &last}) {
    std::vector<Action> computed;
    for (const TraceSpan& span : stage->engine->last_trace()) {
      if (span.kind == TraceSpan::Kind::kCompute) computed.push_back(span.action);
      EXPECT_LE(span.start_us, span.end_us);
    }
    std::vector<Action> program;
    for (const Action& a : schedule.per_stage.at(static_cast<size_t>(stage->model->stage()))) {
      if (IsCompute(a.kind)) program.push_back(a);
    }
    EXPECT_EQ(computed, program);
  }
}

}  // namespace baton
