// src/core/table_stored.cpp: the rows a Storage::Stored CosSinTable keeps (docs/design.md,
// "Table growth"): which pages a call needs, their memory (slabs that double, huge pages for
// large ones), the max_bytes check before anything is allocated, and publishing each page to
// readers that never lock. Kept apart from table.cpp, which computes the rows these store.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <span>

#include "core/huge_pages.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "core/table_internal.hpp"

namespace rotary {

namespace {

// Pages are carved from blocks of memory ("slabs") that double with the table up to this size
// (store_pages): few allocations while a table grows densely, and the unused rest of the newest
// slab, the only unused one, stays below this size (and below what is stored, under 2 MiB).
constexpr int64_t kMaxSlabBytes = int64_t{4} << 20;
constexpr int64_t kHugePageBytes = static_cast<int64_t>(detail::kHugePageBytes);

// The bytes allocate_rows takes for `bytes`: whole huge pages from 2 MiB up.
int64_t allocation_bytes(int64_t bytes) {
  return bytes >= kHugePageBytes ? (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes : bytes;
}

// Uninitialized storage for table rows (every row is written before it is published). Large
// slabs ask for transparent huge pages: a 131072 x 64 table is 64 MiB, and with 4 KiB pages the
// first-touch page faults cost as much as computing the rows.
std::unique_ptr<float[], void (*)(float*)> allocate_rows(int64_t bytes) {
  const int64_t allocated = allocation_bytes(bytes);
  if (bytes >= kHugePageBytes) {
    void* memory = std::aligned_alloc(static_cast<size_t>(kHugePageBytes), static_cast<size_t>(allocated));
    if (memory == nullptr) throw std::bad_alloc();
    detail::advise_huge_pages(memory, static_cast<size_t>(allocated));
    return {static_cast<float*>(memory), [](float* p) { std::free(p); }};
  }
  return {new float[static_cast<size_t>(bytes) / sizeof(float)], [](float* p) { delete[] p; }};
}

}  // namespace

bool CosSinTable::is_stored(int64_t position) const {
  if (!stored_ || position < 0 || position > max_position()) return false;
  return stored_->find(position, 2 * num_pairs_) != nullptr;
}

int64_t CosSinTable::stored_bytes() const { return stored_ ? stored_->bytes.load(std::memory_order_acquire) : 0; }

void CosSinTable::reserve_positions(int64_t positions) const {
  if (!stored_ || positions <= size()) return;
  if (positions - 1 > max_position()) check_position(positions - 1, "CosSinTable::reserve_positions");
  const PageRange pages{size() >> kPageRowsLog2, ((positions - 1) >> kPageRowsLog2) + 1};
  store_pages({&pages, 1});
}

void CosSinTable::reserve_rows(std::span<const int64_t> positions) const {
  if (!stored_) return;
  const int64_t row_floats = 2 * num_pairs_;
  std::vector<int64_t> pages;  // of the rows not stored yet
  for (const int64_t position : positions) {
    check_position(position, "CosSinTable::reserve_rows");
    if (stored_->find(position, row_floats) != nullptr) continue;
    const int64_t page = position >> kPageRowsLog2;
    if (pages.empty() || pages.back() != page) pages.push_back(page);
  }
  if (pages.empty()) return;
  if (!std::is_sorted(pages.begin(), pages.end())) std::sort(pages.begin(), pages.end());
  std::vector<PageRange> ranges;
  for (const int64_t page : pages) {
    if (!ranges.empty() && ranges.back().last > page) continue;  // a repeat
    if (!ranges.empty() && ranges.back().last == page) {
      ++ranges.back().last;
    } else {
      ranges.push_back({page, page + 1});
    }
  }
  store_pages(ranges);
}

// Stores the pages of `ranges` (increasing, disjoint) that are not stored yet: all of them, or
// none when they would take the table past max_bytes (checked before anything is allocated).
void CosSinTable::store_pages(std::span<const PageRange> ranges) const {
  StoredRows& rows = *stored_;
  const int64_t row_floats = 2 * num_pairs_;
  const int64_t page_floats = kPageRows * row_floats;
  const int64_t page_bytes = page_floats * static_cast<int64_t>(sizeof(float));
  const auto leaf_bytes = static_cast<int64_t>(kLeafPages * sizeof(std::atomic<float*>));
  const int64_t end_position = max_position() + 1;
  std::lock_guard<std::mutex> lock(rows.grow_mutex);

  // What is missing now (another writer may have stored some of it since the caller looked).
  int64_t new_pages = 0;
  int64_t new_leaves = 0;
  int64_t last_new_page = -1;
  for (const PageRange& range : ranges) {
    for (int64_t page = range.first; page < range.last; ++page) {
      if (rows.has_page(page)) continue;
      const int64_t leaf = page >> kLeafPagesLog2;
      const bool leaf_counted = last_new_page >= 0 && (last_new_page >> kLeafPagesLog2) == leaf;
      if (!leaf_counted && rows.directory[static_cast<size_t>(leaf)].load(std::memory_order_relaxed) == nullptr) {
        ++new_leaves;
      }
      ++new_pages;
      last_new_page = page;
    }
  }
  if (new_pages == 0) return;
  // Pages beyond the newest slab's free ones come from a new slab: those pages, and at least as
  // many as the table stores already, up to kMaxSlabBytes, so that slabs double while a table
  // grows. Its unused rest is below kMaxSlabBytes (a slab of 2 MiB or more is rounded up to whole
  // huge pages, and the rounding is usable pages too) and, under 2 MiB, below what is stored.
  const int64_t pages_past_slab = std::max<int64_t>(0, new_pages - rows.slab_free_pages);
  int64_t slab_bytes = 0;
  if (pages_past_slab > 0) {
    const int64_t doubling = std::clamp<int64_t>(rows.pages, 1, std::max<int64_t>(1, kMaxSlabBytes / page_bytes));
    slab_bytes = allocation_bytes(std::max(pages_past_slab, doubling) * page_bytes);
  }
  const int64_t total_bytes = rows.bytes.load(std::memory_order_relaxed) + new_leaves * leaf_bytes + slab_bytes;
  if (total_bytes > options_.max_bytes) {
    const int64_t last_row = std::min((last_new_page + 1) * kPageRows, end_position) - 1;
    throw Error(detail::concat("CosSinTable: storing ", new_pages, " more pages (", kPageRows, " rows x ", num_pairs_,
                               " pairs each, up to position ", last_row, ") needs ", total_bytes,
                               " bytes in all, more than max_bytes ", options_.max_bytes,
                               " (use Storage::OnTheFly for very long contexts, or raise max_bytes)"));
  }

  std::unique_ptr<float[], void (*)(float*)> new_slab(nullptr, [](float*) {});
  if (slab_bytes > 0) new_slab = allocate_rows(slab_bytes);
  for (const PageRange& range : ranges) {
    for (int64_t page = range.first; page < range.last; ++page) {
      if (rows.has_page(page)) continue;
      std::atomic<std::atomic<float*>*>& leaf_slot = rows.directory[static_cast<size_t>(page >> kLeafPagesLog2)];
      std::atomic<float*>* leaf = leaf_slot.load(std::memory_order_relaxed);
      if (leaf == nullptr) {
        rows.leaves.push_back(std::make_unique<std::atomic<float*>[]>(kLeafPages));  // value-initialized: null
        leaf = rows.leaves.back().get();
        rows.bytes.fetch_add(leaf_bytes, std::memory_order_relaxed);
        leaf_slot.store(leaf, std::memory_order_release);
      }
      if (rows.slab_free_pages == 0) {
        rows.slab_free_pages = slab_bytes / page_bytes;
        rows.slab_next = new_slab.get();
        rows.slabs.push_back(std::move(new_slab));
        rows.bytes.fetch_add(slab_bytes, std::memory_order_relaxed);
      }
      float* rows_of_page = rows.slab_next;
      rows.slab_next += page_floats;
      --rows.slab_free_pages;
      const int64_t first_row = page << kPageRowsLog2;
      compute_rows(first_row, std::min(first_row + kPageRows, end_position), rows_of_page);
      // Publish: the page's rows are complete before any reader can find them.
      leaf[page & (kLeafPages - 1)].store(rows_of_page, std::memory_order_release);
      ++rows.pages;
    }
  }
  // The stored prefix [0, size()) grows over the pages now stored from its end on.
  int64_t prefix = size_.load(std::memory_order_relaxed);
  while (prefix < end_position && rows.has_page(prefix >> kPageRowsLog2)) {
    prefix = std::min(((prefix >> kPageRowsLog2) + 1) << kPageRowsLog2, end_position);
  }
  size_.store(prefix, std::memory_order_release);
}

const float* CosSinTable::stored_row(int64_t position) const {
  if (!stored_) throw Error("CosSinTable::stored_row: the table stores no rows (Storage::OnTheFly)");
  const float* row = position >= 0 && position <= max_position() ? stored_->find(position, 2 * num_pairs_) : nullptr;
  if (row == nullptr) {
    throw Error(detail::concat("CosSinTable::stored_row: position must be a stored row (see is_stored(); "
                               "reserve_rows() stores rows) (got ", position, ")"));
  }
  return row;
}

}  // namespace rotary
