#include "scheduler/costs.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "scheduler/strings.h"

namespace baton {
namespace {

using scheduler_strings::Split;
using scheduler_strings::Trim;

double* Field(ActionCosts& costs, std::string_view key) {
  if (key == "F") return &costs.forward;
  if (key == "B") return &costs.backward;
  if (key == "I") return &costs.backward_input;
  if (key == "W") return &costs.backward_weight;
  if (key == "COMM") return &costs.communication;
  if (key == "POST") return &costs.post;
  return nullptr;
}

struct Entry {
  std::string key;
  std::optional<int> virtual_stage;
  double value;
};

Entry ParseEntry(std::string_view entry) {
  auto fail = [&](const std::string& why) {
    return Error("bad cost '" + std::string(entry) + "': " + why +
                 " (expected KEY[@STAGE]=VALUE with KEY one of F B I W COMM POST)");
  };
  const size_t equals = entry.find('=');
  if (equals == std::string_view::npos) throw fail("missing '='");
  std::string_view key = Trim(entry.substr(0, equals));
  const std::string_view value = Trim(entry.substr(equals + 1));
  Entry parsed{"", std::nullopt, 0};
  if (const size_t at = key.find('@'); at != std::string_view::npos) {
    const std::string_view stage = key.substr(at + 1);
    int virtual_stage = -1;
    const auto [end, error] =
        std::from_chars(stage.data(), stage.data() + stage.size(), virtual_stage);
    if (error != std::errc() || end != stage.data() + stage.size() || virtual_stage < 0) {
      throw fail("stage must be a non-negative integer");
    }
    parsed.virtual_stage = virtual_stage;
    key = key.substr(0, at);
  }
  ActionCosts probe;
  if (Field(probe, key) == nullptr) throw fail("unknown key '" + std::string(key) + "'");
  parsed.key = key;
  const auto [end, error] =
      std::from_chars(value.data(), value.data() + value.size(), parsed.value);
  if (value.empty() || error != std::errc() || end != value.data() + value.size()) {
    throw fail("value is not a number");
  }
  if (!std::isfinite(parsed.value) || parsed.value < 0) throw fail("value must be >= 0");
  return parsed;
}

}  // namespace

double ActionCosts::Of(ActionKind kind) const {
  switch (kind) {
    case ActionKind::kForward:
      return forward;
    case ActionKind::kBackward:
      return backward;
    case ActionKind::kBackwardInput:
      return backward_input;
    case ActionKind::kBackwardWeight:
      return backward_weight;
    case ActionKind::kSendForward:
    case ActionKind::kRecvForward:
    case ActionKind::kSendBackward:
    case ActionKind::kRecvBackward:
      return post;
  }
  throw Error("unknown ActionKind " + std::to_string(static_cast<int>(kind)));
}

const ActionCosts& Costs::For(int virtual_stage) const {
  const auto it = per_virtual_stage.find(virtual_stage);
  return it == per_virtual_stage.end() ? defaults : it->second;
}

double Costs::Of(int virtual_stage, const Action& action) const {
  const auto it = per_action.find({virtual_stage, action.kind, action.microbatch});
  return it == per_action.end() ? For(virtual_stage).Of(action.kind) : it->second;
}

Costs ParseCosts(std::string_view text) {
  std::vector<Entry> entries;
  std::set<std::pair<std::string, int>> seen;
  for (std::string_view part :
       Trim(text).empty() ? std::vector<std::string_view>{} : Split(text, ',')) {
    const Entry& entry = entries.emplace_back(ParseEntry(part));
    if (!seen.emplace(entry.key, entry.virtual_stage.value_or(-1)).second) {
      throw Error("bad cost '" + std::string(Trim(part)) + "': " + entry.key +
                  (entry.virtual_stage ? " of that stage" : "") + " is given twice");
    }
  }
  // Defaults first, so "F@2=3,B=4" gives virtual stage 2 the B of 4.
  Costs costs;
  for (const Entry& entry : entries) {
    if (!entry.virtual_stage) *Field(costs.defaults, entry.key) = entry.value;
  }
  for (const Entry& entry : entries) {
    if (!entry.virtual_stage) continue;
    auto [it, inserted] = costs.per_virtual_stage.try_emplace(*entry.virtual_stage, costs.defaults);
    *Field(it->second, entry.key) = entry.value;
  }
  return costs;
}

}  // namespace baton
