// The flight recorder (worker/flight_recorder.h): entries open and close in order, the last 256
// are kept, the file holds them after the process that wrote it was killed, other files are
// refused, and the summary names each rank's open entry and the likely culprit.
#include "worker/flight_recorder.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace baton {
namespace {

class FlightRecorderTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string TempPath(const std::string& name) {
    std::filesystem::create_directories(dir_);
    return (dir_ / name).string();
  }

 private:
  std::filesystem::path dir_ = std::filesystem::temp_directory_path() /
                               ("flight_recorder_test." + std::to_string(::getpid()));
};

TEST_F(FlightRecorderTest, EntriesOpenAndCloseInOrderAndIdleOpensNone) {
  const std::string path = TempPath("order/rank-3.bin");  // its directory is made
  {
    FlightRecorder recorder(path, 3);
    recorder.StartStep(7);
    recorder.Record("F", 0, -1);
    recorder.Record("F", 0, -1);  // the same again: still one entry
    recorder.Record("RECV_B", 0, 4, 65536);
    recorder.Record("B", 0, -1);
    recorder.Record("idle", -1, -1);
    recorder.StartStep(8);
    recorder.Record("RECV_F", 1, 2);
  }
  const std::optional<FlightRecord> record = ReadFlightRecord(path);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->rank, 3);
  ASSERT_EQ(record->entries.size(), 6u);
  const std::vector<std::string> what = {"STEP", "F", "RECV_B", "B", "STEP", "RECV_F"};
  for (size_t i = 0; i < what.size(); ++i) {
    const FlightEntry& e = record->entries[i];
    EXPECT_EQ(e.what, what[i]) << i;
    EXPECT_EQ(e.seq, i + 1) << i;
    EXPECT_EQ(e.step, i < 4 ? 7 : 8) << i;
    EXPECT_GT(e.start_us, 0) << i;
    // Every entry but the last was closed by the next (the idle "B" one by "idle" itself).
    if (i + 1 < what.size()) {
      EXPECT_GE(e.end_us, e.start_us) << i;
    }
  }
  EXPECT_EQ(record->entries[2].microbatch, 0);
  EXPECT_EQ(record->entries[2].peer_rank, 4);
  EXPECT_EQ(record->entries[2].bytes, 65536);
  EXPECT_EQ(record->entries.back().end_us, 0);  // still open when the recorder went
  EXPECT_EQ(record->entries.back().peer_rank, 2);
}

TEST_F(FlightRecorderTest, KeepsTheLast256EntriesOldestFirst) {
  const std::string path = TempPath("wrap.bin");
  {
    FlightRecorder recorder(path, 0);
    for (int i = 0; i < 1000; ++i) recorder.Record("F", i, -1);
  }
  const std::optional<FlightRecord> record = ReadFlightRecord(path);
  ASSERT_TRUE(record);
  ASSERT_EQ(record->entries.size(), static_cast<size_t>(kFlightRecords));
  for (int i = 0; i < kFlightRecords; ++i) {
    EXPECT_EQ(record->entries[static_cast<size_t>(i)].microbatch, 1000 - kFlightRecords + i);
  }
}

// What a killed process had recorded is in the file: the pages are the file's, not the process's.
TEST_F(FlightRecorderTest, TheRecordOutlivesAProcessKilledMidEntry) {
  const std::string path = TempPath("killed.bin");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FlightRecorder recorder(path, 5);
    recorder.StartStep(3);
    recorder.Record("F", 2, -1);
    recorder.Record("RECV_B", 2, 6);
    ::kill(::getpid(), SIGKILL);
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const std::optional<FlightRecord> record = ReadFlightRecord(path);
  ASSERT_TRUE(record);
  ASSERT_EQ(record->entries.size(), 3u);
  EXPECT_EQ(record->entries.back().what, "RECV_B");
  EXPECT_EQ(record->entries.back().peer_rank, 6);
  EXPECT_EQ(record->entries.back().end_us, 0);
}

// A link planted at the recorder's name is replaced, never written through.
TEST_F(FlightRecorderTest, APlantedLinkIsReplacedNotFollowed) {
  const std::string target = TempPath("target.txt");
  std::ofstream(target) << "precious";
  const std::string path = TempPath("linked.bin");
  std::filesystem::create_symlink(target, path);
  { FlightRecorder recorder(path, 2); }
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  std::ifstream in(target);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
  ASSERT_TRUE(ReadFlightRecord(path));
  EXPECT_EQ(ReadFlightRecord(path)->rank, 2);
}

TEST_F(FlightRecorderTest, MissingShortOrForeignFilesAreNoRecord) {
  EXPECT_FALSE(ReadFlightRecord(TempPath("none.bin")));
  const std::string garbage = TempPath("garbage.bin");
  std::ofstream(garbage) << std::string(64 + 256 * 64, 'x');
  EXPECT_FALSE(ReadFlightRecord(garbage));
  const std::string short_file = TempPath("short.bin");
  { FlightRecorder recorder(short_file, 1); }
  std::filesystem::resize_file(short_file, 100);
  EXPECT_FALSE(ReadFlightRecord(short_file));
}

FlightRecord Open(int rank, const std::string& what, int microbatch, int peer, int64_t bytes = 0) {
  FlightRecord record;
  record.rank = rank;
  record.entries.push_back({1, 4, what, microbatch, peer, bytes, 1'000'000, 0});
  return record;
}

std::string Name(int rank) {
  return "stage " + std::to_string(rank) + " (rank " + std::to_string(rank) + ")";
}

TEST(FlightRecorderSummaryTest, TheSummaryNamesEachRanksEntryAndTheRankWaitedForThatWaitsForNone) {
  // Ranks 0 and 2 wait for rank 1, which computes a forward: rank 1 is the likely culprit.
  const std::vector<FlightRecord> records = {Open(0, "RECV_B", 3, 1, 4096), Open(1, "F", 5, -1),
                                             Open(2, "RECV_F", 4, 1)};
  const std::string text = SummariseFlightRecords(records, 3'500'000, Name);
  EXPECT_NE(
      text.find("stage 0 (rank 0): RECV_B mb 3 waiting for rank 1, 4096 bytes (step 4), for 2.5 s"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("likely culprit: stage 1 (rank 1): 2 rank(s) wait for it (stage 0 (rank "
                      "0), stage 2 (rank 2)), and it waits for no peer: it is at F mb 5 (step 4)"),
            std::string::npos)
      << text;
  // A rank that left no record (it never started, or its file is elsewhere) is named too.
  const std::string missing = SummariseFlightRecords({Open(0, "RECV_F", 0, 3)}, 2'000'000, Name);
  EXPECT_NE(missing.find("likely culprit: stage 3 (rank 3): 1 rank(s) wait for it (stage 0 (rank "
                         "0)), and it waits for no peer: it left no record"),
            std::string::npos)
      << missing;
  // Waits in a cycle: nobody is blamed.
  const std::string cycle =
      SummariseFlightRecords({Open(0, "RECV_B", 0, 1), Open(1, "RECV_F", 0, 0)}, 2'000'000, Name);
  EXPECT_NE(cycle.find("likely culprit: none found"), std::string::npos) << cycle;
}

TEST(FlightRecorderSummaryTest, TheJsonHoldsEveryEntryOfEveryRank) {
  const nlohmann::json json =
      FlightRecordsJson({Open(0, "RECV_B", 3, 1, 512), Open(1, "F", 5, -1)});
  ASSERT_EQ(json["ranks"].size(), 2u);
  EXPECT_EQ(json["ranks"][1]["rank"], 1);
  EXPECT_EQ(json["ranks"][0]["entries"][0]["what"], "RECV_B");
  EXPECT_EQ(json["ranks"][0]["entries"][0]["peer_rank"], 1);
  EXPECT_EQ(json["ranks"][0]["entries"][0]["bytes"], 512);
  EXPECT_EQ(json["ranks"][0]["entries"][0]["end_us"], 0);
}

}  // namespace
}  // namespace baton
