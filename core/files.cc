// Durable file operations (see files.h).
#include "core/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace baton {
namespace {

std::string Errno() { return std::strerror(errno); }

std::string ParentOf(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// A new file at `path`, created exclusively: never through a link, never a file that was there.
int CreateExclusively(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0644);
}

// unlink(2), tolerating nothing there; throws naming the path otherwise.
void RemoveEntry(const std::string& path, const char* why) {
  BATON_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT, "{}: cannot remove {}: {}", path, why,
              Errno());
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(getpid())) {
  fd_ = CreateExclusively(temp_path_);
  if (fd_ < 0 && errno == EEXIST) {
    // An earlier process's temporary with this pid (it crashed), or a planted link: remove the
    // entry itself (never what a link points to) and create ours.
    RemoveEntry(temp_path_, "a stale temporary file");
    fd_ = CreateExclusively(temp_path_);
  }
  BATON_CHECK(fd_ >= 0, "{}: cannot create: {}", temp_path_, Errno());
}

int OpenOutputFile(const std::string& path, OutputMode mode) {
  if (mode == OutputMode::kReplace) {
    RemoveEntry(path, "what was there before");
    const int fd = CreateExclusively(path);
    BATON_CHECK(fd >= 0, "{}: cannot create: {}", path, Errno());
    return fd;
  }
  // O_NONBLOCK: a FIFO there would block the open until a reader came.
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP) {
    BATON_FAIL(
        "{}: is a symbolic link; Baton appends only to a file of its own, never through a "
        "link",
        path);
  }
  BATON_CHECK(fd >= 0, "{}: cannot open for appending: {}", path, Errno());
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const std::string error = stat_ok ? std::string() : Errno();
  if (!stat_ok || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    if (!stat_ok) BATON_FAIL("{}: cannot stat: {}", path, error);
    if (!S_ISREG(st.st_mode)) {
      BATON_FAIL("{}: is {}, not a regular file", path, FileKind(st.st_mode));
    }
    BATON_FAIL("{}: has {} hard links; Baton appends only to a file of its own", path, st.st_nlink);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void WriteAll(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    BATON_CHECK(n > 0, "{}: write failed: {}", path, n < 0 ? Errno() : "no progress");
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::Write(const void* data, size_t bytes) {
  BATON_CHECK(fd_ >= 0 && !committed_, "{}: write after commit", path_);
  WriteAll(fd_, data, bytes, temp_path_);
  hash_.Update(data, bytes);
  bytes_written_ += bytes;
}

void AtomicFileWriter::Commit() {
  BATON_CHECK(fd_ >= 0 && !committed_, "{}: committed twice", path_);
  BATON_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", temp_path_, Errno());
  const int rc = ::close(fd_);
  fd_ = -1;
  BATON_CHECK(rc == 0, "{}: close failed: {}", temp_path_, Errno());
  BATON_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, "{}: rename from {} failed: {}",
              path_, temp_path_, Errno());
  committed_ = true;
  SyncDirectory(ParentOf(path_));
}

void WriteFileAtomically(const std::string& path, std::string_view content) {
  AtomicFileWriter writer(path);
  writer.Write(content);
  writer.Commit();
}

void SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  BATON_CHECK(fd >= 0, "{}: cannot open directory: {}", dir, Errno());
  const int rc = ::fsync(fd);
  const std::string error = rc == 0 ? std::string() : Errno();
  ::close(fd);
  BATON_CHECK(rc == 0, "{}: fsync of the directory failed: {}", dir, error);
}

void MakeDirectories(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
  std::filesystem::path partial;
  for (const auto& part : path) {
    partial /= part;
    if (part.empty() || part == "/" || part == "." || part == "..") continue;
    if (::mkdir(partial.c_str(), 0755) == 0) {
      SyncDirectory(ParentOf(partial.string()));
      continue;
    }
    BATON_CHECK(errno == EEXIST, "{}: cannot create directory: {}", partial.string(), Errno());
    BATON_CHECK(std::filesystem::is_directory(partial), "{}: exists and is not a directory",
                partial.string());
  }
}

std::string FileKind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int OpenRegularFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  BATON_CHECK(fd >= 0, "{}: cannot open: {}", path, Errno());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string error = Errno();
    ::close(fd);
    BATON_FAIL("{}: cannot stat: {}", path, error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    BATON_FAIL("{}: is {}, not a regular file", path, FileKind(st.st_mode));
  }
  // Reads of a regular file never block anyway; clear the flag so they behave as usual.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string ReadFileToString(const std::string& path) {
  MappedFile file = MappedFile::Open(path);
  return std::string(reinterpret_cast<const char*>(file.data()), file.size());
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  BATON_CHECK(::stat(path.c_str(), &st) == 0, "{}: cannot stat: {}", path, Errno());
  if (!S_ISREG(st.st_mode)) BATON_FAIL("{}: is {}, not a regular file", path, FileKind(st.st_mode));
  return static_cast<uint64_t>(st.st_size);
}

uint64_t FileChecksum(const std::string& path) {
  MappedFile file = MappedFile::Open(path);
  Fnv1a64 hash;
  hash.Update(file.data(), file.size());
  return hash.digest();
}

MappedFile MappedFile::Open(const std::string& path) {
  MappedFile file;
  file.path_ = path;
  const int fd = OpenRegularFile(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string error = Errno();
    ::close(fd);
    BATON_FAIL("{}: cannot stat: {}", path, error);
  }
  file.size_ = static_cast<uint64_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const std::string error = p == MAP_FAILED ? Errno() : std::string();
    ::close(fd);
    BATON_CHECK(p != MAP_FAILED, "{}: cannot map {} bytes: {}", path, file.size_, error);
    file.data_ = static_cast<const std::byte*>(p);
  } else {
    ::close(fd);
  }
  return file;
}

MappedFile::~MappedFile() { Reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace baton
