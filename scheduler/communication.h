// Send/receive insertion: turns a compute-only schedule (F/B/I/W) into the one a runtime executes,
// with a SEND after every compute whose output another rank needs and a RECV on that rank before
// its use. Pure: the compute actions keep their order; only SEND/RECV actions are added.
//
// What crosses ranks (virtual stage j, micro-batch k): F(j,k)'s activation to j+1, and B/I(j,k)'s
// input gradient to j-1, whenever the other virtual stage lives on another rank. W sends nothing.
// Each link (ordered rank pair) carries its messages in the sender's order, and the receiver posts
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

}  // namespace baton
