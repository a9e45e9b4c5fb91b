// src/core/system_memory.hpp: how much memory this process could ever be given, for refusing an
// allocation that can never succeed before making it (KvCache). Internal: not installed; included
// as "src/core/system_memory.hpp".
//
// Why: under vm.overcommit_memory = 1, or inside a cgroup with a memory limit, an allocation
// larger than the memory there is succeeds and the first touch of its pages meets the OOM killer:
// a crash, where a too-large request should be an error naming its size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rotary::detail {

struct MemoryCeiling {
  int64_t bytes = 0;  // 0 = unknown: nothing is refused
  std::string what;   // "this machine's memory and swap" or "this process's cgroup memory limit and swap"
};

// Physical memory plus swap (sysinfo), lowered to the cgroup memory limit plus swap when this
// process's cgroup has a lower one. An allocation above it cannot be held by this process.
MemoryCeiling memory_ceiling();

// The files that hold the memory limit of the cgroups named by /proc/self/cgroup's `text`, most
// specific first: cgroup v2 ("0::/path" -> /sys/fs/cgroup/path/memory.max) and v1 ("N:...memory...:
// /path" -> /sys/fs/cgroup/memory/path/memory.limit_in_bytes), then the mount roots (a container
// with a cgroup namespace sees its own cgroup at "/").
std::vector<std::string> cgroup_memory_limit_files(std::string_view proc_self_cgroup);

// A limit file's value: a byte count; nullopt for "max" (v2: none), a v1 "no limit" (2^63 rounded
// down to a page, or more), or text that is not a number.
std::optional<int64_t> parse_cgroup_memory_limit(std::string_view text);

}  // namespace rotary::detail
