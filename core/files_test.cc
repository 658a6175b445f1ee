// Durable file operation tests: atomic replace, leftovers of an interrupted write, checksums.
#include "core/files.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"

namespace baton {
namespace {

using test_util::TempDir;

TEST(CheckpointFilesTest, CommitReplacesTheFileWhole) {
  TempDir dir;
  const std::string path = dir / "f";
  WriteFileAtomically(path, "old");
  AtomicFileWriter writer(path);
  writer.Write("new content");
  EXPECT_EQ(ReadFileToString(path), "old") << "nothing visible before Commit";
  writer.Commit();
  EXPECT_EQ(ReadFileToString(path), "new content");
  EXPECT_FALSE(std::filesystem::exists(writer.temp_path()));
}

TEST(CheckpointFilesTest, AbandonedWriteLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir / "f";
  WriteFileAtomically(path, "old");
  std::string temp;
  {
    AtomicFileWriter writer(path);
    writer.Write("half of it");
    temp = writer.temp_path();
    EXPECT_TRUE(std::filesystem::exists(temp));
  }
  EXPECT_EQ(ReadFileToString(path), "old");
  EXPECT_FALSE(std::filesystem::exists(temp));
}

// A full disk, as the kernel reports it to a writer (EFBIG past RLIMIT_FSIZE stands in for
// ENOSPC): the error names the file and the cause, and neither a temporary nor a partial file is
// left; the old file is untouched.
TEST(CheckpointFilesTest, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  TempDir dir;
  const std::string path = dir / "f";
  WriteFileAtomically(path, "old");
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit limited = saved;
  limited.rlim_cur = 64 * 1024;
  auto* previous = signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the writer
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string error;
  try {
    WriteFileAtomically(path, std::string(256 * 1024, 'x'));
  } catch (const Error& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous);
  EXPECT_NE(error.find(path + ".tmp."), std::string::npos) << error;
  EXPECT_NE(error.find("write failed: File too large"), std::string::npos) << error;
  EXPECT_EQ(ReadFileToString(path), "old");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{"f"});
}

TEST(CheckpointFilesTest, WriterChecksumIsTheFileChecksum) {
  TempDir dir;
  AtomicFileWriter writer(dir / "f");
  writer.Write("abc");
  writer.Write("defgh");
  writer.Commit();
  Fnv1a64 hash;
  hash.Update("abcdefgh", 8);
  EXPECT_EQ(writer.checksum(), hash.digest());
  EXPECT_EQ(FileChecksum(dir / "f"), hash.digest());
  EXPECT_EQ(writer.bytes_written(), 8u);
  EXPECT_EQ(FileSize(dir / "f"), 8u);
}

TEST(CheckpointFilesTest, MakeDirectoriesIsIdempotentAndRefusesFiles) {
  TempDir dir;
  MakeDirectories(dir / "a/b/c");
  MakeDirectories(dir / "a/b/c");
  EXPECT_TRUE(std::filesystem::is_directory(dir / "a/b/c"));
  WriteFileAtomically(dir / "file", "x");
  EXPECT_THROW(MakeDirectories(dir / "file/sub"), Error);
}

TEST(CheckpointFilesTest, EmptyFileMapsToNothing) {
  TempDir dir;
  WriteFileAtomically(dir / "empty", "");
  const MappedFile file = MappedFile::Open(dir / "empty");
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(ReadFileToString(dir / "empty"), "");
}

TEST(CheckpointFilesTest, ErrorsNameTheFile) {
  TempDir dir;
  try {
    MappedFile::Open(dir / "absent");
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "absent"), std::string::npos) << e.what();
  }
}

// A FIFO with no writer would block a plain open() forever; every reader refuses it at once.
TEST(CheckpointFilesTest, FifosAndFoldersAreRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& read : std::vector<std::function<void()>>{
           [&] { ::close(OpenRegularFile(fifo)); }, [&] { ReadFileToString(fifo); },
           [&] { FileChecksum(fifo); }, [&] { FileSize(fifo); }}) {
    try {
      read();
      ADD_FAILURE() << "read a FIFO";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fifo + ": is a FIFO, not a regular file"),
                std::string::npos)
          << e.what();
    }
  }
  try {
    ReadFileToString(dir.path());
    ADD_FAILURE() << "read a folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder, not a regular file"), std::string::npos)
        << e.what();
  }
}

// A link planted where Baton writes (output.dir/metrics.jsonl -> ../victim.txt) is replaced or
// refused, never followed: the file it points to keeps its bytes.
TEST(OutputFilesTest, APlantedSymbolicLinkIsNeverWrittenThrough) {
  TempDir dir;
  const std::string victim = dir / "victim.txt";
  WriteFileAtomically(victim, "precious");
  const std::string planted = dir / "metrics.jsonl";
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);

  // Appending (a resumed run) refuses the link, naming it.
  try {
    ::close(OpenOutputFile(planted, OutputMode::kAppend));
    ADD_FAILURE() << "appended through a symbolic link";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(planted + ": is a symbolic link"), std::string::npos)
        << e.what();
  }
  // A fresh file (a fresh run) replaces the link with a file of its own.
  const int fd = OpenOutputFile(planted, OutputMode::kReplace);
  WriteAll(fd, "mine", 4, planted);
  ::close(fd);
  EXPECT_EQ(ReadFileToString(victim), "precious");
  EXPECT_EQ(ReadFileToString(planted), "mine");
  EXPECT_FALSE(std::filesystem::is_symlink(planted));
  // Appending to its own regular file goes on at the end.
  const int again = OpenOutputFile(planted, OutputMode::kAppend);
  WriteAll(again, "+1", 2, planted);
  ::close(again);
  EXPECT_EQ(ReadFileToString(planted), "mine+1");
}

// A hard link to another file: a fresh file does not truncate it, appending refuses it.
TEST(OutputFilesTest, APlantedHardLinkIsNeitherTruncatedNorAppendedTo) {
  TempDir dir;
  const std::string victim = dir / "victim.txt";
  WriteFileAtomically(victim, "precious");
  const std::string planted = dir / "events";
  ASSERT_EQ(::link(victim.c_str(), planted.c_str()), 0);
  EXPECT_THROW(OpenOutputFile(planted, OutputMode::kAppend), Error);
  ::close(OpenOutputFile(planted, OutputMode::kReplace));
  EXPECT_EQ(ReadFileToString(victim), "precious");
  EXPECT_EQ(FileSize(planted), 0u);
}

// The atomic writer's temporary "<path>.tmp.<pid>" planted as a link to another file: the
// temporary is created exclusively (the link removed, not followed), so the other file keeps its
// bytes and <path> gets the new content.
TEST(OutputFilesTest, APlantedLinkAtTheTemporaryPathIsNotFollowed) {
  TempDir dir;
  const std::string victim = dir / "victim.txt";
  WriteFileAtomically(victim, "precious");
  const std::string path = dir / "report.json";
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  ASSERT_EQ(::symlink(victim.c_str(), temp.c_str()), 0);
  WriteFileAtomically(path, "{}");
  EXPECT_EQ(ReadFileToString(victim), "precious");
  EXPECT_EQ(ReadFileToString(path), "{}");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(temp)));
  // A link at the final path is replaced by the rename, not written through.
  std::filesystem::remove(path);
  ASSERT_EQ(::symlink(victim.c_str(), path.c_str()), 0);
  WriteFileAtomically(path, "new");
  EXPECT_EQ(ReadFileToString(victim), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  EXPECT_EQ(ReadFileToString(path), "new");
}

}  // namespace
}  // namespace baton
