// Per-action costs the simulator charges, in arbitrary time units, and their text form.
//
// Compute actions occupy their stage for their cost. Communication is a latency: a message posted
// at time t is usable by its receiver at t + communication. Posting a SEND or a RECV occupies its
// stage for `post` (0 by default: the runtime posts async sends/receives; a measured run's post is
// the engine's own time per message, e.g. the copy into a loopback socket). Costs are per action,
// so an interleaved chunk action is charged the full F/B: divide by v to compare schedules at equal
// work (the bubble fraction is unchanged by scaling every cost).
//
// Text form: comma-separated KEY[@VIRTUAL_STAGE]=VALUE, keys F B I W COMM POST, e.g.
// "F=1,B=2,F@3=1.5" (virtual stage 3's forwards cost 1.5; other stages use F=1). Values are finite
// and >= 0.
#pragma once

#include <map>
#include <string_view>
#include <tuple>

#include "scheduler/action.h"

namespace baton {

struct ActionCosts {
  double forward = 1;          // F
  double backward = 2;         // B
  double backward_input = 1;   // I
  double backward_weight = 1;  // W
  double communication = 0;    // latency of one SEND -> RECV message, charged to the sender's stage
  double post = 0;             // stage time one SEND or RECV occupies

  // The stage time an action of this kind occupies (`post` for SEND/RECV).
  double Of(ActionKind kind) const;
  friend bool operator==(const ActionCosts&, const ActionCosts&) = default;
};

struct Costs {
  ActionCosts defaults;
  std::map<int, ActionCosts> per_virtual_stage;  // complete replacement for one virtual stage
  // Single compute actions' own costs, by (virtual stage, kind, micro-batch), over the above:
  // replaying a measured step action by action (bench/trace_costs.h). Not in the text form.
  std::map<std::tuple<int, ActionKind, int>, double> per_action;

  const ActionCosts& For(int virtual_stage) const;
  // The stage time `action` of virtual stage `virtual_stage` occupies: its per_action entry, else
  // its kind's cost there.
  double Of(int virtual_stage, const Action& action) const;
  friend bool operator==(const Costs&, const Costs&) = default;
};

// Parses the text form; an empty string gives the defaults. Throws baton::Error naming the
// offending entry on an unknown key, a duplicate, a malformed or negative number.
Costs ParseCosts(std::string_view text);

}  // namespace baton
