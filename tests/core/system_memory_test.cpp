// tests/core/system_memory_test.cpp: the memory ceiling a too-large allocation is refused above
// (src/core/system_memory.hpp): which cgroup files name the limit, and how a limit reads.
#include "core/system_memory.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/sysinfo.h>
#endif

namespace rotary::detail {
namespace {

using ::testing::ElementsAre;

TEST(SystemMemory, CgroupFilesFollowProcSelfCgroupMostSpecificFirst) {
  // cgroup v2: one line "0::path".
  EXPECT_THAT(cgroup_memory_limit_files("0::/user.slice/user-1000.slice/session-2.scope\n"),
              ElementsAre("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope/memory.max",
                          "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  // cgroup v1 (this project's VMs): the memory controller's line, among others; a namespace root.
  EXPECT_THAT(cgroup_memory_limit_files("9:name=systemd:/\n5:devices:/\n4:memory:/process_api/04c4\n3:cpuset:/\n0::/\n"),
              ElementsAre("/sys/fs/cgroup/memory/process_api/04c4/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max",
                          "/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  // memory shares a line with other controllers; a path holding ':'.
  EXPECT_THAT(cgroup_memory_limit_files("7:cpu,memory,pids:/a:b\n"),
              ElementsAre("/sys/fs/cgroup/memory/a:b/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max",
                          "/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  // Nothing readable: the mount roots alone; a malformed line is skipped.
  EXPECT_THAT(cgroup_memory_limit_files("garbage\n"),
              ElementsAre("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"));
}

TEST(SystemMemory, LimitsReadAsBytesAndNoLimitAsNone) {
  EXPECT_EQ(parse_cgroup_memory_limit("4294967296\n"), 4294967296);
  EXPECT_EQ(parse_cgroup_memory_limit("0"), 0);
  EXPECT_EQ(parse_cgroup_memory_limit("max\n"), std::nullopt);                  // v2: no limit
  EXPECT_EQ(parse_cgroup_memory_limit("9223372036854771712\n"), std::nullopt);  // v1: no limit
  EXPECT_EQ(parse_cgroup_memory_limit(""), std::nullopt);                      // unreadable
  EXPECT_EQ(parse_cgroup_memory_limit("12abc"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("-1"), std::nullopt);
  EXPECT_EQ(parse_cgroup_memory_limit("99999999999999999999"), std::nullopt);   // past int64
}

#if defined(__linux__)
TEST(SystemMemory, CeilingIsAtMostTheMachinesMemoryAndSwap) {
  struct sysinfo info {};
  ASSERT_EQ(sysinfo(&info), 0);
  const int64_t machine = (static_cast<int64_t>(info.totalram) + static_cast<int64_t>(info.totalswap)) * info.mem_unit;
  const MemoryCeiling ceiling = memory_ceiling();
  EXPECT_GT(ceiling.bytes, 0);
  EXPECT_LE(ceiling.bytes, machine);
  EXPECT_THAT(ceiling.what, ::testing::AnyOf("this machine's memory and swap", "this process's cgroup memory limit and swap"));
  if (ceiling.what == "this machine's memory and swap") {
    EXPECT_EQ(ceiling.bytes, machine);
  }
}
#endif

}  // namespace
}  // namespace rotary::detail
