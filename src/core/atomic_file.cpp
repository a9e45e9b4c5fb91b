// src/core/atomic_file.cpp: temporary file, fsync, rename (atomic_file.hpp explains the contract).
#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "rotary/error.hpp"

namespace rotary::detail {

namespace {

namespace fs = std::filesystem;

// strerror()'s text without its shared buffer.
std::string reason(int error) { return std::generic_category().message(error); }

// Writes every byte, retrying short writes and EINTR. Returns 0 or the errno of the failure.
int write_all(int fd, std::string_view bytes) {
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += written;
    left -= static_cast<size_t>(written);
  }
  return 0;
}

// "<name>.tmp-<pid>-<8 hex digits>" beside `target`. The name part is cut to 200 bytes so that a
// target whose name is near NAME_MAX (255) still has a temporary name that fits.
std::string temp_name(const std::string& target) {
  static std::atomic<uint64_t> counter{0};
  const auto now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t mixed = (now ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  char suffix[40];
  std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%08x", static_cast<long>(::getpid()),
                static_cast<unsigned>(mixed >> 32));
  const fs::path path(target);
  std::string name = path.filename().string();
  if (name.size() > 200) name.resize(200);
  return (path.parent_path() / (name + suffix)).string();
}

}  // namespace

AtomicFileSet::AtomicFileSet(std::string who) : who_(std::move(who)) {}

AtomicFileSet::~AtomicFileSet() {
  // After a failure (a commit() that completed cleared files_): no target was changed, and the
  // temporary files go. A temp file renamed into place no longer exists under its name.
  for (const Staged& file : files_) {
    if (!file.temp.empty()) ::unlink(file.temp.c_str());
  }
}

void AtomicFileSet::fail(const Staged& file, int error) const {
  throw Error(concat(who_, ": cannot write ", file.label.empty() ? std::string() : file.label + " ", file.path, ": ",
                     reason(error)));
}

void AtomicFileSet::fail_to_create_temp(const Staged& file, int error) const {
  if (error != EACCES && error != EPERM && error != EROFS) fail(file, error);
  // The file itself may be writable; what failed is creating a file beside it.
  throw Error(concat(who_, ": cannot write ", file.label.empty() ? std::string() : file.label + " ", file.path, ": ",
                     reason(error), " (its directory must be writable: the file is written beside it first, then "
                     "renamed over it)"));
}

void AtomicFileSet::Sink::write(std::string_view bytes) {
  if (const int error = write_all(fd_, bytes); error != 0) {
    Staged file;
    file.label = label_;
    file.path = path_;
    set_.fail(file, error);
  }
}

void AtomicFileSet::add(const std::string& path, std::string_view bytes, const std::string& label) {
  // A device or a pipe receives the bytes at commit(): keep a copy, the caller's view may be gone.
  struct stat status {};
  if (!path.empty() && ::stat(path.c_str(), &status) == 0 && !S_ISDIR(status.st_mode) && !S_ISREG(status.st_mode)) {
    add_streamed(path, [copy = std::string(bytes)](Sink& sink) { sink.write(copy); }, label);
    return;
  }
  add_streamed(path, [bytes](Sink& sink) { sink.write(bytes); }, label);
}

void AtomicFileSet::add_streamed(const std::string& path, std::function<void(Sink&)> produce, const std::string& label) {
  Staged file;
  file.label = label;
  file.path = path;
  file.target = path;
  if (path.empty()) fail(file, ENOENT);
  struct stat status {};
  if (::stat(path.c_str(), &status) == 0) {
    if (S_ISDIR(status.st_mode)) fail(file, EISDIR);
    if (!S_ISREG(status.st_mode)) {
      // A device or a pipe: nothing to replace atomically; written at commit().
      file.write_device = std::move(produce);
      files_.push_back(std::move(file));
      return;
    }
    file.target_existed = true;
    struct stat link_status {};
    if (::lstat(path.c_str(), &link_status) == 0 && S_ISLNK(link_status.st_mode)) {
      // Replace the file the link names, as writing through the link did, not the link.
      std::error_code error;
      const fs::path resolved = fs::canonical(path, error);
      if (!error) file.target = resolved.string();
    }
  } else if (errno != ENOENT) {
    fail(file, errno);  // EACCES, ENOTDIR, ENAMETOOLONG, ELOOP: creating the file would fail alike
  }

  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    file.temp = temp_name(file.target);
    fd = ::open(file.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const int error = errno;
    file.temp.clear();
    fail_to_create_temp(file, error);
  }
  // From here the destructor removes the temporary file if anything below throws.
  files_.push_back(file);
  // An existing target keeps its permission bits (writing in place kept them; a new file gets
  // 0666 & ~umask, as before).
  if (file.target_existed) ::fchmod(fd, status.st_mode & 07777);
  try {
    Sink sink(*this, file.label, file.path, fd);
    produce(sink);
  } catch (...) {
    ::close(fd);  // the destructor removes the temporary file
    throw;
  }
  // fsync: the data is on disk before the rename makes it the target, so that a crash cannot leave
  // the new name on an empty or partial file.
  int error = ::fsync(fd) != 0 ? errno : 0;
  // close() reports deferred write errors on some file systems (NFS).
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) fail(file, error);
}

void AtomicFileSet::commit() {
  // Devices and pipes first: their write cannot be undone, so it comes after every temporary file
  // is complete and before any target is replaced.
  for (const Staged& file : files_) {
    if (!file.temp.empty()) continue;
    const int fd = ::open(file.path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) fail(file, errno);
    try {
      Sink sink(*this, file.label, file.path, fd);
      file.write_device(sink);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) fail(file, errno);
  }

  enum class Done { Exchanged, Replaced, Created };
  std::vector<Done> done;
  for (size_t i = 0; i < files_.size(); ++i) {
    const Staged& file = files_[i];
    if (file.temp.empty()) {
      done.push_back(Done::Replaced);
      continue;
    }
    struct stat status {};
    const bool exists = ::lstat(file.target.c_str(), &status) == 0;
    int error = 0;
    if (exists && S_ISDIR(status.st_mode)) {
      error = EISDIR;  // became a directory since add(): exchanging would move it away
    } else if (exists && S_ISREG(status.st_mode)) {
      // The old file ends up under the temporary name: the undo, until it is removed below.
      if (::renameat2(AT_FDCWD, file.temp.c_str(), AT_FDCWD, file.target.c_str(), RENAME_EXCHANGE) == 0) {
        done.push_back(Done::Exchanged);
        continue;
      }
      if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        error = errno;
      } else if (std::rename(file.temp.c_str(), file.target.c_str()) == 0) {
        done.push_back(Done::Replaced);  // no RENAME_EXCHANGE on this file system: cannot be undone
        continue;
      } else {
        error = errno;
      }
    } else if (std::rename(file.temp.c_str(), file.target.c_str()) == 0) {
      done.push_back(exists ? Done::Replaced : Done::Created);
      continue;
    } else {
      error = errno;
    }
    // Undo the renames before this one, newest first; the destructor removes the temporary files.
    for (size_t j = done.size(); j-- > 0;) {
      const Staged& earlier = files_[j];
      if (done[j] == Done::Exchanged) {
        ::renameat2(AT_FDCWD, earlier.temp.c_str(), AT_FDCWD, earlier.target.c_str(), RENAME_EXCHANGE);
      } else if (done[j] == Done::Created) {
        ::unlink(earlier.target.c_str());
      }
    }
    fail(file, error);
  }
  // Every target is in place; the exchanged temporary names hold the old files.
  for (size_t i = 0; i < files_.size(); ++i) {
    if (done[i] == Done::Exchanged) ::unlink(files_[i].temp.c_str());
  }
  files_.clear();
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& who) {
  AtomicFileSet files(who);
  files.add(path, bytes);
  files.commit();
}

void write_file_atomically(const std::string& path, std::function<void(AtomicFileSet::Sink&)> produce,
                           const std::string& who) {
  AtomicFileSet files(who);
  files.add_streamed(path, std::move(produce));
  files.commit();
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat status_a {}, status_b {};
  const bool a_exists = ::stat(a.c_str(), &status_a) == 0;
  const bool b_exists = ::stat(b.c_str(), &status_b) == 0;
  if (a_exists && b_exists) {
    return S_ISREG(status_a.st_mode) && status_a.st_dev == status_b.st_dev && status_a.st_ino == status_b.st_ino;
  }
  if (a_exists || b_exists) return false;
  std::error_code error_a, error_b;
  const fs::path absolute_a = fs::weakly_canonical(fs::absolute(a, error_a), error_a);
  const fs::path absolute_b = fs::weakly_canonical(fs::absolute(b, error_b), error_b);
  if (error_a || error_b) return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
  return absolute_a == absolute_b;
}

}  // namespace rotary::detail
