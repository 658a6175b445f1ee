// torch.distributed.pipelining's schedules, as torch 2.15.0 generated them
// (tests/fixtures/torch_schedules, written by tests/fixtures/make_torch_schedules_fixture.py with
// torch's own generator code), against Baton's generators: read in torch's CSV form, each is the
// program Baton generates under the same name, action by action, and Baton writes it back in
// torch's form byte for byte. Also: every Baton schedule round-trips through torch's form, and
// the parts of that form Baton reads differently (idle cells, FSDP actions, overlapped pairs).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "scheduler/generators.h"
#include "scheduler/schedule.h"
#include "scheduler/schedule_kinds.h"

namespace baton {
namespace {

std::string FixtureDir() {
  return std::string(BATON_SOURCE_DIR) + "/tests/fixtures/torch_schedules";
}

struct TorchCase {
  std::string file;
  std::string schedule;
  int stages, microbatches, chunks;
};

std::vector<TorchCase> TorchCases() {
  const nlohmann::json cases =
      nlohmann::json::parse(ReadFileToString(FixtureDir() + "/cases.json"));
  std::vector<TorchCase> out;
  for (const nlohmann::json& c : cases.at("cases")) {
    out.push_back(
        {c.at("file"), c.at("schedule"), c.at("stages"), c.at("microbatches"), c.at("chunks")});
  }
  return out;
}

// `schedule` with each chunk's backwards in reverse micro-batch order (torch's looped BFS runs
// the last micro-batch's backward first; Baton's, the first's).
Schedule BackwardsReversed(Schedule schedule) {
  for (auto& actions : schedule.per_stage) {
    auto begin = actions.begin();
    while (begin != actions.end()) {
      if (begin->kind != ActionKind::kBackward) {
        ++begin;
        continue;
      }
      auto end = std::find_if(begin, actions.end(), [&](const Action& a) {
        return a.kind != ActionKind::kBackward || a.chunk != begin->chunk;
      });
      std::reverse(begin, end);
      begin = end;
    }
  }
  return schedule;
}

TEST(TorchSchedulesTest, TorchsSchedulesAreBatonsUnderTheSameName) {
  const std::vector<TorchCase> cases = TorchCases();
  ASSERT_GE(cases.size(), 15u);
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.file);
    const Schedule torch = LoadScheduleCsv(FixtureDir() + "/" + c.file);
    Schedule baton = MakeSchedule(c.schedule, c.stages, c.microbatches, c.chunks);
    EXPECT_EQ(torch.name, "custom");
    EXPECT_EQ(torch.stages, c.stages);
    EXPECT_EQ(torch.microbatches, c.microbatches);
    EXPECT_EQ(torch.chunks, c.chunks);
    EXPECT_EQ(torch.layout, baton.layout);
    if (c.schedule == "looped-bfs") {
      // The one difference: the order of a chunk's backwards (the same memory and bubble).
      EXPECT_NE(torch.per_stage, baton.per_stage);
      baton = BackwardsReversed(baton);
    }
    for (int s = 0; s < c.stages; ++s) {
      EXPECT_EQ(torch.per_stage[s], baton.per_stage[s]) << "stage " << s;
    }
    // Written in torch's form, Baton's program is torch's file, overlapped pairs and all.
    if (c.schedule != "looped-bfs") {
      EXPECT_EQ(ScheduleToTorchCsv(baton), ReadFileToString(FixtureDir() + "/" + c.file));
    }
  }
}

TEST(TorchSchedulesTest, EveryBatonScheduleRoundTripsThroughTorchsForm) {
  for (const std::string& name : ScheduleNames()) {
    const bool many = FindScheduleKind(name)->chunks == ChunkRule::kMany;
    for (const auto& [p, m] : std::vector<std::pair<int, int>>{{1, 1}, {2, 4}, {3, 5}, {4, 9}}) {
      for (int v : many ? std::vector<int>{2, 3} : std::vector<int>{ChunksFor(name, 1)}) {
        SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                     " v=" + std::to_string(v));
        const Schedule schedule = MakeSchedule(name, p, m, v);
        const Schedule back = ScheduleFromCsv(ScheduleToTorchCsv(schedule));
        EXPECT_EQ(back.per_stage, schedule.per_stage);
        // One stage holds every chunk either way: the layout reads as loop.
        if (p > 1) {
          EXPECT_EQ(back.layout, schedule.layout);
        }
        EXPECT_EQ(back.stages, p);
        EXPECT_EQ(back.microbatches, m);
        // Chunks are counted from the actions: a V schedule on one stage uses both.
        EXPECT_EQ(back.chunks, schedule.chunks);
      }
    }
  }
}

TEST(TorchSchedulesTest, IdleCellsFsdpActionsAndOverlappedPairsRead) {
  // torch's IR as its runtime holds it: empty cells for idle steps, FSDP actions beside the
  // compute ones (skipped: Baton gathers and reduces by itself), an overlapped pair. Baton reads
  // the compute actions in order.
  const Schedule read = ScheduleFromCsv(
      "0UNSHARD,0F0,,0F1,(0F2;0B0)OVERLAP_F_B,0B1,0B2,0REDUCE_GRAD,0RESHARD\n"
      ",1F0,1B0,1F1,1B1,1F2,1B2\n");
  const Schedule expected = ScheduleFromCsv("F0,F1,F2,B0,B1,B2\nF0,B0,F1,B1,F2,B2\n");
  EXPECT_EQ(read, expected);
  // A V layout is recognised from the virtual stages each rank names.
  EXPECT_EQ(ScheduleFromCsv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n").layout, ChunkLayout::kV);
  EXPECT_EQ(ScheduleFromCsv("0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n").layout, ChunkLayout::kLoop);
  // What cannot be read says where and why.
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"(0F0;0B0)\n", "(A;B)OVERLAP_F_B"},
           {"(0F0)OVERLAP_F_B\n", "holds two actions"},
           {"0F0,0X0\n", "unknown kind 'X'"},
           {"0F0\n0F0\n", "virtual stage 0 is held by stage 0"}}) {
    try {
      ScheduleFromCsv(text);
      ADD_FAILURE() << text << ": no error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(why), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find("schedule CSV line"), std::string::npos)
          << error.what();
    }
  }
}

}  // namespace
}  // namespace baton
