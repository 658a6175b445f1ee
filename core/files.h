// Durable file operations, the one home for them (checkpoints, safetensors, run outputs, data
// files): atomic writes, directory syncs, read-only mappings and file checksums.
//
// Atomic write protocol (docs/checkpoints.md, "Atomicity"): the bytes go to
// "<path>.tmp.<pid>", which is fsynced, renamed over <path>, and then the directory holding it is
// fsynced, so after a crash <path> is either absent, its old content or its whole new content,
// never a prefix. Every error is a baton::Error naming the file and the failing system call.
//
// No write ever goes through a planted link: every file Baton writes is opened here, either
// atomically (the temporary is created exclusively, O_EXCL | O_NOFOLLOW, and the rename replaces
// whatever entry <path> was, a symbolic link included, without following it) or in place with
// OpenOutputFile (which removes or refuses a link instead of following it). Nothing truncates an
// output in place: a truncating open would follow a link, or empty a hard link's other file.
//
// Thread safety: the functions are safe to call concurrently on different paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/hash.h"

namespace baton {

// Streams bytes into "<path>.tmp.<pid>" and publishes them with Commit(). Destroying an
// uncommitted writer removes the temporary file (the previous <path>, if any, is untouched).
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void Write(const void* data, size_t bytes);
  void Write(std::string_view text) { Write(text.data(), text.size()); }
  // fsync, close, rename to the final path, fsync the directory.
  void Commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }
  // FNV-1a 64 of everything written so far: the file's checksum once committed.
  uint64_t checksum() const { return hash_.digest(); }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t bytes_written_ = 0;
  Fnv1a64 hash_;
};

// How OpenOutputFile treats what is already at the path.
enum class OutputMode {
  // A fresh file: whatever is at the path (a file, a symbolic or hard link to another file) is
  // removed, never followed or truncated, and a new file is created exclusively. A folder there
  // is an error.
  kReplace,
  // Appends to the regular file at the path, created when absent. A symbolic link, a file with
  // another hard link, a FIFO, a device or a folder there is an error naming the path.
  kAppend,
};

// Opens an output that is written in place, one append at a time (metrics.jsonl, TensorBoard
// event files), never through a planted link. Returns a close-on-exec O_APPEND descriptor the
// caller closes; throws naming the path.
int OpenOutputFile(const std::string& path, OutputMode mode);

// write(2) until all of `bytes` went to `fd` (a short write or EINTR retries); throws naming
// `path` when it fails.
void WriteAll(int fd, const void* data, size_t bytes, const std::string& path);

// Writes `content` to `path` atomically (AtomicFileWriter).
void WriteFileAtomically(const std::string& path, std::string_view content);

// fsyncs a directory so that renames and creations inside it are durable.
void SyncDirectory(const std::string& dir);
// mkdir -p, tolerating concurrent creation by other processes; syncs each parent that gains an
// entry.
void MakeDirectories(const std::string& dir);

// Opens `path` for reading without ever blocking (a FIFO would block a plain open until a writer
// came) and checks it is a regular file: a FIFO, device, socket or folder is an error naming the
// path and what it is. Returns a blocking, close-on-exec descriptor the caller closes.
int OpenRegularFile(const std::string& path);
// "a FIFO", "a character device", "a folder", ... for a stat mode that is not a regular file.
std::string FileKind(unsigned mode);

std::string ReadFileToString(const std::string& path);
bool FileExists(const std::string& path);
uint64_t FileSize(const std::string& path);  // throws naming the file when it cannot stat it
// FNV-1a 64 over the whole file's bytes.
uint64_t FileChecksum(const std::string& path);

// A whole file mapped read-only into memory. The bytes stay valid as long as the object;
// move-only.
class MappedFile {
 public:
  static MappedFile Open(const std::string& path);
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Reset();
  std::string path_;
  const std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace baton
