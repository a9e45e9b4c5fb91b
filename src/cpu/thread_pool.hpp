// src/cpu/thread_pool.hpp: the worker threads of rotary::apply and apply_cos_sin (internal to
// rotary_cpu): set_num_threads() / num_threads() (include/rotary/apply.hpp) size one
// process-wide pool, and cpu::parallel_rows (kernels.hpp) splits a call's rows over it.
//
// One call at a time: the pool runs one split call, and a second caller whose call is large
// enough to split waits until the first is done (a global mutex). That is intended: the pool
// already has a thread per core, so two split calls at once would only share the same cores
// and the same memory bandwidth, each thread now switching between calls. Calls too small to
// split (a decode step) run on the calling thread and never wait. docs/design.md, "Threads",
// gives the measurement.
#pragma once

#include <cstdint>
#include <functional>

namespace rotary::cpu {

// The pool's thread count before set_num_threads(): $ROTARY_NUM_THREADS if set (an integer in
// [1, 256], else rotary::Error), else the hardware's thread count.
int default_threads();

}  // namespace rotary::cpu
