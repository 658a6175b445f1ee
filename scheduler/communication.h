// Send/receive insertion: turns a compute-only schedule (F/B/I/W) into the one a runtime executes,
// with a SEND after every compute whose output another stage needs and a RECV on that stage before
// its use. Pure: the compute actions keep their order; only SEND/RECV actions are added.
//
// What crosses stages (virtual stage j, micro-batch k): F(j,k)'s activation to j+1, and B/I(j,k)'s
// input gradient to j-1, whenever the other virtual stage lives on another stage. W sends nothing.
// Each link (ordered stage pair) carries its messages in the sender's order, and the receiver posts
// its RECVs in that same order (no tags, like NCCL).
#pragma once

#include "scheduler/schedule.h"

namespace baton {

enum class CommPlacement {
  // SEND right after the producing compute; RECV right before the consuming compute (preceded by
  // any RECVs the link must deliver first). Deadlock-free under CommSemantics::kAsync, the
  // runtime's semantics; NOT in general under kRendezvous (1F1B's steady state would have each
  // neighbour blocked in a SEND to the other).
  kJustInTime,
  // Every SEND and its RECV sit at the same point of one global order (the unit-cost timeline of
  // the compute schedule: a message is exchanged when its producer ends). SENDs still follow their
  // producer directly; RECVs move earlier, to when the data is produced. Deadlock-free under
  // kRendezvous as well (blocking send and receive, e.g. NCCL on one stream without groups).
  kRendezvousSafe,
};

// Throws baton::Error when the input already has SEND/RECV actions or fails Validate()
// (the message then carries the marked grid).
Schedule InsertCommunication(const Schedule& compute_only,
                             CommPlacement placement = CommPlacement::kJustInTime);

// Lowering for the runtime (worker/engine.h): every RECV that follows a compute action, before the
// next compute action, moves to just before that compute action (the RECVs keep their order; the
// SENDs stay after their producer). The engine posts a RECV where the program puts it, so each
// receive is then posted while the compute before it runs, and a peer's send, which may complete
// only once its receive is posted, need not wait for this stage to finish that compute. The dry
// run and the simulator see the lowered program the engine runs.
//
// Applied once, by the planner, to the program every stage receives (a second application would
// move the RECVs one compute action earlier again). Throws baton::Error when a schedule of more
// than one stage has no SEND/RECV actions.
Schedule PostReceivesEarly(const Schedule& with_communication);

}  // namespace baton
