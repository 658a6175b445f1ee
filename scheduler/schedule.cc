#include "scheduler/schedule.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "core/files.h"
#include "scheduler/strings.h"

namespace baton {
namespace {

using scheduler_strings::Split;
using scheduler_strings::Trim;

constexpr std::string_view kHeaderPrefix = "# baton schedule:";

int ParseHeaderInt(std::string_view key, std::string_view value, int line_number) {
  int result = 0;
  std::istringstream in{std::string(value)};
  if (!(in >> result) || !in.eof() || result < 1) {
    throw Error("schedule CSV line " + std::to_string(line_number) + ": " + std::string(key) +
                " must be a positive integer, got '" + std::string(value) + "'");
  }
  return result;
}

// Fills name/stages/microbatches/chunks from "# baton schedule: key=value ...".
void ParseHeader(std::string_view line, int line_number, Schedule* schedule) {
  std::istringstream words{std::string(line.substr(kHeaderPrefix.size()))};
  std::string word;
  while (words >> word) {
    const size_t equals = word.find('=');
    const std::string_view key = std::string_view(word).substr(0, equals);
    const std::string_view value =
        equals == std::string::npos ? "" : std::string_view(word).substr(equals + 1);
    if (key == "name") {
      schedule->name = value;
    } else if (key == "stages") {
      schedule->stages = ParseHeaderInt(key, value, line_number);
    } else if (key == "microbatches") {
      schedule->microbatches = ParseHeaderInt(key, value, line_number);
    } else if (key == "chunks") {
      schedule->chunks = ParseHeaderInt(key, value, line_number);
    } else if (key == "layout") {
      try {
        schedule->layout = ParseLayout(value);
      } catch (const Error& error) {
        throw Error("schedule CSV line " + std::to_string(line_number) + ": " + error.what());
      }
    } else {
      throw Error("schedule CSV line " + std::to_string(line_number) + ": unknown header key '" +
                  std::string(key) + "'");
    }
  }
}

// The actions of one CSV cell: one action, the two of torch's "(A;B)OVERLAP_F_B", or none for
// torch's FSDP actions (UNSHARD, RESHARD, REDUCE_GRAD: Baton gathers and reduces by itself, at
// the step's start and end, without schedule actions).
std::vector<std::string_view> CellActions(std::string_view cell) {
  constexpr std::string_view kOverlap = "OVERLAP_F_B";
  if (!cell.starts_with('(')) {
    for (const std::string_view fsdp : {"UNSHARD", "RESHARD", "REDUCE_GRAD"}) {
      if (cell.find(fsdp) != std::string_view::npos) return {};
    }
    return {cell};
  }
  const size_t close = cell.find(')');
  if (close == std::string_view::npos || Trim(cell.substr(close + 1)) != kOverlap) {
    throw Error("bad cell '" + std::string(cell) +
                "': a parenthesised cell is torch's overlapped pair, (A;B)OVERLAP_F_B");
  }
  std::vector<std::string_view> actions;
  for (const std::string_view part : Split(cell.substr(1, close - 1), ';')) {
    if (!Trim(part).empty()) actions.push_back(Trim(part));
  }
  if (actions.size() != 2) {
    throw Error("bad cell '" + std::string(cell) + "': an OVERLAP_F_B pair holds two actions");
  }
  return actions;
}

// The layout under which every row's actions name virtual stages that row holds: loop when it
// fits, else V; loop when neither does (parsing then says which action is out of place).
ChunkLayout InferLayout(const std::vector<std::vector<std::string_view>>& cells) {
  const int stages = static_cast<int>(cells.size());
  for (const ChunkLayout layout : {ChunkLayout::kLoop, ChunkLayout::kV}) {
    bool fits = true;
    for (int rank = 0; fits && rank < stages; ++rank) {
      for (const std::string_view text : cells[static_cast<size_t>(rank)]) {
        try {
          ParseAction(text, rank, stages, layout);
        } catch (const Error&) {
          fits = false;
          break;
        }
      }
    }
    if (fits) return layout;
  }
  return ChunkLayout::kLoop;
}

}  // namespace

bool HasCommunication(const Schedule& schedule) {
  for (const auto& actions : schedule.per_stage) {
    for (const Action& action : actions) {
      if (IsCommunication(action.kind)) return true;
    }
  }
  return false;
}

std::string ScheduleToCsv(const Schedule& schedule) {
  if (schedule.name.empty() || std::any_of(schedule.name.begin(), schedule.name.end(), [](char c) {
        return std::isspace(static_cast<unsigned char>(c)) || c == '=';
      })) {
    throw Error("schedule name '" + schedule.name +
                "' must be non-empty without spaces or '=' to be saved as CSV");
  }
  std::string csv = std::string(kHeaderPrefix) + " name=" + schedule.name +
                    " stages=" + std::to_string(schedule.stages) +
                    " microbatches=" + std::to_string(schedule.microbatches) +
                    " chunks=" + std::to_string(schedule.chunks) +
                    (schedule.layout == ChunkLayout::kV ? " layout=v" : "") + "\n";
  for (const auto& actions : schedule.per_stage) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (i > 0) csv += ',';
      csv += ToString(actions[i], schedule.stages, schedule.layout);
    }
    csv += '\n';
  }
  return csv;
}

std::string ScheduleToTorchCsv(const Schedule& schedule) {
  const auto text = [&](const Action& action) {
    return std::to_string(schedule.VirtualStageOf(action)) + std::string(KindName(action.kind)) +
           std::to_string(action.microbatch);
  };
  // DualPipeV's steady state pairs the F of one chunk with the full B of the other (DeepSeek
  // overlaps the two); torch writes such a pair as one cell. All but the last stage's first pair:
  // DeepSeek runs that one apart, to shorten the bubble.
  const bool pairs = schedule.name == "dualpipev" && schedule.layout == ChunkLayout::kV;
  std::string csv;
  for (int stage = 0; stage < schedule.stages; ++stage) {
    const std::vector<Action>& actions = schedule.per_stage[static_cast<size_t>(stage)];
    bool apart = stage == schedule.stages - 1;  // the last stage's first pair
    for (size_t i = 0; i < actions.size(); ++i) {
      if (i > 0) csv += ',';
      const Action& action = actions[i];
      const bool pair = pairs && action.kind == ActionKind::kForward && i + 1 < actions.size() &&
                        actions[i + 1].kind == ActionKind::kBackward &&
                        actions[i + 1].chunk != action.chunk;
      if (pair && apart) {
        apart = false;
        csv += text(action);
      } else if (pair) {
        csv += "(" + text(action) + ";" + text(actions[i + 1]) + ")OVERLAP_F_B";
        ++i;
      } else {
        csv += text(action);
      }
    }
    csv += '\n';
  }
  return csv;
}

Schedule ScheduleFromCsv(std::string_view text) {
  Schedule schedule;
  bool has_header = false;
  std::vector<std::pair<int, std::string_view>> rows;  // (line number, text)
  int line_number = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_number;
    line = Trim(line);
    if (line.starts_with(kHeaderPrefix)) {
      ParseHeader(line, line_number, &schedule);
      has_header = true;
    } else if (!line.empty() && line.front() != '#') {
      rows.emplace_back(line_number, line);
    }
  }
  const int num_rows = static_cast<int>(rows.size());
  if (!has_header) schedule.stages = num_rows;
  if (schedule.stages != num_rows || num_rows == 0) {
    throw Error("schedule CSV has " + std::to_string(num_rows) +
                " stage rows but stages=" + std::to_string(schedule.stages));
  }
  // Each row's action texts, overlapped pairs split.
  std::vector<std::vector<std::string_view>> cells(static_cast<size_t>(num_rows));
  for (int rank = 0; rank < num_rows; ++rank) {
    for (std::string_view cell : Split(rows[rank].second, ',')) {
      cell = Trim(cell);
      if (cell.empty()) continue;  // an idle step in torch's form
      try {
        for (const std::string_view text : CellActions(cell)) {
          cells[static_cast<size_t>(rank)].push_back(text);
        }
      } catch (const Error& error) {
        throw Error("schedule CSV line " + std::to_string(rows[rank].first) + ": " + error.what());
      }
    }
  }
  if (!has_header) schedule.layout = InferLayout(cells);
  int max_chunk = 0;
  int max_microbatch = 0;
  for (int rank = 0; rank < num_rows; ++rank) {
    auto& actions = schedule.per_stage.emplace_back();
    for (const std::string_view text : cells[static_cast<size_t>(rank)]) {
      try {
        actions.push_back(ParseAction(text, rank, schedule.stages, schedule.layout));
      } catch (const Error& error) {
        throw Error("schedule CSV line " + std::to_string(rows[rank].first) + ": " + error.what());
      }
      max_chunk = std::max(max_chunk, actions.back().chunk);
      max_microbatch = std::max(max_microbatch, actions.back().microbatch);
    }
  }
  if (!has_header) {
    schedule.name = "custom";
    schedule.chunks = max_chunk + 1;
    schedule.microbatches = max_microbatch + 1;
  }
  return schedule;
}

void SaveScheduleCsv(const Schedule& schedule, const std::string& path) {
  try {
    WriteFileAtomically(path, ScheduleToCsv(schedule));  // never through a planted link
  } catch (const Error& e) {
    throw Error("cannot write schedule CSV '" + path + "': " + e.what());
  }
}

Schedule LoadScheduleCsv(const std::string& path) {
  std::string text;
  try {
    text = ReadFileToString(path);  // a regular file only: never blocks on a FIFO or /dev/zero
  } catch (const Error& e) {
    throw Error("cannot read schedule CSV '" + path + "': " + e.what());
  }
  return ScheduleFromCsv(text);
}

}  // namespace baton
