#include "planner/in_process.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <mutex>
#include <thread>

#include "checkpoint/checkpoint_snapshot.h"
#include "comm/fake_communicator.h"
#include "core/error.h"
#include "kernels/backend_factory.h"
#include "model/from_config.h"

namespace baton {

InProcessResult RunInProcess(const Plan& plan) {
  const int p = plan.world_size();  // stages x replicas x tensor ranks
  FakeHub hub(p);
  InProcessResult result;
  result.ranks.resize(static_cast<size_t>(p));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  // spdlog's registry is made on first use: here, not by the first of the stage threads to log
  // (a thread-safe static, but inside uninstrumented libspdlog, so TSan saw its construction race
  // the others' logging).
  spdlog::default_logger_raw();
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        SetErrorContext(fmt::format("stage {}", r));
        std::unique_ptr<Communicator> comm = p > 1 ? hub.Make(r) : nullptr;
        MemoryLedger ledger;
        // GPU stages run here only alone (FakeHub moves host tensors): a one-rank GPU plan.
        BATON_CHECK(plan.config.device.type == DeviceType::kCpu || p == 1,
                    "in-process runs on GPUs take one stage, not {}", p);
        std::unique_ptr<Backend> backend = MakeBackend(
            DeviceForLocalRank(plan.config.device.type, 0), ledger, plan.config.device.threads);
        InProcessRank& out = result.ranks[static_cast<size_t>(r)];
        {
          // A background save's host copy (output.async_checkpoint), kept from the first save on.
          CheckpointSnapshot snapshot(backend->allocator());
          const bool copies =
              plan.config.output.async_checkpoint && WritesCheckpointFiles(plan.layout(), r);
          Trainer trainer(TrainerSetupFor(plan, r, comm.get()), *backend);
          for (int64_t step = 1; step <= plan.config.train.steps; ++step) {
            out.steps.push_back(trainer.Step(step));
            out.peak_stashed_microbatches =
                std::max(out.peak_stashed_microbatches, trainer.peak_stashed_microbatches());
            // What a worker's save books (its gathered and whole temporaries, and a background
            // save's host copy), no file written.
            if (CheckpointAfterStep(plan.config, step)) {
              trainer.state().SaveTo(copies ? &snapshot : nullptr);
            }
          }
          out.digests = trainer.LayerDigests();
          out.tied_digests = trainer.TiedParamDigests();
        }
        out.peak = ledger.Peak();
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        hub.Abort(fmt::format("stage {} failed", r));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  std::vector<std::pair<int, uint64_t>> digests;
  // Replica 0's, each tensor rank's parts (the other replicas hold the same), in stage order.
  const ParallelLayout layout = plan.layout();
  for (int first : layout.GroupOf(Axis::kPipeline, 0)) {
    for (int r : layout.GroupOf(Axis::kTensor, first)) {
      const InProcessRank& rank = result.ranks[static_cast<size_t>(r)];
      digests.insert(digests.end(), rank.digests.begin(), rank.digests.end());
    }
  }
  result.param_checksum = CombineLayerDigests(digests);
  // The last replica's head (every replica's head has the step's loss).
  const int head = layout.WorldRank({.stage = plan.head_stage(), .replica = layout.replicas() - 1});
  for (const StepRecord& s : result.ranks[static_cast<size_t>(head)].steps) {
    result.losses.push_back(s.loss);
    if (s.eval) result.eval_losses.push_back(s.eval->loss);
  }
  return result;
}

}  // namespace baton
