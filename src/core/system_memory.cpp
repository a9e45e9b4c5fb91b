// src/core/system_memory.cpp: memory_ceiling and its cgroup helpers (src/core/system_memory.hpp).
// Sources: proc(5) /proc/[pid]/cgroup; the kernel's cgroup-v2 documentation (memory.max: "max"
// or bytes) and cgroup-v1 memory.txt (memory.limit_in_bytes; unlimited reads as
// PAGE_COUNTER_MAX * PAGE_SIZE, 0x7FFFFFFFFFFFF000 on x86-64).
#include "core/system_memory.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>

#if defined(__linux__)
#include <sys/sysinfo.h>
#endif

namespace rotary::detail {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A limit this large means none (v1's unlimited value is 2^63 less a page).
constexpr int64_t kNoLimitFrom = int64_t{1} << 62;

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

// "/a/b" joined to "/sys/fs/cgroup" as "/sys/fs/cgroup/a/b" ("/" adds nothing).
std::string under(std::string_view root, std::string_view path) {
  std::string joined(root);
  if (!path.empty() && path != "/") {
    if (path.front() != '/') joined += '/';
    joined += path;
  }
  return joined;
}

}  // namespace

std::vector<std::string> cgroup_memory_limit_files(std::string_view proc_self_cgroup) {
  std::vector<std::string> files;
  std::string_view rest = proc_self_cgroup;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    // hierarchy-ID:controller-list:cgroup-path (the path may itself hold ':').
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first), controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (id == "0" && controllers.empty()) {
      files.push_back(under("/sys/fs/cgroup", path) + "/memory.max");
      continue;
    }
    std::string_view list = controllers;
    while (!list.empty()) {
      const size_t comma = list.find(',');
      if (list.substr(0, comma) == "memory") {
        files.push_back(under("/sys/fs/cgroup/memory", path) + "/memory.limit_in_bytes");
        break;
      }
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
  }
  for (const char* root : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (std::find(files.begin(), files.end(), root) == files.end()) files.emplace_back(root);
  }
  return files;
}

std::optional<int64_t> parse_cgroup_memory_limit(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0 || value >= kNoLimitFrom) {
    return std::nullopt;  // "max", no limit, or not a number
  }
  return value;
}

MemoryCeiling memory_ceiling() {
#if defined(__linux__)
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return {};
  const auto saturating = [](long double bytes) {
    return bytes >= static_cast<long double>(kInt64Max) ? kInt64Max : static_cast<int64_t>(bytes);
  };
  const int64_t swap = saturating(static_cast<long double>(info.totalswap) * info.mem_unit);
  MemoryCeiling ceiling{saturating((static_cast<long double>(info.totalram) + info.totalswap) * info.mem_unit),
                        "this machine's memory and swap"};
  for (const std::string& file : cgroup_memory_limit_files(read_small_file("/proc/self/cgroup"))) {
    const std::optional<int64_t> limit = parse_cgroup_memory_limit(read_small_file(file));
    if (!limit) continue;
    const int64_t with_swap = *limit > kInt64Max - swap ? kInt64Max : *limit + swap;
    if (with_swap < ceiling.bytes) ceiling = {with_swap, "this process's cgroup memory limit and swap"};
    break;  // the most specific readable limit
  }
  return ceiling;
#else
  return {};
#endif
}

}  // namespace rotary::detail
