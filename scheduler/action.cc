#include "scheduler/action.h"

#include <cctype>
#include <stdexcept>

#include "core/error.h"
#include "scheduler/strings.h"

namespace baton {
namespace {

using scheduler_strings::Trim;

// Reads a non-negative decimal at text[*pos...]; returns -1 when there is none. Throws on overflow.
int ReadNumber(std::string_view text, size_t* pos) {
  const size_t begin = *pos;
  long long value = 0;
  while (*pos < text.size() && std::isdigit(static_cast<unsigned char>(text[*pos]))) {
    value = value * 10 + (text[*pos] - '0');
    if (value > 1'000'000'000) {
      throw Error("number too large in action '" + std::string(text) + "'");
    }
    ++*pos;
  }
  return *pos == begin ? -1 : static_cast<int>(value);
}

}  // namespace

std::string_view KindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendForward:
      return "SEND_F";
    case ActionKind::kRecvForward:
      return "RECV_F";
    case ActionKind::kSendBackward:
      return "SEND_B";
    case ActionKind::kRecvBackward:
      return "RECV_B";
  }
  throw Error("unknown ActionKind " + std::to_string(static_cast<int>(kind)));
}

bool IsCompute(ActionKind kind) { return !IsCommunication(kind); }

bool IsSend(ActionKind kind) {
  return kind == ActionKind::kSendForward || kind == ActionKind::kSendBackward;
}

bool IsRecv(ActionKind kind) {
  return kind == ActionKind::kRecvForward || kind == ActionKind::kRecvBackward;
}

bool IsCommunication(ActionKind kind) { return IsSend(kind) || IsRecv(kind); }

std::string_view LayoutName(ChunkLayout layout) { return layout == ChunkLayout::kV ? "v" : "loop"; }

ChunkLayout ParseLayout(std::string_view name) {
  if (name == "loop") return ChunkLayout::kLoop;
  if (name == "v") return ChunkLayout::kV;
  throw Error("unknown chunk layout '" + std::string(name) + "' (loop or v)");
}

int PeerVirtualStage(const Action& action, int num_stages, ChunkLayout layout) {
  const int virtual_stage = VirtualStage(action, num_stages, layout);
  switch (action.kind) {
    case ActionKind::kSendForward:
    case ActionKind::kRecvBackward:
      return virtual_stage + 1;
    case ActionKind::kRecvForward:
    case ActionKind::kSendBackward:
      return virtual_stage - 1;
    case ActionKind::kForward:
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight:
      break;
  }
  throw Error("PeerVirtualStage: " + ToString(action, num_stages, layout) +
              " is not a communication action");
}

int PeerStage(const Action& action, int num_stages, ChunkLayout layout) {
  return StageOfVirtualStage(PeerVirtualStage(action, num_stages, layout), num_stages, layout);
}

std::string ToString(const Action& action, int num_stages, ChunkLayout layout) {
  std::string text;
  if (action.chunk != 0) text = std::to_string(VirtualStage(action, num_stages, layout));
  text += KindName(action.kind);
  text += std::to_string(action.microbatch);
  return text;
}

Action ParseAction(std::string_view text, int rank, int num_stages, ChunkLayout layout) {
  const std::string_view body = Trim(text);
  auto fail = [&](const std::string& why) {
    return Error("bad action '" + std::string(text) + "' on stage " + std::to_string(rank) + ": " +
                 why);
  };
  if (num_stages < 1 || rank < 0 || rank >= num_stages) throw fail("stage out of range");
  size_t pos = 0;
  const int virtual_stage = ReadNumber(body, &pos);
  const size_t kind_begin = pos;
  while (pos < body.size() && !std::isdigit(static_cast<unsigned char>(body[pos]))) ++pos;
  const std::string_view kind_name = body.substr(kind_begin, pos - kind_begin);
  const int microbatch = ReadNumber(body, &pos);
  if (microbatch < 0 || pos != body.size()) {
    throw fail("expected [VIRTUAL_STAGE]KIND MICROBATCH, e.g. F3 or 5SEND_B2");
  }
  Action action{rank, ActionKind::kForward, microbatch, 0};
  bool known = false;
  for (ActionKind kind : kAllActionKinds) {
    if (KindName(kind) == kind_name) {
      action.kind = kind;
      known = true;
    }
  }
  if (!known) {
    throw fail("unknown kind '" + std::string(kind_name) +
               "' (one of F B I W SEND_F RECV_F SEND_B RECV_B)");
  }
  if (virtual_stage >= 0) {
    const int holder = StageOfVirtualStage(virtual_stage, num_stages, layout);
    if (holder != rank) {
      throw fail("virtual stage " + std::to_string(virtual_stage) + " is held by stage " +
                 std::to_string(holder));
    }
    action.chunk = ChunkOfVirtualStage(virtual_stage, num_stages);
  }
  return action;
}

}  // namespace baton
