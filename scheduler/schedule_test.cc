#include "scheduler/schedule.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>

#include "core/error.h"
#include "scheduler/communication.h"
#include "scheduler/generators.h"

namespace baton {
namespace {

std::string ErrorOf(const std::string& csv) {
  try {
    ScheduleFromCsv(csv);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(ScheduleCsvTest, EveryGeneratedScheduleRoundTrips) {
  for (const Schedule& schedule :
       {OneFOneB(4, 6), GPipe(1, 3), ZeroBubbleH1(3, 5), Interleaved1F1B(2, 5, 3)}) {
    for (const Schedule& each : {schedule, InsertCommunication(schedule)}) {
      EXPECT_EQ(ScheduleFromCsv(ScheduleToCsv(each)), each) << ScheduleToCsv(each);
    }
  }
}

TEST(ScheduleCsvTest, WritesAHeaderAndOneRowPerRank) {
  EXPECT_EQ(ScheduleToCsv(OneFOneB(2, 2)),
            "# baton schedule: name=1f1b stages=2 microbatches=2 chunks=1\n"
            "F0,F1,B0,B1\n"
            "F0,B0,F1,B1\n");
}

TEST(ScheduleCsvTest, WithoutHeaderTheShapeIsInferred) {
  const Schedule schedule = ScheduleFromCsv(
      "F0, F1, 2F0, 2F1, 2B0, 2B1, B0, B1\n"
      "# a comment\n"
      "\n"
      "F0,3F0,3B0,F1,3F1,3B1,B0,B1,\n");
  EXPECT_EQ(schedule.name, "custom");
  EXPECT_EQ(schedule.stages, 2);
  EXPECT_EQ(schedule.chunks, 2);
  EXPECT_EQ(schedule.microbatches, 2);
  ASSERT_EQ(schedule.per_stage.size(), 2u);
  EXPECT_EQ(schedule.per_stage[1][1], (Action{1, ActionKind::kForward, 0, 1}));
}

TEST(ScheduleCsvTest, PyTorchStyleExplicitStagesLoad) {
  const Schedule schedule =
      ScheduleFromCsv("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
  EXPECT_EQ(schedule.per_stage[1][0], (Action{1, ActionKind::kRecvForward, 0, 0}));
  EXPECT_TRUE(HasCommunication(schedule));
}

TEST(ScheduleCsvTest, BadCellIsReportedWithItsLine) {
  const std::string error = ErrorOf(
      "# baton schedule: name=x stages=2 microbatches=1 chunks=1\n"
      "F0,B0\n"
      "F0,Q0\n");
  EXPECT_NE(error.find("line 3"), std::string::npos) << error;
  EXPECT_NE(error.find("Q0"), std::string::npos) << error;
}

TEST(ScheduleCsvTest, HeaderMustAgreeWithTheRows) {
  EXPECT_NE(ErrorOf("# baton schedule: name=x stages=3 microbatches=1 chunks=1\nF0,B0\n")
                .find("stages=3"),
            std::string::npos);
  EXPECT_NE(ErrorOf("# baton schedule: name=x stages=0\nF0\n").find("positive"), std::string::npos);
  EXPECT_NE(ErrorOf("# baton schedule: colour=red\nF0\n").find("unknown header key"),
            std::string::npos);
  EXPECT_NE(ErrorOf("").find("0 stage rows"), std::string::npos);
}

TEST(ScheduleCsvTest, NamesThatCannotBeReadBackAreRefused) {
  Schedule schedule = GPipe(1, 1);
  schedule.name = "my schedule";
  EXPECT_THROW(ScheduleToCsv(schedule), Error);
}

TEST(ScheduleCsvTest, FileRoundTrip) {
  const std::string path = testing::TempDir() + "/baton_schedule_test.csv";
  const Schedule schedule = InsertCommunication(Interleaved1F1B(3, 4, 2));
  SaveScheduleCsv(schedule, path);
  EXPECT_EQ(LoadScheduleCsv(path), schedule);
  std::filesystem::remove(path);
  EXPECT_THROW(LoadScheduleCsv(path), Error);
}

TEST(ScheduleTest, HasCommunicationOnlyWithSendsOrReceives) {
  EXPECT_FALSE(HasCommunication(OneFOneB(4, 4)));
  EXPECT_TRUE(HasCommunication(InsertCommunication(OneFOneB(4, 4))));
  EXPECT_FALSE(HasCommunication(InsertCommunication(OneFOneB(1, 4))));
}

}  // namespace
}  // namespace baton
