// What a rank hands back when it finishes (plan/codec.h: proto RankResult), and the records it
// is made of: trace spans, an evaluation. The worker fills them in; the launcher reads them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "scheduler/action.h"

namespace baton {

// One interval of a rank's time, for traces: a compute action it ran, an action it waited on (a
// RECV for its data, a SEND to complete), the step start (zeroing gradients and filling the step's
// micro-batches, before the first action), the step end ("optimizer": from the last action to
// the end of the update) and, inside the step end's span, each of its passes that exchanges with
// peers (tied-gradient sums, gradient reduction, the norm's all-reduce: waiting for the slowest
// stage included); under ZeRO-2 also, inside a backward's span, a layer's reduce-scatter. Times
// are microseconds of the system clock (comparable across processes on one host).
struct TraceSpan {
  enum class Kind { kCompute, kWait, kOptimizer, kStepStart, kExchange };
  Kind kind = Kind::kCompute;
  Action action;  // used for kCompute and kWait only
  double start_us = 0;
  double end_us = 0;
  bool HasAction() const { return kind == Kind::kCompute || kind == Kind::kWait; }
  // "F3", "5B2"; "wait RECV_F3", "wait SEND_B1"; "optimizer"; "step start"; "exchange".
  std::string Name(int num_stages, ChunkLayout layout) const;
  bool operator==(const TraceSpan&) const = default;
};

// One evaluation of the held-out data (docs/data.md, "Evaluation").
struct EvalRecord {
  double loss = 0;      // mean over every micro-batch of every batch; valid on the head's rank
  int64_t batches = 0;  // of train.batch_size windows
  int64_t tokens = 0;   // predicted tokens: batches x batch_size x seq_len
  double seconds = 0;
  bool operator==(const EvalRecord&) const = default;
};

// The spans of one traced step.
struct StepTrace {
  int64_t step = 0;
  std::vector<TraceSpan> spans;
  bool operator==(const StepTrace&) const = default;
};

// What a rank hands back when it finishes (under the store key ResultKey(rank)).
struct RankResult {
  int rank = 0;
  std::vector<std::pair<int, uint64_t>> digests;  // (graph layer, FNV-1a of its parameters)
  MemoryFigures memory_peak;                      // the ledger's peaks
  double compute_s = 0;                           // inside F/B/I/W, over the steps run
  double wall_s = 0;                              // the steps' wall time
  bool holds_head = false;
  std::vector<StepTrace> trace;    // the last few steps (steady state)
  std::optional<EvalRecord> eval;  // `baton eval`'s evaluation (its loss valid on the head's rank)
  bool operator==(const RankResult&) const = default;
};

}  // namespace baton
