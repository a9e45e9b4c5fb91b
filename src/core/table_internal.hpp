// src/core/table_internal.hpp: what table.cpp, table_stored.cpp and the engine files
// (src/core/engines/) share: the layout of a Stored table's pages (StoredRows) and the engine
// numerics a Precision::Ggml or Precision::Vllm table holds (set by init_ggml / init_vllm, read by
// compute_rows and ggml_rows). Internal to rotary_core (not installed).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "rotary/table.hpp"

namespace rotary {

// One base-256 digit of a position (the exact rows' levels, table.cpp; a stored page's rows).
inline constexpr int kDigitBits = 8;

// Stored rows (docs/design.md, "Table growth"): pages of 256 rows, stored when a call first
// needs a row in them, found through a two-level directory:
//   directory[position >> 20] -> leaf,  leaf[(position >> 8) & 4095] -> page,  row position & 255.
// A page is one block of the position's lowest base-256 digit, so building it is a dense build's
// work per row (one block base per page, then one complex product per entry), and a page at a
// far position costs what a page near 0 costs. 2048 leaves of 4096 pages cover 2^31 positions;
// the directory is 16 KiB, a leaf 32 KiB, a page 256 x 2 x num_pairs floats (128 KiB at 64 pairs).
inline constexpr int kPageRowsLog2 = kDigitBits;
inline constexpr int64_t kPageRows = int64_t{1} << kPageRowsLog2;  // 256
inline constexpr int kLeafPagesLog2 = 12;
inline constexpr int64_t kLeafPages = int64_t{1} << kLeafPagesLog2;  // 4096: 2^20 rows a leaf
inline constexpr int64_t kDirectoryLeaves = (kMaxPosition + 1) >> (kPageRowsLog2 + kLeafPagesLog2);  // 2048

// The pages of a Stored table. Readers follow published pointers (acquire) and never lock: a
// pointer is stored (release) only after what it points to is complete, and never changes or
// goes away before the table does. One writer at a time, under grow_mutex, adds leaves and pages.
struct CosSinTable::StoredRows {
  std::array<std::atomic<std::atomic<float*>*>, kDirectoryLeaves> directory{};  // null: no leaf yet
  std::mutex grow_mutex;
  // The writer's state (under grow_mutex).
  std::vector<std::unique_ptr<std::atomic<float*>[]>> leaves;
  std::vector<std::unique_ptr<float[], void (*)(float*)>> slabs;
  float* slab_next = nullptr;  // the next unused page of the newest slab
  int64_t slab_free_pages = 0;
  int64_t pages = 0;
  std::atomic<int64_t> bytes{static_cast<int64_t>(sizeof(directory))};  // stored_bytes()

  // The row of `position` (in [0, kMaxPosition]), or null when its page is not stored.
  const float* find(int64_t position, int64_t row_floats) const {
    const std::atomic<float*>* leaf =
        directory[static_cast<size_t>(position >> (kPageRowsLog2 + kLeafPagesLog2))].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    const float* page = leaf[(position >> kPageRowsLog2) & (kLeafPages - 1)].load(std::memory_order_acquire);
    if (page == nullptr) return nullptr;
    return page + (position & (kPageRows - 1)) * row_floats;
  }
  // Under grow_mutex: whether page `page` is stored.
  bool has_page(int64_t page) const {
    const std::atomic<float*>* leaf = directory[static_cast<size_t>(page >> kLeafPagesLog2)].load(std::memory_order_relaxed);
    return leaf != nullptr && leaf[page & (kLeafPages - 1)].load(std::memory_order_relaxed) != nullptr;
  }
};

// Pages [first, last), in increasing order when several ranges are given.
struct CosSinTable::PageRange {
  int64_t first = 0, last = 0;
};

// llama.cpp's parameters for a spec, and vLLM's. Every value is the float32 the engine holds.
struct CosSinTable::EngineNumerics {
  // ggml (ggml-cpu ops.cpp ggml_compute_forward_rope_flt / ggml_rope_cache_init / rope_yarn,
  // llama.cpp 0.25.3 in llama-cpp-python 0.3.36).
  float theta_scale = 1.0f;  // powf(freq_base, -2.0f / n_dims)
  float freq_scale = 1.0f;   // 1 / rope scaling factor (linear, YaRN)
  float ext_factor = 0.0f;   // 1 for YaRN (llama_context: yarn_ext_factor), else 0
  float attn_factor = 1.0f;  // cparams.yarn_attn_factor, before rope_yarn's own mscale
  float corr_dims[2] = {0.0f, 0.0f};
  std::vector<float> freq_factors;  // rope_freqs / rope_factors_{short,long}; empty: none
  // vLLM: linear scaling divides the float32 positions (LinearScalingRotaryEmbedding).
  float position_divisor = 1.0f;
  DType cache_dtype = DType::F32;
};

}  // namespace rotary
