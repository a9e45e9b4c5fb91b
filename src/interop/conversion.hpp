// src/interop/conversion.hpp: what the conversion of one safetensors file (convert.cpp) and of
// a model folder (convert_checkpoint.cpp) share: the plan of a conversion, made from the header
// alone before anything is written, and the input file read in pieces. Internal to
// rotary_interop (not installed).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "interop/safetensors.hpp"
#include "rotary/convert.hpp"
#include "rotary/error.hpp"

namespace rotary::detail {

bool ends_with(std::string_view text, std::string_view suffix);

struct Plan {
  PermutedTensor tensor;
  int64_t data_offset = 0;  // in the file
  int64_t row_bytes = 0;
  int64_t bytes = 0;  // the whole tensor's, from data_offset
};

// Every check of a conversion and what it will do, from the header alone: the tensors to permute
// (in header order) and the counts. Nothing is read from the data buffer.
struct ConversionPlan {
  ConvertResult result;
  std::vector<Plan> plans;
};

// The plan of converting the file whose header is `header`, or an Error naming the tensor (or
// the option) that cannot be converted exactly.
ConversionPlan plan_conversion(const safetensors::Header& header, int64_t file_size,
                               const CheckpointGeometry& geometry, const ConvertOptions& options,
                               std::string_view source);

// The bytes [offset, offset + size) of the file open as `fd`, into `out` (resized). A read that
// ends early means the file shrank since it was measured: an Error, as is a read error.
void read_exactly(int fd, int64_t offset, int64_t size, std::string& out, const std::string& path, int64_t file_size);

// The pieces the data goes through: large enough for few system calls, small beside any
// machine's memory.
constexpr int64_t kCopyBytes = int64_t{8} << 20;

// An input file open for reading (a regular file; a symlink is followed), with its size and
// modification time when opened, to tell whether it changed while it was read.
struct InputFile {
  explicit InputFile(const std::string& file_path) : path(file_path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(detail::concat("convert-weights: cannot read ", path, ": ", std::strerror(errno)));
    if (::fstat(fd, &info) != 0) {
      const int error = errno;
      ::close(fd);
      throw Error(detail::concat("convert-weights: cannot read ", path, ": ", std::strerror(error)));
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      throw Error(detail::concat("convert-weights: ", path, " is not a regular file"));
    }
    size = static_cast<int64_t>(info.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd); }

  // The safetensors header, read and checked whole (safetensors::parse_prefix).
  safetensors::Header header() const {
    std::string prefix;
    read_exactly(fd, 0, std::min<int64_t>(size, 8), prefix, path, size);
    read_exactly(fd, 0, std::min(size, safetensors::header_end(prefix)), prefix, path, size);
    return safetensors::parse_prefix(prefix, size, path);
  }

  // Throws when the file's size or modification time differs from when it was opened.
  void check_unchanged() const {
    struct stat after {};
    if (::fstat(fd, &after) != 0 || after.st_size != info.st_size || after.st_mtim.tv_sec != info.st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != info.st_mtim.tv_nsec) {
      throw Error(detail::concat("convert-weights: ", path, " changed while it was read (", size,
                                 " bytes expected); nothing was written"));
    }
  }

  std::string path;
  int fd = -1;
  struct stat info {};
  int64_t size = 0;
};

}  // namespace rotary::detail
