// Pipeline actions: the instruction set a schedule is written in, and its text form.
//
// Terms used throughout (README, "Layout"; docs/schedules.md):
//   stage          a position in the pipeline, 0..p-1: `Action::stage`, the schedule's rows. In a
//                  job of R data-parallel replicas each stage runs in R processes.
//   rank           a process of the job (world rank = replica * p + stage); `replica` which copy
//                  of the pipeline it belongs to.
//   chunk          one model chunk held by a stage, 0..v-1 (v = 1 unless interleaved).
//   virtual stage  a chunk's position in the model, 0..p*v-1. Stage s holds virtual stages s,
//                  s+p, s+2p, ... (Megatron's layout): chunk c of stage s is virtual stage c*p + s.
//                  Activations flow from virtual stage j to j+1, gradients from j+1 to j.
//
// Text form (PyTorch torch.distributed.pipelining compatible): `[VS]KIND MB` without spaces, where
// VS is the virtual stage, KIND one of F B I W SEND_F RECV_F SEND_B RECV_B, and MB the micro-batch.
// VS is omitted exactly when it equals the stage, i.e. for chunk 0, so non-interleaved schedules
// read "F3", "SEND_B5"; chunk 1 on stage 1 of a 4-stage pipeline is "5F3". Parsing accepts VS
// either way ("1F3" on stage 1 is the same action as "F3"), so PyTorch CSVs with explicit stages
// load.
// Round trip: ParseAction(ToString(a, p), a.stage, p) == a for every valid a.
//
// Communication actions name the *local* virtual stage, as in PyTorch: SEND_F on virtual stage j
// sends j's forward output to j+1; RECV_F on j receives j-1's output; SEND_B on j sends the
// gradient of j's input to j-1; RECV_B on j receives it from j+1. PeerStage() gives the stage at
// the other end.
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

// One step of one stage's program.
struct Action {
  int stage = 0;  // the stage that executes the action (NOT the virtual stage; see VirtualStage())
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;
  int chunk = 0;  // model chunk on that stage; 0 unless interleaved

  friend bool operator==(const Action&, const Action&) = default;
};

// "F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
std::string_view KindName(ActionKind kind);
bool IsCompute(ActionKind kind);        // F, B, I, W
bool IsSend(ActionKind kind);           // SEND_F, SEND_B
bool IsRecv(ActionKind kind);           // RECV_F, RECV_B
bool IsCommunication(ActionKind kind);  // any SEND or RECV

// Megatron layout: chunk c of stage s is virtual stage c * num_stages + s.
inline int VirtualStage(int stage, int chunk, int num_stages) { return chunk * num_stages + stage; }
inline int VirtualStage(const Action& action, int num_stages) {
  return VirtualStage(action.stage, action.chunk, num_stages);
}
inline int StageOfVirtualStage(int virtual_stage, int num_stages) {
  return virtual_stage % num_stages;
}
inline int ChunkOfVirtualStage(int virtual_stage, int num_stages) {
  return virtual_stage / num_stages;
}

// For a SEND/RECV: the virtual stage at the other end (j+1 for SEND_F and RECV_B, j-1 for RECV_F
// and SEND_B) and the stage holding it. Throws baton::Error for compute actions.
int PeerVirtualStage(const Action& action, int num_stages);
int PeerStage(const Action& action, int num_stages);

// Canonical text form; see the file comment.
std::string ToString(const Action& action, int num_stages);
// Parses one action executed by `stage` of a `num_stages` pipeline. Throws baton::Error
// naming the text when it is malformed or its virtual stage is not held by `stage`.
Action ParseAction(std::string_view text, int stage, int num_stages);

}  // namespace baton
