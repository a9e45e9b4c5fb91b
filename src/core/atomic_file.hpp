// src/core/atomic_file.hpp: writing files so that a failure never leaves a target half written,
// for npy::write (src/cli/npy.cpp) and the `rotary` command's outputs (apply's .npy files, report's HTML). Internal:
// not installed; the CLI includes it as "core/atomic_file.hpp".
//
// Each file is written to a temporary file beside its target, `<name>.tmp-<pid>-<random>` in the
// same directory (so that the rename stays on one file system), every byte checked, fsync'd and
// closed, and only then renamed over the target. rename() replaces a name atomically: a reader, or
// the disk after a crash, sees the old file or the whole new one, never a prefix of it. A write
// that fails (full disk, file size limit, a missing directory) removes its temporary file and
// leaves the target as it was.
//
// Several outputs of one command are one AtomicFileSet: every file is staged first, and only
// when all of them are complete are they renamed into place; if anything fails before that, no
// target is touched. An existing target is swapped with its temporary file (renameat2
// RENAME_EXCHANGE), so that a rename failing part way through the set is undone by swapping the
// files already renamed back; on a file system without RENAME_EXCHANGE a plain rename is used and
// only the renames before it can be undone.
//
// What is kept from writing in place: an existing target keeps its permission bits (not its
// owner, nor its hard links: the name gets a new inode), and a symlink to a regular file is
// followed (the file it names is replaced, the link stays). What changes: the directory must be
// writable, since the temporary file is created there; an error says so.
// Devices and pipes (/dev/null, /dev/stdout on a terminal or a pipe) cannot be replaced; they are
// written directly, after every temporary file is complete and before the renames.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace rotary::detail {

class AtomicFileSet {
 public:
  // `who` starts every error message ("report", "apply"): "<who>: cannot write <path>: <reason>".
  explicit AtomicFileSet(std::string who);
  AtomicFileSet(const AtomicFileSet&) = delete;
  AtomicFileSet& operator=(const AtomicFileSet&) = delete;
  // Without a successful commit() (an exception on the way): removes every temporary file; no
  // target has been touched.
  ~AtomicFileSet();

  // Writes `bytes` to a temporary file beside `path` (or, for a device or a pipe, keeps them for
  // commit()). `label` names the output in messages, e.g. the flag "--out-k": "<who>: cannot write
  // --out-k <path>: <reason>" (empty: no label). Throws rotary::Error naming the path and the
  // system's reason (strerror) when the file cannot be written; the set then still holds the files
  // added before, and destroying it removes them.
  void add(const std::string& path, std::string_view bytes, const std::string& label = "");

  // Where a streamed output goes (add_streamed): write() appends bytes, retrying short writes,
  // and throws the set's "cannot write <path>: <reason>" error when the system refuses them.
  class Sink {
   public:
    void write(std::string_view bytes);

   private:
    friend class AtomicFileSet;
    Sink(const AtomicFileSet& set, const std::string& label, const std::string& path, int fd)
        : set_(set), label_(label), path_(path), fd_(fd) {}
    const AtomicFileSet& set_;
    const std::string& label_;
    const std::string& path_;
    int fd_;
  };
  // add() for an output too large to hold in memory (a converted checkpoint): `produce` writes
  // the file's bytes to the sink, in as many pieces as it likes, and may throw rotary::Error for
  // its own failures (an input that changed while it was read), which leaves no temporary file
  // behind. For a regular file it runs now, into the temporary file; for a device or a pipe it
  // runs at commit(), so it must stay callable until then.
  void add_streamed(const std::string& path, std::function<void(Sink&)> produce, const std::string& label = "");

  // Moves every staged file into place, all or nothing (see the file comment). Throws
  // rotary::Error naming the path that failed and the reason.
  void commit();

 private:
  struct Staged {
    std::string label;
    std::string path;         // as the caller gave it, for messages
    std::string target;       // the file replaced: `path`, or the regular file a symlink names
    std::string temp;         // the temporary file beside `target`; empty for a device
    std::function<void(Sink&)> write_device;  // writes what a device or pipe receives, at commit()
    bool target_existed = false;
  };

  [[noreturn]] void fail(const Staged& file, int error) const;
  [[noreturn]] void fail_to_create_temp(const Staged& file, int error) const;

  std::string who_;
  std::vector<Staged> files_;
};

// One file, through a set of one: the temporary file, then the rename.
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& who);
// The same, streamed (AtomicFileSet::add_streamed).
void write_file_atomically(const std::string& path, std::function<void(AtomicFileSet::Sink&)> produce,
                           const std::string& who);

// True when `a` and `b` name the same file, so that writing one would replace the other: the same
// inode when both exist (the same path, "./x" and "x", a hard link, a symlink to it); when
// neither exists yet, the same path once made absolute with `..` and the symlinks of its existing
// directories resolved. A file that exists and one that does not are different. Devices and pipes
// are never "the same" as anything (two outputs to /dev/null destroy nothing).
bool same_file(const std::string& a, const std::string& b);

}  // namespace rotary::detail
