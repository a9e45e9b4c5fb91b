// tests/support/cpu_scope.hpp: scope guards for tests that force a SIMD target or change the
// thread count; each restores the process-wide setting however the scope ends.
#pragma once

#include <string>

#include "rotary/apply.hpp"

namespace rotary::test {

// Forces a SIMD target for a scope; restores the automatic choice on exit.
class ForcedTarget {
 public:
  explicit ForcedTarget(const std::string& name) { force_cpu_target(name); }
  ~ForcedTarget() { force_cpu_target(""); }
  ForcedTarget(const ForcedTarget&) = delete;
  ForcedTarget& operator=(const ForcedTarget&) = delete;
};

// Restores num_threads() on exit.
class SavedThreadCount {
 public:
  SavedThreadCount() : saved_(num_threads()) {}
  ~SavedThreadCount() { set_num_threads(saved_); }
  SavedThreadCount(const SavedThreadCount&) = delete;
  SavedThreadCount& operator=(const SavedThreadCount&) = delete;

 private:
  int saved_;
};

}  // namespace rotary::test
