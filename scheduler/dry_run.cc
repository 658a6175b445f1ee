#include "scheduler/dry_run.h"

#include <algorithm>
#include <deque>
#include <utility>

namespace baton {
namespace {

enum class Status { kDone, kBlocked, kError };

// A message in flight on a link; identified by what sent it.
struct Message {
  ActionKind kind;  // kSendForward (an activation) or kSendBackward (an input gradient)
  int microbatch;
  int from_virtual_stage;
  double sent_at;
  int sender_rank;
  int sender_step;
};

// A receive posted on a link, waiting for its message.
struct PostedRecv {
  Action recv;
  double posted_at;
  int rank;
  int step;
};

class Engine {
 public:
  Engine(const Schedule& schedule, CommSemantics semantics, const Costs& costs);
  DryRunResult Run();

 private:
  int Size(int rank) const { return static_cast<int>(schedule_.per_stage[rank].size()); }
  bool AtEnd(int rank) const { return pc_[rank] >= Size(rank); }
  const Action& Current(int rank) const { return schedule_.per_stage[rank][pc_[rank]]; }
  int Index(int virtual_stage, int microbatch) const { return virtual_stage * m_ + microbatch; }
  std::string Name(const Action& action) const { return ToString(action, p_, layout_); }
  std::string Where(int virtual_stage, int microbatch) const {
    return "micro-batch " + std::to_string(microbatch) + " on virtual stage " +
           std::to_string(virtual_stage);
  }

  Status Step(int rank);
  Status Compute(int rank, const Action& action);
  Status NeedInput(int rank, const Action& action, int producer_stage, bool activation,
                   double* ready);
  Status CheckSend(int rank, const Action& action);
  Status CheckRecv(int rank, const Action& action);
  Status Send(int rank, const Action& action);
  Status Recv(int rank, const Action& action);
  Message Post(int rank, const Action& send, double sent_at);
  Status Match(int link);
  Status Deliver(const PostedRecv& posted, const Message& message);
  int Link(int from, int to) const { return from * p_ + to; }
  Status FailAt(int rank, int step, std::string reason);
  Status Fail(int rank, std::string reason) { return FailAt(rank, pc_[rank], std::move(reason)); }
  void Record(int rank, double start, double end);
  std::string WaitReason(int rank, bool* hopeless) const;
  DryRunResult Deadlock();

  const Schedule& schedule_;
  const CommSemantics semantics_;
  const Costs& costs_;
  const int p_;
  const ChunkLayout layout_;
  const int m_;
  const int num_virtual_stages_;
  const bool explicit_comm_;
  std::vector<int> pc_;
  std::vector<double> clock_;
  // Per (virtual stage, micro-batch) of the producer: when it finished, -1 until it ran.
  std::vector<double> forward_end_, gradient_end_, weight_end_;  // F; B or I; B or W
  std::vector<char> activation_sent_, gradient_sent_;
  std::vector<char> activation_posted_, gradient_posted_;  // per consumer: its RECV is posted
  // Per (virtual stage, micro-batch) of the consumer: when its message is usable, -1 until
  // received.
  std::vector<double> activation_arrival_, gradient_arrival_;
  // Per link [Link(from, to)]: messages sent and not yet matched, receives posted and not yet
  // matched. The n-th message of a link meets its n-th receive.
  std::vector<std::deque<Message>> messages_;
  std::vector<std::deque<PostedRecv>> posted_;
  DryRunResult result_;
};

Engine::Engine(const Schedule& schedule, CommSemantics semantics, const Costs& costs)
    : schedule_(schedule),
      semantics_(semantics),
      costs_(costs),
      p_(schedule.stages),
      layout_(schedule.layout),
      m_(schedule.microbatches),
      num_virtual_stages_(schedule.num_virtual_stages()),
      explicit_comm_(HasCommunication(schedule)),
      pc_(p_, 0),
      clock_(p_, 0.0),
      messages_(static_cast<size_t>(p_) * p_),
      posted_(static_cast<size_t>(p_) * p_) {
  const size_t cells = static_cast<size_t>(num_virtual_stages_) * m_;
  for (auto* times :
       {&forward_end_, &gradient_end_, &weight_end_, &activation_arrival_, &gradient_arrival_}) {
    times->assign(cells, -1.0);
  }
  for (auto* flags : {&activation_sent_, &gradient_sent_, &activation_posted_, &gradient_posted_}) {
    flags->assign(cells, 0);
  }
  for (int rank = 0; rank < p_; ++rank) {
    result_.start.emplace_back(Size(rank), 0.0);
    result_.end.emplace_back(Size(rank), 0.0);
  }
}

DryRunResult Engine::Run() {
  while (true) {
    bool progress = false;
    for (int rank = 0; rank < p_; ++rank) {
      while (!AtEnd(rank)) {
        const Status status = Step(rank);
        if (status == Status::kError) return result_;
        if (status == Status::kBlocked) break;
        ++pc_[rank];
        progress = true;
      }
    }
    bool finished = true;
    for (int rank = 0; rank < p_; ++rank) finished = finished && AtEnd(rank);
    if (finished) break;
    if (!progress) return Deadlock();
  }
  for (const auto& link : messages_) {
    if (link.empty()) continue;
    const Message& message = link.front();
    FailAt(message.sender_rank, message.sender_step,
           "message is never received: stage " + std::to_string(message.sender_rank) +
               " sends it, but no RECV on stage " +
               std::to_string(StageOfVirtualStage(
                   message.from_virtual_stage + (message.kind == ActionKind::kSendForward ? 1 : -1),
                   p_, layout_)) +
               " takes it");
    return result_;
  }
  for (const auto& link : posted_) {
    if (link.empty()) continue;
    const PostedRecv& posted = link.front();
    FailAt(posted.rank, posted.step,
           "receive is never matched: stage " +
               std::to_string(PeerStage(posted.recv, p_, layout_)) + " sends no message for it");
    return result_;
  }
  return result_;
}

Status Engine::Step(int rank) {
  const Action& action = Current(rank);
  switch (action.kind) {
    case ActionKind::kForward:
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight:
      return Compute(rank, action);
    case ActionKind::kSendForward:
    case ActionKind::kSendBackward:
      return Send(rank, action);
    case ActionKind::kRecvForward:
    case ActionKind::kRecvBackward:
      return Recv(rank, action);
  }
  return Fail(rank, "unknown action kind " + std::to_string(static_cast<int>(action.kind)));
}

Status Engine::Compute(int rank, const Action& action) {
  const int stage = VirtualStage(action, p_, layout_);
  const int index = Index(stage, action.microbatch);
  const std::string where = Where(stage, action.microbatch);
  double ready = clock_[rank];
  Status status = Status::kDone;
  switch (action.kind) {
    case ActionKind::kForward:
      if (forward_end_[index] >= 0) return Fail(rank, "F of " + where + " runs twice");
      if (stage > 0) status = NeedInput(rank, action, stage - 1, true, &ready);
      break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      if (forward_end_[index] < 0) return Fail(rank, "backward of " + where + " runs before its F");
      if (gradient_end_[index] >= 0) return Fail(rank, "backward of " + where + " runs twice");
      if (stage + 1 < num_virtual_stages_)
        status = NeedInput(rank, action, stage + 1, false, &ready);
      break;
    case ActionKind::kBackwardWeight:
      if (gradient_end_[index] < 0) return Fail(rank, "W of " + where + " runs before its I");
      if (weight_end_[index] >= 0) return Fail(rank, "weight gradient of " + where + " runs twice");
      break;
    case ActionKind::kSendForward:
    case ActionKind::kRecvForward:
    case ActionKind::kSendBackward:
    case ActionKind::kRecvBackward:
      return Fail(rank, "internal: " + Name(action) + " is not a compute action");
  }
  if (status != Status::kDone) return status;
  const double end = ready + costs_.Of(stage, action);
  Record(rank, ready, end);
  clock_[rank] = end;
  if (action.kind == ActionKind::kForward) forward_end_[index] = end;
  if (action.kind != ActionKind::kForward && action.kind != ActionKind::kBackwardWeight) {
    gradient_end_[index] = end;
  }
  if (action.kind == ActionKind::kBackward || action.kind == ActionKind::kBackwardWeight) {
    weight_end_[index] = end;
  }
  return Status::kDone;
}

Status Engine::NeedInput(int rank, const Action& action, int producer_stage, bool activation,
                         double* ready) {
  const int producer_rank = StageOfVirtualStage(producer_stage, p_, layout_);
  const int mb = action.microbatch;
  const double produced = (activation ? forward_end_ : gradient_end_)[Index(producer_stage, mb)];
  const std::string what = std::string(activation ? "the activation of F" : "the gradient of B/I") +
                           " of " + Where(producer_stage, mb);
  if (producer_rank == rank) {
    if (produced < 0) return Fail(rank, Name(action) + " needs " + what + ", not run before it");
    *ready = std::max(*ready, produced);
  } else if (explicit_comm_) {
    const int consumer = VirtualStage(action, p_, layout_);
    const double arrival =
        (activation ? activation_arrival_ : gradient_arrival_)[Index(consumer, mb)];
    if (arrival < 0) {
      const bool posted =
          (activation ? activation_posted_ : gradient_posted_)[Index(consumer, mb)] != 0;
      if (posted) return Status::kBlocked;  // its RECV is posted: wait for the message
      return Fail(rank, Name(action) + " needs " + what + " from stage " +
                            std::to_string(producer_rank) + ", but no " +
                            (activation ? "RECV_F" : "RECV_B") + " for it precedes it");
    }
    *ready = std::max(*ready, arrival);
  } else {
    if (produced < 0) return Status::kBlocked;  // compute-only: wait for the producer's stage
    *ready = std::max(*ready, produced + costs_.For(producer_stage).communication);
  }
  return Status::kDone;
}

Status Engine::CheckSend(int rank, const Action& action) {
  const int stage = VirtualStage(action, p_, layout_);
  const int peer_stage = PeerVirtualStage(action, p_, layout_);
  const bool forward = action.kind == ActionKind::kSendForward;
  const int index = Index(stage, action.microbatch);
  if (peer_stage < 0 || peer_stage >= num_virtual_stages_) {
    return Fail(rank, Name(action) + " has no receiver: virtual stage " + std::to_string(stage) +
                          (forward ? " is the last" : " is the first"));
  }
  if (StageOfVirtualStage(peer_stage, p_, layout_) == rank) {
    return Fail(rank, Name(action) + " sends to its own stage: virtual stages " +
                          std::to_string(stage) + " and " + std::to_string(peer_stage) +
                          " share it, no message is needed");
  }
  if ((forward ? forward_end_ : gradient_end_)[index] < 0) {
    return Fail(rank, Name(action) + " sends before " + (forward ? "its F" : "its B/I") + " ran");
  }
  if ((forward ? activation_sent_ : gradient_sent_)[index]) {
    return Fail(rank, Name(action) + " is sent twice");
  }
  return Status::kDone;
}

Status Engine::CheckRecv(int rank, const Action& action) {
  const int stage = VirtualStage(action, p_, layout_);
  const int peer_stage = PeerVirtualStage(action, p_, layout_);
  const bool forward = action.kind == ActionKind::kRecvForward;
  if (peer_stage < 0 || peer_stage >= num_virtual_stages_) {
    return Fail(rank, Name(action) + " has no sender: virtual stage " + std::to_string(stage) +
                          (forward ? " is the first" : " is the last"));
  }
  if (StageOfVirtualStage(peer_stage, p_, layout_) == rank) {
    return Fail(rank, Name(action) + " receives from its own stage: virtual stages " +
                          std::to_string(stage) + " and " + std::to_string(peer_stage) +
                          " share it, no message is needed");
  }
  if ((forward ? activation_posted_ : gradient_posted_)[Index(stage, action.microbatch)]) {
    return Fail(rank, Name(action) + " is received twice");
  }
  return Status::kDone;
}

Message Engine::Post(int rank, const Action& send, double sent_at) {
  const int stage = VirtualStage(send, p_, layout_);
  auto& sent = send.kind == ActionKind::kSendForward ? activation_sent_ : gradient_sent_;
  sent[Index(stage, send.microbatch)] = 1;
  return Message{send.kind, send.microbatch, stage, sent_at, rank, pc_[rank]};
}

// Matches the link's sent messages with its posted receives, oldest first.
Status Engine::Match(int link) {
  while (!messages_[link].empty() && !posted_[link].empty()) {
    const Message message = messages_[link].front();
    const PostedRecv posted = posted_[link].front();
    messages_[link].pop_front();
    posted_[link].pop_front();
    if (Status status = Deliver(posted, message); status != Status::kDone) return status;
  }
  return Status::kDone;
}

Status Engine::Deliver(const PostedRecv& posted, const Message& message) {
  const Action& recv = posted.recv;
  const ActionKind expected_kind =
      recv.kind == ActionKind::kRecvForward ? ActionKind::kSendForward : ActionKind::kSendBackward;
  const int expected_from = PeerVirtualStage(recv, p_, layout_);
  if (message.kind != expected_kind || message.microbatch != recv.microbatch ||
      message.from_virtual_stage != expected_from) {
    const Action sent{message.sender_rank, message.kind, message.microbatch,
                      ChunkOfVirtualStage(message.from_virtual_stage, p_)};
    return FailAt(posted.rank, posted.step,
                  "link order mismatch on link " + std::to_string(message.sender_rank) + "->" +
                      std::to_string(posted.rank) + ": " + Name(recv) +
                      " takes the next message, which is " + Name(sent) + " (stage " +
                      std::to_string(message.sender_rank) + " step " +
                      std::to_string(message.sender_step) + ")");
  }
  const int stage = VirtualStage(recv, p_, layout_);
  auto& arrival = recv.kind == ActionKind::kRecvForward ? activation_arrival_ : gradient_arrival_;
  arrival[Index(stage, recv.microbatch)] =
      message.sent_at + costs_.For(message.from_virtual_stage).communication;
  return Status::kDone;
}

// A SEND posts its message; under kRendezvous it first waits until the receiver has posted the
// matching RECV (the receive posted on the link ahead of every other), and completes then.
Status Engine::Send(int rank, const Action& action) {
  if (Status status = CheckSend(rank, action); status != Status::kDone) return status;
  const int link = Link(rank, PeerStage(action, p_, layout_));
  double sent_at = clock_[rank];
  if (semantics_ == CommSemantics::kRendezvous) {  // messages never queue: each meets its RECV
    if (posted_[link].empty()) return Status::kBlocked;
    sent_at = std::max(sent_at, posted_[link].front().posted_at);
  }
  // Posting holds the stage; the message leaves as the post begins (`communication` is measured
  // from the producer's end, so it covers the post).
  clock_[rank] = sent_at + costs_.Of(VirtualStage(action, p_, layout_), action);
  messages_[link].push_back(Post(rank, action, sent_at));
  Record(rank, sent_at, clock_[rank]);
  return Match(link);
}

// A RECV posts its receive (its `post` cost) and never blocks: the compute that consumes the data
// waits for it.
Status Engine::Recv(int rank, const Action& action) {
  if (Status status = CheckRecv(rank, action); status != Status::kDone) return status;
  const int stage = VirtualStage(action, p_, layout_);
  auto& posted = action.kind == ActionKind::kRecvForward ? activation_posted_ : gradient_posted_;
  posted[Index(stage, action.microbatch)] = 1;
  const int link = Link(PeerStage(action, p_, layout_), rank);
  const double start = clock_[rank];
  clock_[rank] = start + costs_.Of(stage, action);  // posting holds the stage
  posted_[link].push_back({action, start, rank, pc_[rank]});
  Record(rank, start, clock_[rank]);
  return Match(link);
}

Status Engine::FailAt(int rank, int step, std::string reason) {
  result_.ok = false;
  result_.stage = rank;
  result_.step = step;
  result_.reason = std::move(reason);
  return Status::kError;
}

void Engine::Record(int rank, double start, double end) {
  result_.start[rank][pc_[rank]] = start;
  result_.end[rank][pc_[rank]] = end;
}

std::string Engine::WaitReason(int rank, bool* hopeless) const {
  const Action& action = Current(rank);
  std::string reason = "stage " + std::to_string(rank) + " step " + std::to_string(pc_[rank]) +
                       " (" + Name(action) + ") waits for ";
  int peer = 0;
  if (IsCompute(action.kind)) {  // a remote producer: its message, or (compute-only) its action
    const int stage = VirtualStage(action, p_, layout_);
    const int producer = stage + (action.kind == ActionKind::kForward ? -1 : 1);
    peer = StageOfVirtualStage(producer, p_, layout_);
    reason += std::string(action.kind == ActionKind::kForward ? "F" : "B/I") + " of " +
              Where(producer, action.microbatch) + " on stage " + std::to_string(peer) +
              (explicit_comm_ ? " to be sent" : "");
  } else {  // a SEND under kRendezvous
    peer = PeerStage(action, p_, layout_);
    reason += "stage " + std::to_string(peer) + " to post the matching RECV";
  }
  *hopeless = AtEnd(peer);
  if (*hopeless) reason += ", but stage " + std::to_string(peer) + " has finished";
  return reason;
}

DryRunResult Engine::Deadlock() {
  std::string reasons;
  int marked = -1;
  bool marked_hopeless = false;
  for (int rank = 0; rank < p_; ++rank) {
    if (AtEnd(rank)) continue;
    bool hopeless = false;
    reasons += "\n  " + WaitReason(rank, &hopeless);
    if (marked < 0 || (hopeless && !marked_hopeless)) {
      marked = rank;
      marked_hopeless = hopeless;
    }
  }
  FailAt(marked, pc_[marked], "deadlock, no stage can proceed:" + reasons);
  return result_;
}

}  // namespace

DryRunResult DryRun(const Schedule& schedule, CommSemantics semantics, const Costs& costs) {
  return Engine(schedule, semantics, costs).Run();
}

}  // namespace baton
