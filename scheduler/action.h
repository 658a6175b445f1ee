// Pipeline actions: the instruction set a schedule is written in, and its text form.
//
// Terms used throughout (README, "Layout"; docs/schedules.md):
//   stage          a position in the pipeline, 0..p-1: `Action::stage`, the schedule's rows. In a
//                  job of R data-parallel replicas each stage runs in R processes.
//   rank           a process of the job (world rank = replica * p + stage); `replica` which copy
//                  of the pipeline it belongs to.
//   chunk          one model chunk held by a stage, 0..v-1 (v = 1 unless interleaved).
//   virtual stage  a chunk's position in the model, 0..p*v-1. Under Megatron's layout (kLoop)
//                  stage s holds virtual stages s, s+p, s+2p, ...: chunk c of stage s is virtual
//                  stage c*p + s; under the V layout odd chunks are reversed (ChunkLayout).
//                  Activations flow from virtual stage j to j+1, gradients from j+1 to j.
//
// Text form (PyTorch torch.distributed.pipelining compatible): `[VS]KIND MB` without spaces, where
// VS is the virtual stage, KIND one of F B I W SEND_F RECV_F SEND_B RECV_B, and MB the micro-batch.
// VS is omitted exactly when it equals the stage, i.e. for chunk 0, so non-interleaved schedules
// read "F3", "SEND_B5"; chunk 1 on stage 1 of a 4-stage pipeline is "5F3" (kLoop) or "6F3" (kV).
// Parsing accepts VS either way ("1F3" on stage 1 is the same action as "F3"), so PyTorch CSVs with
// explicit stages load. Round trip: ParseAction(ToString(a, p, l), a.stage, p, l) == a for every
// valid a.
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

// Where each chunk sits in the model (docs/schedules.md, "Chunk layouts"):
//   kLoop  Megatron's: chunk c of stage s is virtual stage c*p + s; the model loops over the
//          stages v times (interleaved 1F1B, looped BFS).
//   kV     V shape: even chunks run down the stages and odd chunks back up, so chunk c of stage
//          s is virtual stage c*p + s for even c and c*p + p-1-s for odd c. With 2 chunks stage 0
//          holds the first and the last virtual stage, and stage p-1 hands its chunk 0's output to
//          its own chunk 1 (ZB-V, V-Half, V-Min, DualPipeV).
// In both, chunk c holds virtual stages c*p .. c*p + p-1.
enum class ChunkLayout { kLoop, kV };

std::string_view LayoutName(ChunkLayout layout);  // "loop", "v"
// Throws baton::Error naming the text unless it is "loop" or "v".
ChunkLayout ParseLayout(std::string_view name);

inline int VirtualStage(int stage, int chunk, int num_stages, ChunkLayout layout) {
  const bool reversed = layout == ChunkLayout::kV && chunk % 2 == 1;
  return chunk * num_stages + (reversed ? num_stages - 1 - stage : stage);
}
inline int VirtualStage(const Action& action, int num_stages, ChunkLayout layout) {
  return VirtualStage(action.stage, action.chunk, num_stages, layout);
}
inline int ChunkOfVirtualStage(int virtual_stage, int num_stages) {
  return virtual_stage / num_stages;
}
inline int StageOfVirtualStage(int virtual_stage, int num_stages, ChunkLayout layout) {
  const int offset = virtual_stage % num_stages;
  const bool reversed =
      layout == ChunkLayout::kV && ChunkOfVirtualStage(virtual_stage, num_stages) % 2 == 1;
  return reversed ? num_stages - 1 - offset : offset;
}

// For a SEND/RECV: the virtual stage at the other end (j+1 for SEND_F and RECV_B, j-1 for RECV_F
// and SEND_B) and the stage holding it. Throws baton::Error for compute actions.
int PeerVirtualStage(const Action& action, int num_stages, ChunkLayout layout);
int PeerStage(const Action& action, int num_stages, ChunkLayout layout);

// Canonical text form; see the file comment.
std::string ToString(const Action& action, int num_stages, ChunkLayout layout);
// Parses one action executed by `stage` of a `num_stages` pipeline. Throws baton::Error
// naming the text when it is malformed or its virtual stage is not held by `stage`.
Action ParseAction(std::string_view text, int stage, int num_stages, ChunkLayout layout);

}  // namespace baton
