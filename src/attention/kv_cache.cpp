// src/attention/kv_cache.cpp: rotary::KvCache (include/rotary/kv_cache.hpp). Appends rotate keys
// with rotary::apply (the fast path) straight into the cache's storage; attend rotates the new
// queries with rotary::apply and calls rotary::attention over a view of the cache; the context
// shift rotates moved keys by the delta in float64 with the table's unscaled row (the header's
// identity), rounding once to storage.
#include "rotary/kv_cache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <shared_mutex>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "core/huge_pages.hpp"
#include "core/system_memory.hpp"
#include "cpu/storage.hpp"

namespace rotary {
namespace {

// A block of `count` zeros. Before the first touch, the block's 2 MiB-aligned interior is
// advised for transparent huge pages (src/core/huge_pages.hpp): a decode
// reads every cached row once per step, and with 4 KiB pages each 4 KiB of K or V is a TLB miss
// and a page the hardware prefetchers stop at. Measured on the AMD EPYC VM (THP in "madvise"
// mode, one thread): a decode step of Llama-3-8B heads through KvCache::attend over
// 32,768 cached tokens, float32 9.18-9.36 -> 7.82-8.01 ms, bfloat16 5.32-5.84 -> 5.08-5.70 ms
// (docs/results/performance/2026-11-25-decode-paced-prefetch.md, "Huge pages for the KV cache").
// `block` is empty (a new cache's): reserve allocates without touching the pages.
void allocate_blocks(std::vector<double>& block, size_t count) {
  block.reserve(count);
  detail::advise_huge_pages(block.data(), count * sizeof(double));
  block.assign(count, 0.0);
}


using detail::concat;

bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// A view of `data` in `layout` with the given named extents and strides (elements).
TensorView layout_view(void* data, DType dtype, Layout layout, const NamedAxes& axes) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.layout = layout;
  switch (layout) {
    case Layout::BSHD:
      view.shape = {axes.batch, axes.seq, axes.heads, axes.dim};
      view.stride_elems = {axes.stride_batch, axes.stride_seq, axes.stride_heads, axes.stride_dim};
      break;
    case Layout::BHSD:
      view.shape = {axes.batch, axes.heads, axes.seq, axes.dim};
      view.stride_elems = {axes.stride_batch, axes.stride_heads, axes.stride_seq, axes.stride_dim};
      break;
    case Layout::SBHD:
      view.shape = {axes.seq, axes.batch, axes.heads, axes.dim};
      view.stride_elems = {axes.stride_seq, axes.stride_batch, axes.stride_heads, axes.stride_dim};
      break;
    case Layout::THD: break;  // refused before
  }
  return view;
}

// Sequence b of a (checked, not THD) view, as a view with batch 1.
TensorView batch_slice(const TensorView& view, int64_t b) {
  NamedAxes axes = named_axes(view);
  char* base = static_cast<char*>(view.data);
  if (base != nullptr) base += b * axes.stride_batch * dtype_size(view.dtype);
  axes.batch = 1;
  return layout_view(base, view.dtype, view.layout, axes);
}

const char* name_of(DType dtype) { return to_string(dtype).data(); }

void check_layout(const TensorView& view, const char* where, const char* name) {
  // The cache is host memory and copies k and v itself: another device is refused before a read.
  if (view.device.kind != DeviceKind::CPU) {
    throw Error(concat(where, ": ", name, " is on ", to_string(view.device), "; the cache holds host memory (cpu only)"));
  }
  const int layout = static_cast<int>(view.layout);
  if (layout < 0 || layout > static_cast<int>(Layout::THD)) {
    throw Error(concat(where, ": ", name, " layout must be bshd, bhsd or sbhd (got ", layout, ")"));
  }
  if (view.layout == Layout::THD) {
    throw Error(concat(where, ": ", name, " layout must be bshd, bhsd or sbhd; the cache keeps its own sequences (got thd)"));
  }
  for (int axis = 0; axis < 4; ++axis) {
    if (view.shape[static_cast<size_t>(axis)] < 0) {
      throw Error(concat(where, ": ", name, " shape must be >= 0 on every axis (got ", view.shape[static_cast<size_t>(axis)],
                         " on axis ", axis, ")"));
    }
  }
  try {
    element_count(view, name);
  } catch (const Error& error) {  // tensor.cpp's "tensor out: ...", with this operation's prefix
    throw Error(concat(where, ": ", error.what()));
  }
}

}  // namespace

KvCache::KvCache(const CosSinTable& table, const KvCacheShape& shape) : table_(&table), shape_(shape) {
  const RopeSpec& spec = table.spec();
  if (spec.axes != PositionAxes::Single) {
    throw Error(concat("KvCache: spec.axes must be single (got ", to_string(spec.axes),
                       "): a token of M-RoPE / 2-D vision has one position per stream, so moving it is not one "
                       "rotation of its key, and the cache keeps one position per slot"));
  }
  if (spec.xpos.has_value()) {
    throw Error(concat("KvCache: spec.xpos must be unset (got scale_base ", spec.xpos->scale_base,
                       "): xPos keys carry the factor zeta^-e(p), e(p) = (p - L//2) / scale_base, which a rotation "
                       "by a position delta does not change, so a context shift could not be exact"));
  }
  if (shape_.v_head_dim == 0) shape_.v_head_dim = shape_.head_dim;
  if (shape_.batch < 1) throw Error(concat("KvCache: shape.batch must be >= 1 (got ", shape_.batch, ")"));
  if (shape_.kv_heads < 1) throw Error(concat("KvCache: shape.kv_heads must be >= 1 (got ", shape_.kv_heads, ")"));
  if (shape_.head_dim < 1) throw Error(concat("KvCache: shape.head_dim must be >= 1 (got ", shape_.head_dim, ")"));
  if (shape_.v_head_dim < 1) throw Error(concat("KvCache: shape.v_head_dim must be >= 1 or 0 for head_dim (got ", shape_.v_head_dim, ")"));
  if (shape_.capacity < 0) throw Error(concat("KvCache: shape.capacity must be >= 0 (got ", shape_.capacity, ")"));
  if (shape_.dtype != DType::F32 && shape_.dtype != DType::BF16 && shape_.dtype != DType::F16) {
    const int value = static_cast<int>(shape_.dtype);
    throw Error(concat("KvCache: shape.dtype must be float32, bfloat16 or float16 (got ",
                       value >= 0 && value <= static_cast<int>(DType::F64) ? std::string(to_string(shape_.dtype))
                                                                            : concat("DType(", value, ")"),
                       ")"));
  }
  if (shape_.rotary_offset < 0) throw Error(concat("KvCache: shape.rotary_offset must be >= 0 (got ", shape_.rotary_offset, ")"));
  if (shape_.rotary_offset > shape_.head_dim - spec.rotary_dim) {
    throw Error(concat("KvCache: shape.rotary_offset + rotary_dim must be <= head_dim ", shape_.head_dim, " (got ",
                       shape_.rotary_offset, " + ", spec.rotary_dim, ")"));
  }
  const double scaling = table.attention_scaling();
  if (!(std::isfinite(scaling) && scaling > 0)) {
    throw Error(concat("KvCache: the table's attention_scaling must be finite and > 0 (got ", scaling, ")"));
  }
  // Bytes of each block, and of the per-slot positions and per-sequence lengths (a huge batch
  // of capacity 0 has no K or V but still a length each), checked against int64.
  int64_t slots = 0, key_elems = 0, value_elems = 0, key_bytes = 0, value_bytes = 0;
  int64_t position_bytes = 0, length_bytes = 0, bookkeeping = 0;
  if (!checked_mul(shape_.batch, shape_.capacity, slots) || !checked_mul(slots, 8, position_bytes) ||
      !checked_mul(shape_.batch, 8, length_bytes) || __builtin_add_overflow(position_bytes, length_bytes, &bookkeeping) ||
      !checked_mul(slots, shape_.kv_heads, slots) ||
      !checked_mul(slots, shape_.head_dim, key_elems) || !checked_mul(slots, shape_.v_head_dim, value_elems) ||
      !checked_mul(key_elems, dtype_size(shape_.dtype), key_bytes) ||
      !checked_mul(value_elems, dtype_size(shape_.dtype), value_bytes) ||
      key_bytes > std::numeric_limits<int64_t>::max() - value_bytes - bookkeeping) {
    throw Error(concat("KvCache: shape.capacity ", shape_.capacity, " with batch ", shape_.batch, ", kv_heads ",
                       shape_.kv_heads, " and head dims ", shape_.head_dim, " / ", shape_.v_head_dim,
                       " must fit in int64 bytes (got an overflow)"));
  }
  // A shape that fits int64 may still be more than the system will give: say so with the shape
  // and the bytes, as a rotary::Error (std::bad_alloc names neither). More than the machine's
  // memory and swap, or the process's cgroup limit and swap, is refused before allocating,
  // whatever the overcommit policy (src/core/system_memory.hpp).
  const int64_t total_bytes = key_bytes + value_bytes + bookkeeping;
  const auto too_large = [&](const std::string& why) {
    return Error(concat("KvCache: shape.capacity ", shape_.capacity, " with batch ", shape_.batch, ", kv_heads ",
                        shape_.kv_heads, " and head dims ", shape_.head_dim, " / ", shape_.v_head_dim, " needs ",
                        total_bytes, " bytes, ", why));
  };
  if (const detail::MemoryCeiling ceiling = detail::memory_ceiling(); ceiling.bytes > 0 && total_bytes > ceiling.bytes) {
    throw too_large(concat("more than ", ceiling.what, " (", ceiling.bytes, " bytes)"));
  }
  try {
    allocate_blocks(keys_, static_cast<size_t>((key_bytes + 7) / 8));
    allocate_blocks(values_, static_cast<size_t>((value_bytes + 7) / 8));
    positions_.assign(static_cast<size_t>(shape_.batch * shape_.capacity), 0);
    lengths_.assign(static_cast<size_t>(shape_.batch), 0);
  } catch (const std::bad_alloc&) {
    throw too_large("more than could be allocated");
  } catch (const std::length_error&) {  // past the vector's max_size on this platform
    throw too_large("more than could be allocated");
  }
}

void KvCache::check_sequence(int64_t sequence, const char* where) const {
  if (sequence < 0 || sequence >= shape_.batch) {
    throw Error(concat(where, ": sequence must be in [0, ", shape_.batch, ") (got ", sequence, ")"));
  }
}

int64_t KvCache::length(int64_t sequence) const {
  std::shared_lock lock(mutex_);
  check_sequence(sequence, "KvCache::length");
  return lengths_[static_cast<size_t>(sequence)];
}

int64_t KvCache::last_position_of(int64_t sequence) const {
  const int64_t n = lengths_[static_cast<size_t>(sequence)];
  return n == 0 ? -1 : positions_[static_cast<size_t>(sequence * shape_.capacity + n - 1)];
}

int64_t KvCache::last_position(int64_t sequence) const {
  std::shared_lock lock(mutex_);
  check_sequence(sequence, "KvCache::last_position");
  return last_position_of(sequence);
}

int64_t KvCache::position(int64_t sequence, int64_t slot) const {
  std::shared_lock lock(mutex_);
  check_sequence(sequence, "KvCache::position");
  const int64_t n = lengths_[static_cast<size_t>(sequence)];
  if (slot < 0 || slot >= n) throw Error(concat("KvCache::position: slot must be in [0, ", n, ") (got ", slot, ")"));
  return positions_[static_cast<size_t>(sequence * shape_.capacity + slot)];
}

int64_t KvCache::key_offset(int64_t b, int64_t h, int64_t slot) const {
  return ((b * shape_.kv_heads + h) * shape_.capacity + slot) * shape_.head_dim;
}
int64_t KvCache::value_offset(int64_t b, int64_t h, int64_t slot) const {
  return ((b * shape_.kv_heads + h) * shape_.capacity + slot) * shape_.v_head_dim;
}

TensorView KvCache::keys() const {
  return contiguous_view(const_cast<double*>(keys_.data()), shape_.dtype, Layout::BHSD,
                         {shape_.batch, shape_.kv_heads, shape_.capacity, shape_.head_dim});
}
TensorView KvCache::values() const {
  return contiguous_view(const_cast<double*>(values_.data()), shape_.dtype, Layout::BHSD,
                         {shape_.batch, shape_.kv_heads, shape_.capacity, shape_.v_head_dim});
}

void KvCache::append(const TensorView& k, const TensorView& v, std::span<const int64_t> positions) {
  constexpr const char* kWhere = "KvCache::append";
  std::unique_lock lock(mutex_);
  check_layout(k, kWhere, "k");
  check_layout(v, kWhere, "v");
  if (k.dtype != shape_.dtype) throw Error(concat(kWhere, ": k dtype must be the cache's ", name_of(shape_.dtype), " (got ", name_of(k.dtype), ")"));
  if (v.dtype != shape_.dtype) throw Error(concat(kWhere, ": v dtype must be the cache's ", name_of(shape_.dtype), " (got ", name_of(v.dtype), ")"));
  if (v.layout != k.layout) throw Error(concat(kWhere, ": v layout must be k's ", to_string(k.layout), " (got ", to_string(v.layout), ")"));
  const NamedAxes ka = named_axes(k), va = named_axes(v);
  if (ka.batch != shape_.batch) throw Error(concat(kWhere, ": k batch must be the cache's ", shape_.batch, " (got ", ka.batch, ")"));
  if (ka.heads != shape_.kv_heads) throw Error(concat(kWhere, ": k heads must be the cache's kv_heads ", shape_.kv_heads, " (got ", ka.heads, ")"));
  if (ka.dim != shape_.head_dim) throw Error(concat(kWhere, ": k head dim must be the cache's head_dim ", shape_.head_dim, " (got ", ka.dim, ")"));
  if (va.batch != ka.batch || va.seq != ka.seq || va.heads != ka.heads) {
    throw Error(concat(kWhere, ": v batch, seq and heads must be k's ", ka.batch, ", ", ka.seq, ", ", ka.heads, " (got ", va.batch,
                       ", ", va.seq, ", ", va.heads, ")"));
  }
  if (va.dim != shape_.v_head_dim) throw Error(concat(kWhere, ": v head dim must be the cache's v_head_dim ", shape_.v_head_dim, " (got ", va.dim, ")"));
  if (va.stride_dim < 0 || va.stride_seq < 0 || va.stride_heads < 0 || va.stride_batch < 0) {
    throw Error(concat(kWhere, ": v strides must be >= 0 (got a negative stride)"));
  }
  if (va.dim > 0 && ka.seq > 0 && v.data == nullptr) throw Error(concat(kWhere, ": v data must not be null for a non-empty tensor (got null)"));
  {
    // The last element's offset, and its byte offset, must fit in int64 (strides may be anything >= 0).
    int64_t last = 0, term = 0;
    bool fits = true;
    for (const auto& [extent, stride] : {std::pair{va.batch, va.stride_batch}, std::pair{va.seq, va.stride_seq},
                                         std::pair{va.heads, va.stride_heads}, std::pair{va.dim, va.stride_dim}}) {
      if (extent > 0) fits = fits && checked_mul(extent - 1, stride, term) && !__builtin_add_overflow(last, term, &last);
    }
    fits = fits && checked_mul(last, dtype_size(v.dtype), term);
    if (!fits) throw Error(concat(kWhere, ": v strides must keep byte offsets within int64 (got an overflow)"));
  }
  const int64_t new_tokens = ka.seq;
  const int64_t batch = shape_.batch;
  if (new_tokens == 0) {
    if (!positions.empty()) throw Error(concat(kWhere, ": positions must be empty for 0 new tokens (got ", positions.size(), " values)"));
    return;
  }

  // Positions: given or the next ones; each sequence's strictly increasing, above its last.
  std::vector<int64_t> all(static_cast<size_t>(batch * new_tokens));
  if (!positions.empty()) {
    if (static_cast<int64_t>(positions.size()) != batch * new_tokens) {
      throw Error(concat(kWhere, ": positions must hold batch x new tokens = ", batch, " x ", new_tokens, " = ", batch * new_tokens,
                         " values, or none for the next positions (got ", positions.size(), ")"));
    }
    if (positions.data() == nullptr) throw Error(concat(kWhere, ": positions must not be null with size ", positions.size(), " (got null)"));
    std::copy(positions.begin(), positions.end(), all.begin());
  }
  int64_t max_position = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = lengths_[static_cast<size_t>(b)];
    if (new_tokens > shape_.capacity - length) {
      throw Error(concat(kWhere, ": k new tokens must fit the capacity ", shape_.capacity, " of sequence ", b, ", which holds ", length,
                         " (got ", new_tokens, ": ", length + new_tokens, " > ", shape_.capacity, ")"));
    }
    int64_t previous = last_position_of(b);
    for (int64_t i = 0; i < new_tokens; ++i) {
      int64_t& p = all[static_cast<size_t>(b * new_tokens + i)];
      if (positions.empty()) {
        p = previous + 1;
      } else if (p <= previous) {
        throw Error(concat(kWhere, ": positions[", b * new_tokens + i, "] of sequence ", b, " must be > ", previous,
                           i == 0 ? ", the sequence's last position" : ", the token before it", " (got ", p, ")"));
      }
      if (p > table_->max_position()) {
        throw Error(concat(kWhere, ": positions[", b * new_tokens + i, "] of sequence ", b, " must be <= the table's max position ",
                           table_->max_position(), " (got ", p, ")"));
      }
      previous = p;
    }
    max_position = std::max(max_position, previous);
    // The sequence's keys are all rotated with the table's frequencies; the whole-sequence
    // recompute at its new length must select the same ones.
    if (!table_->serves_seq_len(previous + 1)) {
      const RopeSpec& spec = table_->spec();
      const bool longrope = spec.scaling.type == ScalingType::LongRope;
      throw Error(concat(
          kWhere, ": positions of sequence ", b, " must keep the frequencies of the cache's table (seq_len ", table_->seq_len(),
          ") (got largest position ", previous, ", seq_len ", previous + 1, "): ",
          longrope ? concat("LongRoPE switches between its short and long factors at original_max_position_embeddings ",
                            spec.original_context(),
                            ", and transformers then rotates every key with the other set; this cache does not re-rotate "
                            "its keys. Build it with a table for the factor set wanted (TableOptions::seq_len)")
                   : concat("dynamic NTK recomputes its frequencies for every length past max_position_embeddings ",
                            spec.max_position_embeddings,
                            ", which would change the rotation of every cached key (not a rotation by a delta); "
                            "this cache refuses to mix two frequency sets")));
    }
  }

  // Check every sequence's rotation before writing anything.
  ApplyOptions apply_options;
  apply_options.rotary_offset = shape_.rotary_offset;
  apply_options.seq_len = max_position + 1;
  std::vector<TensorView> sources(static_cast<size_t>(batch)), destinations(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    sources[static_cast<size_t>(b)] = batch_slice(k, b);
    NamedAxes dst;
    dst.batch = 1;
    dst.seq = new_tokens;
    dst.heads = shape_.kv_heads;
    dst.dim = shape_.head_dim;
    dst.stride_batch = shape_.kv_heads * shape_.capacity * shape_.head_dim;
    dst.stride_seq = shape_.head_dim;
    dst.stride_heads = shape_.capacity * shape_.head_dim;
    dst.stride_dim = 1;
    char* base = reinterpret_cast<char*>(keys_.data()) + key_offset(b, 0, lengths_[static_cast<size_t>(b)]) * dtype_size(shape_.dtype);
    destinations[static_cast<size_t>(b)] = layout_view(base, shape_.dtype, k.layout, dst);
    const std::span<const int64_t> sequence_positions(all.data() + b * new_tokens, static_cast<size_t>(new_tokens));
    check_apply_arguments(sources[static_cast<size_t>(b)], TensorView{}, destinations[static_cast<size_t>(b)], TensorView{},
                          Positions::per_token(sequence_positions), *table_, apply_options);
  }
  for (int64_t b = 0; b < batch; ++b) {
    const std::span<const int64_t> sequence_positions(all.data() + b * new_tokens, static_cast<size_t>(new_tokens));
    apply(sources[static_cast<size_t>(b)], TensorView{}, destinations[static_cast<size_t>(b)], TensorView{},
          Positions::per_token(sequence_positions), *table_, apply_options);
    const int64_t length = lengths_[static_cast<size_t>(b)];
    const int64_t elem = dtype_size(shape_.dtype);
    const char* v_base = static_cast<const char*>(v.data);
    char* cache_values = reinterpret_cast<char*>(values_.data());
    for (int64_t i = 0; i < new_tokens; ++i) {
      for (int64_t h = 0; h < shape_.kv_heads; ++h) {
        char* dst = cache_values + value_offset(b, h, length + i) * elem;
        const int64_t src_offset = b * va.stride_batch + i * va.stride_seq + h * va.stride_heads;
        if (va.stride_dim == 1) {
          std::memcpy(dst, v_base + src_offset * elem, static_cast<size_t>(va.dim * elem));
        } else {
          for (int64_t e = 0; e < va.dim; ++e) {
            std::memcpy(dst + e * elem, v_base + (src_offset + e * va.stride_dim) * elem, static_cast<size_t>(elem));
          }
        }
      }
      positions_[static_cast<size_t>(b * shape_.capacity + length + i)] = all[static_cast<size_t>(b * new_tokens + i)];
    }
    lengths_[static_cast<size_t>(b)] = length + new_tokens;
  }
}

void KvCache::attend(const TensorView& q, const TensorView& out, const KvAttendOptions& options) const {
  constexpr const char* kWhere = "KvCache::attend";
  std::shared_lock lock(mutex_);
  check_layout(q, kWhere, "q");
  check_layout(out, kWhere, "out");
  if (q.dtype != shape_.dtype) throw Error(concat(kWhere, ": q dtype must be the cache's ", name_of(shape_.dtype), " (got ", name_of(q.dtype), ")"));
  const NamedAxes qa = named_axes(q);
  if (qa.batch != shape_.batch) throw Error(concat(kWhere, ": q batch must be the cache's ", shape_.batch, " (got ", qa.batch, ")"));
  if (qa.dim != shape_.head_dim) throw Error(concat(kWhere, ": q head dim must be the cache's head_dim ", shape_.head_dim, " (got ", qa.dim, ")"));
  if (qa.heads % shape_.kv_heads != 0 || qa.heads == 0) {
    throw Error(concat(kWhere, ": q heads must be a positive multiple of the cache's kv_heads ", shape_.kv_heads, " (got ", qa.heads, ")"));
  }
  const int64_t q_len = qa.seq;
  std::vector<int64_t> q_positions(static_cast<size_t>(shape_.batch * q_len));
  std::vector<int64_t> query_offsets(static_cast<size_t>(shape_.batch));
  int64_t seq_len = 1;
  for (int64_t b = 0; b < shape_.batch; ++b) {
    const int64_t length = lengths_[static_cast<size_t>(b)];
    if (q_len > length) {
      throw Error(concat(kWhere, ": q seq must be <= the length ", length, " of sequence ", b,
                         ": the queries are the sequence's last tokens, appended first (got ", q_len, ")"));
    }
    query_offsets[static_cast<size_t>(b)] = length - q_len;
    for (int64_t i = 0; i < q_len; ++i) {
      q_positions[static_cast<size_t>(b * q_len + i)] = positions_[static_cast<size_t>(b * shape_.capacity + length - q_len + i)];
    }
    if (length > 0) seq_len = std::max(seq_len, last_position_of(b) + 1);
  }
  // The rotated queries, contiguous in q's layout.
  const int64_t elements = element_count(q, "q");
  std::vector<double> rotated_storage(static_cast<size_t>((elements * dtype_size(q.dtype) + 7) / 8 + 1));
  TensorView rotated = contiguous_view(rotated_storage.data(), q.dtype, q.layout, q.shape);
  ApplyOptions apply_options;
  apply_options.rotary_offset = shape_.rotary_offset;
  apply_options.seq_len = seq_len;
  NamedAxes cache_axes;
  cache_axes.batch = shape_.batch;
  cache_axes.seq = shape_.capacity;
  cache_axes.heads = shape_.kv_heads;
  cache_axes.stride_batch = shape_.kv_heads * shape_.capacity * shape_.head_dim;
  cache_axes.stride_seq = shape_.head_dim;
  cache_axes.stride_heads = shape_.capacity * shape_.head_dim;
  cache_axes.stride_dim = 1;
  cache_axes.dim = shape_.head_dim;
  const TensorView k_view = layout_view(const_cast<double*>(keys_.data()), shape_.dtype, q.layout, cache_axes);
  cache_axes.dim = shape_.v_head_dim;
  cache_axes.stride_batch = shape_.kv_heads * shape_.capacity * shape_.v_head_dim;
  cache_axes.stride_seq = shape_.v_head_dim;
  cache_axes.stride_heads = shape_.capacity * shape_.v_head_dim;
  const TensorView v_view = layout_view(const_cast<double*>(values_.data()), shape_.dtype, q.layout, cache_axes);
  AttentionOptions attention_options;
  attention_options.scale = options.scale;
  attention_options.mask = options.mask;
  attention_options.window = options.window;
  attention_options.kv_lengths = lengths_;
  attention_options.query_offsets = query_offsets;
  // Check both calls before either runs: a bad out is reported before any work.
  if (elements > 0) {
    check_apply_arguments(q, TensorView{}, rotated, TensorView{}, Positions::per_token(q_positions), *table_, apply_options);
  }
  check_attention_arguments(rotated, k_view, v_view, out, attention_options);
  if (elements > 0) {
    apply(q, TensorView{}, rotated, TensorView{}, Positions::per_token(q_positions), *table_, apply_options);
  }
  attention(rotated, k_view, v_view, out, attention_options);
}

void KvCache::check_shift(int64_t sequence, int64_t n_keep, int64_t n_discard) const {
  constexpr const char* kWhere = "KvCache::shift";
  check_sequence(sequence, kWhere);
  const int64_t length = lengths_[static_cast<size_t>(sequence)];
  if (n_keep < 0) throw Error(concat(kWhere, ": n_keep must be >= 0 (got ", n_keep, ")"));
  if (n_discard < 0) throw Error(concat(kWhere, ": n_discard must be >= 0 (got ", n_discard, ")"));
  if (n_keep > length || n_discard > length - n_keep) {
    throw Error(concat(kWhere, ": n_keep + n_discard must be <= the length ", length, " of sequence ", sequence, " (got ", n_keep,
                       " + ", n_discard, ")"));
  }
  const int64_t moved = length - n_keep - n_discard;
  if (n_discard == 0 || length - n_discard == 0) return;
  const int64_t* pos = positions_.data() + sequence * shape_.capacity;
  // Positions stay strictly increasing: slots increase by >= 1 position each, so a moved slot's
  // position is >= the last kept one's + n_discard + 1 before the shift, > it after.
  const int64_t new_last = moved > 0 ? pos[length - 1] - n_discard : pos[n_keep - 1];
  if (!table_->serves_seq_len(new_last + 1)) {
    throw Error(concat(kWhere, ": n_discard must keep the frequencies of the cache's table (seq_len ", table_->seq_len(),
                       ") (got ", n_discard, ": the sequence's seq_len would become ", new_last + 1,
                       ", for which ", to_string(table_->spec().scaling.type),
                       " selects other frequencies (LongRoPE: the short factors below original_max_position_embeddings; "
                       "dynamic NTK: its base grows with the length), so every kept key would need a rotation "
                       "that is not a rotation by the delta)"));
  }
}

void KvCache::shift_unchecked(int64_t sequence, int64_t n_keep, int64_t n_discard) {
  const int64_t length = lengths_[static_cast<size_t>(sequence)];
  const int64_t moved = length - n_keep - n_discard;
  if (n_discard == 0) return;
  const int64_t num_pairs = table_->num_pairs();
  const int64_t elem = dtype_size(shape_.dtype);
  // R(-d): the table's row at d in float64, divided by attention_scaling (the row holds s cos,
  // s sin; a cached key already carries s once).
  std::vector<double> cos_d(static_cast<size_t>(num_pairs)), sin_d(static_cast<size_t>(num_pairs));
  if (moved > 0 && num_pairs > 0) {
    table_->row_f64(n_discard, cos_d.data(), sin_d.data());
    const double scaling = table_->attention_scaling();
    for (int64_t i = 0; i < num_pairs; ++i) {
      cos_d[static_cast<size_t>(i)] /= scaling;
      sin_d[static_cast<size_t>(i)] /= scaling;
    }
  }
  const bool neox = table_->spec().style == Style::NeoX;
  const int64_t half = num_pairs;
  std::vector<double> row(static_cast<size_t>(shape_.head_dim));
  for (int64_t h = 0; h < shape_.kv_heads; ++h) {
    // Increasing slots: destination n_keep + j < source n_keep + n_discard + j, so no source is
    // overwritten before it is read.
    for (int64_t j = 0; j < moved; ++j) {
      const int64_t src = n_keep + n_discard + j, dst = n_keep + j;
      void* keys = keys_.data();
      const int64_t src_offset = key_offset(sequence, h, src), dst_offset = key_offset(sequence, h, dst);
      for (int64_t e = 0; e < shape_.head_dim; ++e) row[static_cast<size_t>(e)] = cpu::load_element(keys, shape_.dtype, src_offset + e);
      for (int64_t i = 0; i < num_pairs; ++i) {
        const int64_t ia = shape_.rotary_offset + (neox ? i : 2 * i);
        const int64_t ic = shape_.rotary_offset + (neox ? i + half : 2 * i + 1);
        const double a = row[static_cast<size_t>(ia)], c = row[static_cast<size_t>(ic)];
        const double cs = cos_d[static_cast<size_t>(i)], sn = sin_d[static_cast<size_t>(i)];
        // Backward (R(-d)): a' = a C + c S, c' = c C - a S (apply.hpp).
        row[static_cast<size_t>(ia)] = a * cs + c * sn;
        row[static_cast<size_t>(ic)] = c * cs - a * sn;
      }
      for (int64_t e = 0; e < shape_.head_dim; ++e) cpu::store_element(keys, shape_.dtype, dst_offset + e, row[static_cast<size_t>(e)]);
      char* values = reinterpret_cast<char*>(values_.data());
      std::memmove(values + value_offset(sequence, h, dst) * elem, values + value_offset(sequence, h, src) * elem,
                   static_cast<size_t>(shape_.v_head_dim * elem));
    }
  }
  int64_t* pos = positions_.data() + sequence * shape_.capacity;
  for (int64_t j = 0; j < moved; ++j) pos[n_keep + j] = pos[n_keep + n_discard + j] - n_discard;
  lengths_[static_cast<size_t>(sequence)] = length - n_discard;
}

void KvCache::shift(int64_t sequence, int64_t n_keep, int64_t n_discard) {
  std::unique_lock lock(mutex_);
  check_shift(sequence, n_keep, n_discard);
  shift_unchecked(sequence, n_keep, n_discard);
}

void KvCache::shift(int64_t n_keep, int64_t n_discard) {
  std::unique_lock lock(mutex_);
  for (int64_t b = 0; b < shape_.batch; ++b) check_shift(b, n_keep, n_discard);
  for (int64_t b = 0; b < shape_.batch; ++b) shift_unchecked(b, n_keep, n_discard);
}

void KvCache::clear() {
  std::unique_lock lock(mutex_);
  std::fill(lengths_.begin(), lengths_.end(), 0);
}

}  // namespace rotary
