// Pipeline actions: the instruction set a schedule is written in, and its text form.
//
// Terms used throughout scheduler/ (and docs/schedules.md):
//   rank           one pipeline process (one GPU); p ranks in all. `Action::stage` is a rank.
//   chunk          one model chunk held by a rank, 0..v-1 (v = 1 unless the schedule is
//   interleaved). virtual stage  a chunk's position in the model, 0..p*v-1. Rank r holds virtual
//   stages
//                  r, r+p, r+2p, ... (Megatron's layout): chunk c of rank r is virtual stage c*p +
//                  r. Activations flow from virtual stage j to j+1, gradients from j+1 to j.
//
// Text form (PyTorch torch.distributed.pipelining compatible): `[VS]KIND MB` without spaces, where
// VS is the virtual stage, KIND one of F B I W SEND_F RECV_F SEND_B RECV_B, and MB the micro-batch.
// VS is omitted exactly when it equals the rank, i.e. for chunk 0, so non-interleaved schedules
// read "F3", "SEND_B5"; chunk 1 on rank 1 of a 4-rank pipeline is "5F3". Parsing accepts VS either
// way
// ("1F3" on rank 1 is the same action as "F3"), so PyTorch CSVs with explicit stages load.
// Round trip: ParseAction(ToString(a, p), a.stage, p) == a for every valid a.
//
// Communication actions name the *local* virtual stage, as in PyTorch: SEND_F on virtual stage j
// sends j's forward output to j+1; RECV_F on j receives j-1's output; SEND_B on j sends the
// gradient of j's input to j-1; RECV_B on j receives it from j+1. PeerRank() gives the rank at the
// other end.
#pragma once

#include <string>
#include <string_view>

namespace baton {

enum class ActionKind {
  kForward,         // F: forward of one micro-batch through one chunk; stashes what backward needs.
  kBackward,        // B: full backward (input and weight gradients); frees the stash.
  kBackwardInput,   // I: backward for the input gradient only (what the previous stage waits for).
  kBackwardWeight,  // W: backward for the weight gradients; needs I done; frees the stash.
  kSendForward,     // SEND_F: post the F output to the next virtual stage. Pairs with its RECV_F.
  kRecvForward,     // RECV_F: receive the previous virtual stage's F output. Pairs with SEND_F.
  kSendBackward,    // SEND_B: post the B/I input gradient to the previous virtual stage.
  kRecvBackward,    // RECV_B: receive the next virtual stage's input gradient. Pairs with SEND_B.
};

inline constexpr ActionKind kAllActionKinds[] = {
    ActionKind::kForward,        ActionKind::kBackward,    ActionKind::kBackwardInput,
    ActionKind::kBackwardWeight, ActionKind::kSendForward, ActionKind::kRecvForward,
    ActionKind::kSendBackward,   ActionKind::kRecvBackward};

// One step of one rank's program.
struct Action {
  int stage = 0;  // the rank that executes the action (NOT the virtual stage; see VirtualStage())
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  int chunk = 0;  // model chunk on that rank; 0 unless interleaved

  friend bool operator==(const Action&, const Action&) = default;
};

// "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
std::string_view KindName(ActionKind kind);
bool IsCompute(ActionKind kind);        // F, B, I, W
bool IsSend(ActionKind kind);           // SEND_F, SEND_B
bool IsRecv(ActionKind kind);           // RECV_F, RECV_B
bool IsCommunication(ActionKind kind);  // any SEND or RECV

// Megatron layout: chunk c of rank r is virtual stage c * num_ranks + r.
inline int VirtualStage(int rank, int chunk, int num_ranks) { return chunk * num_ranks + rank; }
inline int VirtualStage(const Action& action, int num_ranks) {
  return VirtualStage(action.stage, action.chunk, num_ranks);
}
inline int RankOfVirtualStage(int virtual_stage, int num_ranks) {
  return virtual_stage % num_ranks;
}
inline int ChunkOfVirtualStage(int virtual_stage, int num_ranks) {
  return virtual_stage / num_ranks;
}

// For a SEND/RECV: the virtual stage at the other end (j+1 for SEND_F and RECV_B, j-1 for RECV_F
// and SEND_B) and the rank holding it. Throws baton::Error for compute actions.
int PeerVirtualStage(const Action& action, int num_ranks);
int PeerRank(const Action& action, int num_ranks);

// Canonical text form; see the file comment.
std::string ToString(const Action& action, int num_ranks);
// Parses one action executed by `rank` of a `num_ranks` pipeline. Throws baton::Error
// naming the text when it is malformed or its virtual stage is not held by `rank`.
Action ParseAction(std::string_view text, int rank, int num_ranks);

}  // namespace baton
