// src/interop/convert_checkpoint.cpp: convert_checkpoint (include/rotary/convert.hpp), the
// conversion of a model folder: which files it holds (one safetensors file, or shards and their
// index), every shard checked against the index and planned before anything is written, then
// the shards converted (convert_weights, convert.cpp), the index and the folder's other files
// copied into a temporary folder that is renamed to OUT (docs/interop.md).
#include "rotary/convert.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/json.hpp"
#include "interop/conversion.hpp"
#include "interop/safetensors.hpp"
#include "rotary/error.hpp"

namespace rotary {
namespace {

using detail::ConversionPlan;
using detail::ends_with;
using detail::InputFile;
using detail::kCopyBytes;
using detail::Plan;
using detail::plan_conversion;
using detail::read_exactly;

namespace fs = std::filesystem;

// Hugging Face's names (transformers' SAFE_WEIGHTS_NAME and SAFE_WEIGHTS_INDEX_NAME).
constexpr std::string_view kSingleFileName = "model.safetensors";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
// An index is a few MB for the largest models (one line per tensor); the JSON reader's limit.
constexpr int64_t kMaxIndexBytes = int64_t{64} << 20;

// What `in_path` holds, and for a folder, the safetensors files to convert and the index.
struct CheckpointFiles {
  CheckpointLayout layout = CheckpointLayout::File;
  fs::path folder;
  std::string index_name;                 // Sharded
  std::string index_bytes;                // Sharded: written back unchanged
  std::vector<std::string> files;         // Folder, Sharded: names in the folder, sorted
  // Sharded: the file the index maps each tensor to, and the tensors it maps to each file.
  std::unordered_map<std::string, std::string> shard_of;
  std::map<std::string, std::vector<std::string>> tensors_of;
};

bool regular_file(const fs::path& path) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored);  // follows symlinks: a Hugging Face cache snapshot links its files
}

bool ends_with_any(std::string_view name, std::initializer_list<std::string_view> suffixes) {
  for (const std::string_view suffix : suffixes) {
    if (ends_with(name, suffix)) return true;
  }
  return false;
}

// Files of weights in some format: none of them is reordered by this conversion, so a folder's
// copy leaves them out rather than ship them, unconverted, beside the converted rows. The
// *.index.json files are the indexes of such weights (pytorch_model.bin.index.json).
bool weights_file(std::string_view name) {
  return ends_with_any(name, {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".ggml", ".h5", ".msgpack",
                              ".onnx", ".onnx_data", ".npz", ".npy", ".pkl", ".pickle", ".tflite", ".index.json"});
}

// The whole of a small file (an index), at most `limit` bytes.
std::string read_small_file(const std::string& path, int64_t limit) {
  const InputFile input(path);
  if (input.size > limit) {
    throw Error(detail::concat("convert-weights: ", path, " is ", input.size, " bytes, more than an index can be (",
                               limit, ")"));
  }
  std::string bytes;
  read_exactly(input.fd, 0, input.size, bytes, path, input.size);
  return bytes;
}

// Reads and checks a sharded checkpoint's index: {"weight_map": {"<tensor>": "<file>", ...}, ...}
// (transformers' modeling_utils.load_sharded_checkpoint reads the same), each tensor once, each
// file a plain .safetensors name in the index's folder.
void read_index(CheckpointFiles& files, const std::string& index_path) {
  files.index_bytes = read_small_file(index_path, kMaxIndexBytes);
  const json::Value root = json::parse(files.index_bytes, index_path);
  const json::Value* weight_map = root.is_object() ? root.find("weight_map") : nullptr;
  if (weight_map == nullptr || !weight_map->is_object()) {
    throw Error(detail::concat(index_path, ": a sharded checkpoint's index must be a JSON object with a weight_map "
                                           "{tensor: shard file} (got ",
                               weight_map != nullptr ? "weight_map " + weight_map->describe() : root.describe(), ")"));
  }
  if (weight_map->as_object().empty()) {
    throw Error(detail::concat(index_path, ": weight_map names no tensor"));
  }
  std::unordered_map<std::string, std::string>& shard_of = files.shard_of;
  std::map<std::string, std::vector<std::string>>& tensors_of = files.tensors_of;
  for (const auto& [tensor, file] : weight_map->as_object()) {
    const std::string where = detail::concat(index_path, ": weight_map[", json::quote(tensor), "]");
    if (!file.is_string()) {
      throw Error(detail::concat(where, " must be the name of a shard file (got ", file.describe(), ")"));
    }
    const std::string& name = file.as_string();
    // A plain name: a shard outside the folder ("../x", "/x") would be read from, and written to,
    // places the user did not give.
    if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
        name.find('\0') != std::string::npos || !ends_with(name, ".safetensors") || name == ".safetensors") {
      throw Error(detail::concat(where, " must be a .safetensors file name in the index's folder, without a path (got ",
                                 json::quote(name), ")"));
    }
    if (const auto [it, inserted] = shard_of.emplace(tensor, name); !inserted) {
      throw Error(detail::concat(index_path, ": tensor ", json::quote(tensor), " appears twice in weight_map (",
                                 json::quote(it->second), " and ", json::quote(name), ")"));
    }
    tensors_of[name].push_back(tensor);
  }
  std::string missing;
  for (const auto& [name, tensors] : tensors_of) {
    files.files.push_back(name);
    if (!regular_file(files.folder / name)) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) {
    throw Error(detail::concat(index_path, ": the index names shard files that ", files.folder.string(),
                               " does not hold: ", missing, "; nothing was written"));
  }
}

CheckpointFiles find_checkpoint(const std::string& in_path) {
  CheckpointFiles files;
  std::error_code ignored;
  if (fs::is_directory(in_path, ignored)) {
    files.folder = in_path;
    const bool sharded = regular_file(files.folder / kIndexName);
    const bool single = regular_file(files.folder / kSingleFileName);
    if (sharded && single) {
      throw Error(detail::concat("convert-weights: the folder ", in_path, " holds both ", kSingleFileName, " and ",
                                 kIndexName, ", so which is the checkpoint is unclear; give IN as ",
                                 (files.folder / kSingleFileName).string(), " or ", (files.folder / kIndexName).string()));
    }
    if (sharded) {
      files.layout = CheckpointLayout::Sharded;
      files.index_name = std::string(kIndexName);
      read_index(files, (files.folder / kIndexName).string());
    } else if (single) {
      files.layout = CheckpointLayout::Folder;
      files.files.emplace_back(kSingleFileName);
    } else {
      throw Error(detail::concat("convert-weights: the folder ", in_path, " holds neither ", kSingleFileName, " nor ",
                                 kIndexName, " (give a .safetensors file, or a sharded checkpoint's *.index.json)"));
    }
    return files;
  }
  if (ends_with(in_path, ".safetensors.index.json")) {
    files.layout = CheckpointLayout::Sharded;
    const fs::path index(in_path);
    files.folder = index.has_parent_path() ? index.parent_path() : fs::path(".");
    files.index_name = index.filename().string();
    read_index(files, in_path);
  }
  return files;
}

// A folder's output: `out_path` as a folder name, without trailing slashes; it must not exist.
fs::path new_folder_path(const std::string& out_path) {
  std::string trimmed = out_path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path path(trimmed);
  const std::string name = path.filename().string();
  if (name.empty() || name == "." || name == ".." || trimmed == "/") {
    throw Error(detail::concat("convert-weights: OUT must name a new folder for the converted checkpoint (got ",
                               out_path, ")"));
  }
  if (ends_with(name, ".safetensors")) {
    throw Error(detail::concat("convert-weights: a model folder converts into a new folder, but OUT ", out_path,
                               " names a .safetensors file (give a folder, or give IN as the folder's .safetensors file)"));
  }
  struct stat status {};
  if (::lstat(trimmed.c_str(), &status) == 0) {
    throw Error(detail::concat("convert-weights: OUT ", out_path, " exists; a model folder converts into a new folder "
                               "(remove it or give another name)"));
  }
  return path;
}

// Copies `from` to `to` through a temporary file and a rename, in kCopyBytes pieces.
void copy_file(const std::string& from, const std::string& to) {
  const InputFile input(from);
  detail::write_file_atomically(
      to,
      [&](detail::AtomicFileSet::Sink& sink) {
        std::string piece;
        for (int64_t at = 0; at < input.size; at += kCopyBytes) {
          read_exactly(input.fd, at, std::min(kCopyBytes, input.size - at), piece, from, input.size);
          sink.write(piece);
        }
        input.check_unchanged();
      },
      "convert-weights");
}

void sync_directory(const fs::path& path) {
  const int fd = ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability only: the rename has been made either way
  ::fsync(fd);
  ::close(fd);
}

// A folder beside `target` that did not exist: "<name>.tmp-<pid>-<8 hex digits>", made with the
// process's umask (as the renamed folder should be).
fs::path make_temp_folder(const fs::path& target) {
  std::random_device entropy;
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (int attempt = 0;; ++attempt) {
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%08x", static_cast<long>(::getpid()), static_cast<unsigned>(entropy()));
    const fs::path temp = parent / (target.filename().string() + suffix);
    if (::mkdir(temp.c_str(), 0777) == 0) return temp;
    if (errno != EEXIST || attempt == 100) {
      throw Error(detail::concat("convert-weights: cannot create a folder beside ", target.string(), " (",
                                 temp.string(), "): ", std::strerror(errno)));
    }
  }
}

}  // namespace

CheckpointConversion convert_checkpoint(const std::string& in_path, const std::string& out_path,
                                        const CheckpointGeometry& geometry, const ConvertOptions& options) {
  CheckpointFiles files = find_checkpoint(in_path);
  CheckpointConversion conversion;
  conversion.layout = files.layout;
  if (files.layout == CheckpointLayout::File) {
    conversion.input = in_path;
    conversion.total = convert_weights(in_path, out_path, geometry, options);
    return conversion;
  }
  conversion.index_name = files.index_name;
  conversion.input = (files.folder / (files.layout == CheckpointLayout::Sharded ? files.index_name : files.files[0])).string();
  const fs::path out_folder = new_folder_path(out_path);

  // Every check before anything is written: each file's header against the index and the geometry.
  for (const std::string& name : files.files) {
    const std::string path = (files.folder / name).string();
    const InputFile input(path);
    const safetensors::Header header = input.header();
    if (files.layout == CheckpointLayout::Sharded) {
      // The index and the shard agree: the tensors it maps to this file are the ones it holds.
      std::unordered_set<std::string> held;
      for (const safetensors::TensorEntry& entry : header.tensors) {
        held.insert(entry.name);
        const auto listed = files.shard_of.find(entry.name);
        if (listed != files.shard_of.end() && listed->second == name) continue;
        throw Error(detail::concat(path, ": holds tensor ", json::quote(entry.name), ", which the index ",
                                   conversion.input, " ",
                                   listed == files.shard_of.end() ? std::string("does not list")
                                                                  : "maps to " + listed->second,
                                   "; nothing was written"));
      }
      for (const std::string& tensor : files.tensors_of.at(name)) {
        if (held.count(tensor) == 0) {
          throw Error(detail::concat(conversion.input, ": weight_map maps tensor ", json::quote(tensor), " to ", name,
                                     ", which does not hold it; nothing was written"));
        }
      }
    }
    ConversionPlan plan = plan_conversion(header, input.size, geometry, options, path);
    conversion.shards.push_back({name, static_cast<int64_t>(plan.plans.size()), plan.result.copied, input.size});
    for (Plan& p : plan.plans) conversion.total.permuted.push_back(std::move(p.tensor));
    conversion.total.copied += plan.result.copied;
    conversion.total.file_bytes += input.size;
  }

  // The folder's other entries: copied, or left out (sub-folders, weights in other files).
  std::error_code error;
  for (fs::directory_iterator it(files.folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name == files.index_name || std::find(files.files.begin(), files.files.end(), name) != files.files.end()) continue;
    std::error_code ignored;
    if (fs::is_directory(it->path(), ignored)) {
      conversion.left_out.push_back(name + "/");
    } else if (regular_file(it->path()) && !weights_file(name)) {
      conversion.copied_files.push_back(name);
    } else {
      conversion.left_out.push_back(name);
    }
  }
  if (error) {
    throw Error(detail::concat("convert-weights: cannot list ", files.folder.string(), ": ", error.message()));
  }
  std::sort(conversion.copied_files.begin(), conversion.copied_files.end());
  std::sort(conversion.left_out.begin(), conversion.left_out.end());
  if (options.dry_run) return conversion;

  // Built in a temporary folder beside OUT and renamed to it: OUT is the whole converted
  // checkpoint or does not exist.
  const fs::path temp = make_temp_folder(out_folder);
  try {
    conversion.total = {};
    for (ShardConversion& shard : conversion.shards) {
      ConvertResult result =
          convert_weights((files.folder / shard.name).string(), (temp / shard.name).string(), geometry, options);
      shard.permuted = static_cast<int64_t>(result.permuted.size());
      shard.copied = result.copied;
      shard.file_bytes = result.file_bytes;
      for (PermutedTensor& t : result.permuted) conversion.total.permuted.push_back(std::move(t));
      conversion.total.copied += result.copied;
      conversion.total.file_bytes += result.file_bytes;
    }
    if (files.layout == CheckpointLayout::Sharded) {
      detail::write_file_atomically((temp / files.index_name).string(), files.index_bytes, "convert-weights");
    }
    for (const std::string& name : conversion.copied_files) {
      copy_file((files.folder / name).string(), (temp / name).string());
    }
    sync_directory(temp);
    // RENAME_NOREPLACE: a folder that appeared at OUT since the check is refused, not replaced.
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, out_folder.c_str(), RENAME_NOREPLACE) != 0) {
      int rename_error = errno;
      if (rename_error == EINVAL || rename_error == ENOSYS) {  // no RENAME_NOREPLACE on this file system
        struct stat status {};
        rename_error = ::lstat(out_folder.c_str(), &status) == 0          ? EEXIST
                       : std::rename(temp.c_str(), out_folder.c_str()) == 0 ? 0
                                                                            : errno;
      }
      if (rename_error != 0) {
        throw Error(detail::concat("convert-weights: cannot rename ", temp.string(), " to ", out_folder.string(), ": ",
                                   std::strerror(rename_error)));
      }
    }
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }
  sync_directory(out_folder.has_parent_path() ? out_folder.parent_path() : fs::path("."));
  return conversion;
}

}  // namespace rotary
