// fuzz/kv_cache_ops_fuzz.cpp: rotary::KvCache (include/rotary/kv_cache.hpp) built from fuzz bytes
// and driven by a sequence of operations.
//
// The bytes choose a cache (a table from attention_case.hpp's specs, M-RoPE and xPos included,
// which the cache must refuse; a shape with batch, kv heads, head dims, capacity, dtype and a
// rotary offset, now and then an invalid one), then up to 16 operations: append (k and v of a
// small shape in BSHD / BHSD / SBHD, positions none / given / backwards / past the table / of the
// wrong count, or one field of k or v broken: dtype, layout, an extent, a stride, null or
// misaligned data, k and v the cache's own storage), attend (q and out of a small shape, a mask,
// a window and a scale, or a field broken), shift (one sequence or all, n_keep and n_discard
// small or near the int64 limits), clear, and length / last_position / position queries with
// any sequence and slot.
//
// Last (read after the operations, so older inputs keep their meaning), a poison step: a NaN or
// +-inf written into one element of the keys or values, then one attend.
//
// Properties:
//   - after the poison step, attend's output is non-finite exactly where the reference's is, NaN
//     where it is NaN (require_same_finiteness, attention_case.hpp);
//   - the constructor either builds the cache or throws rotary::Error "KvCache: ... (got ...)";
//   - every operation either returns or throws rotary::Error whose message starts with the
//     operation ("KvCache::append: ", "KvCache::shift: ", ...; attend passes on the checks of
//     rotary::apply and rotary::attention, "apply: " / "attention: ") and names the value, "(got";
//   - an operation that throws leaves the cache exactly as it was: length() and every position()
//     of every sequence, and every byte of keys() and values();
//   - after an append that returns, the lengths grew by the new tokens, the new slots hold the
//     positions given (or the next ones), strictly increasing, and the values bitwise; after a
//     shift, the kept slots are bitwise unchanged, the moved values are bitwise the ones that
//     were n_discard slots later, their positions n_discard lower, and clear empties every
//     sequence;
//   - every buffer the cache reads (k, v, q) and writes (out) is a fresh allocation of exactly
//     the bytes its view reaches (AddressSanitizer catches any access past them), and attend
//     writes only out's elements;
//   - attend's output equals reference::attention's over the cache's own keys() / values() views
//     (kv_lengths = length(b), causal offsets length(b) - q_len), on q rotated by rotary::apply at
//     the positions of the last q_len slots, read through position() — within the bound of
//     attention_args_fuzz.cpp (docs/attention.md "Error analysis" with call-wide maxima). The
//     rotation itself is the same rotary::apply call attend makes (apply_args and
//     tests/cpu/apply_test.cpp check it): what this checks is attend's plumbing (which positions,
//     lengths, offsets, mask and window it hands on) and attention's arithmetic.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "case_support.hpp"
#include "fuzz_support.hpp"
#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "rotary/kv_cache.hpp"
#include "tests/support/attention_bound.hpp"
#include "tests/support/elements.hpp"

namespace rotary::fuzz {
namespace {

struct Stats {
  int64_t caches = 0, refused_caches = 0, ops = 0, ops_thrown = 0, appends = 0, attends = 0, shifts = 0, compared = 0,
          special_attends = 0;
  ~Stats() {
    if (std::getenv("ROTARY_FUZZ_STATS") != nullptr) {
      std::fprintf(stderr,
                   "kv_cache_ops: %lld caches (%lld refused), %lld ops (%lld threw), %lld appends, %lld attends, %lld shifts "
                   "returned, %lld attend outputs compared (%lld attends with a non-finite key or value)\n",
                   static_cast<long long>(caches), static_cast<long long>(refused_caches), static_cast<long long>(ops),
                   static_cast<long long>(ops_thrown), static_cast<long long>(appends), static_cast<long long>(attends),
                   static_cast<long long>(shifts), static_cast<long long>(compared), static_cast<long long>(special_attends));
    }
  }
};
Stats stats;

constexpr int64_t kMaxBacking = int64_t{1} << 20;  // a view reaching further is not run

const CosSinTable& table_for(int spec_choice, int options_choice) {
  static std::map<int, std::unique_ptr<const CosSinTable>> tables;
  std::unique_ptr<const CosSinTable>& table = tables[spec_choice * kAttentionTableOptions + options_choice];
  if (!table) table = std::make_unique<const CosSinTable>(attention_spec(spec_choice), attention_table_options(options_choice));
  return *table;
}

// A view's memory: a fresh allocation of exactly the bytes from its lowest to its highest
// element (negative strides included), filled with the arena pattern; `view.data` points at
// element 0 (plus `misalign` bytes), or is null. False when the view cannot be backed (an
// extent < 0, offsets past int64, more than kMaxBacking bytes): the operation is not run.
struct Backing {
  std::unique_ptr<unsigned char[]> bytes;
  int64_t size = 0;
  int64_t element0 = 0;  // byte offset of element 0

  bool back(TensorView& view, bool null_data, int64_t misalign) {
    int64_t low = 0, high = 0;
    const int rank = layout_rank(view.layout);
    bool empty = false;
    for (int axis = 0; axis < rank; ++axis) {
      const int64_t extent = view.shape[static_cast<size_t>(axis)], stride = view.stride_elems[static_cast<size_t>(axis)];
      if (extent < 0) return false;
      if (extent == 0) empty = true;
      int64_t reach = 0;
      if (__builtin_mul_overflow(extent > 0 ? extent - 1 : 0, stride, &reach)) return false;
      if (reach < 0 ? __builtin_add_overflow(low, reach, &low) : __builtin_add_overflow(high, reach, &high)) return false;
    }
    const int64_t elem = dtype_size(static_cast<int>(view.dtype) >= 0 && static_cast<int>(view.dtype) <= 3 ? view.dtype : DType::F32);
    int64_t span = 0;
    if (__builtin_sub_overflow(high, low, &span) || __builtin_add_overflow(span, 1, &span) || __builtin_mul_overflow(span, elem, &span) ||
        span > kMaxBacking) {
      return false;
    }
    if (empty) span = 0;
    size = span + misalign;
    bytes.reset(new unsigned char[static_cast<size_t>(std::max<int64_t>(size, 1))]);
    static const std::vector<unsigned char> pattern = arena_pattern(static_cast<size_t>(kMaxBacking) + 8);
    std::memcpy(bytes.get(), pattern.data(), static_cast<size_t>(size));
    element0 = -low * elem + misalign;
    view.data = null_data ? nullptr : bytes.get() + element0;
    return true;
  }
};

// Everything observable of the cache: lengths, positions, and the bytes of keys() and values().
struct Snapshot {
  std::vector<int64_t> lengths;
  std::vector<std::vector<int64_t>> positions;
  std::vector<unsigned char> keys, values;

  bool operator==(const Snapshot&) const = default;
};

std::vector<unsigned char> bytes_of(const TensorView& view) {
  const auto* data = static_cast<const unsigned char*>(view.data);
  return std::vector<unsigned char>(data, data + elements_of(view) * dtype_size(view.dtype));
}

Snapshot snapshot(const KvCache& cache) {
  Snapshot s;
  for (int64_t b = 0; b < cache.shape().batch; ++b) {
    s.lengths.push_back(cache.length(b));
    std::vector<int64_t> positions;
    for (int64_t slot = 0; slot < cache.length(b); ++slot) positions.push_back(cache.position(b, slot));
    require(positions.empty() || cache.last_position(b) == positions.back(), "last_position is the last slot's position");
    for (size_t i = 1; i < positions.size(); ++i) require(positions[i] > positions[i - 1], "positions strictly increase with the slot");
    require(static_cast<int64_t>(positions.size()) <= cache.shape().capacity, "a sequence holds at most capacity slots");
    s.positions.push_back(std::move(positions));
  }
  s.keys = bytes_of(cache.keys());
  s.values = bytes_of(cache.values());
  return s;
}

// The bytes of slot `slot` of sequence b, kv head h, in a keys() / values() snapshot.
const unsigned char* slot_bytes(const std::vector<unsigned char>& block, const KvCache& cache, int64_t dim, int64_t b, int64_t h, int64_t slot) {
  const KvCacheShape& shape = cache.shape();
  return block.data() + ((b * shape.kv_heads + h) * shape.capacity + slot) * dim * dtype_size(shape.dtype);
}

void require_error_names_its_argument(const std::string& message, const char* operation) {
  const bool prefixed = starts_with(message, operation) || starts_with(message, "attention: ") || starts_with(message, "apply: ");
  require(prefixed && message.find("(got") != std::string::npos,
          "a refused operation throws rotary::Error naming the operation and the value", message);
}

// Whether the product of the extents fits in int64 (contiguous_view's strides then do too).
bool product_fits(const std::array<int64_t, 4>& shape) {
  int64_t product = 1;
  for (const int64_t extent : shape) {
    if (__builtin_mul_overflow(product, std::max<int64_t>(extent, 1), &product)) return false;
  }
  return true;
}

// One field of a view broken (or none): dtype, layout, an extent, a stride, null or misaligned data.
struct Breakage {
  int kind = 0;
  size_t axis = 0;
  int64_t value = 0;
  bool null_data = false;
  int64_t misalign = 0;

  void apply_to(TensorView& view) {
    switch (kind) {
      case 1: view.dtype = static_cast<DType>(static_cast<uint64_t>(value) % 6); break;
      case 2: view.layout = static_cast<Layout>(static_cast<uint64_t>(value) % 6); break;
      case 3: view.shape[axis] = value; break;
      case 4: view.stride_elems[axis] = value; break;
      case 5: null_data = true; break;
      case 6: misalign = 1 + static_cast<int64_t>(static_cast<uint64_t>(value) % 3); break;
      default: break;
    }
  }
};

Breakage read_breakage(ByteReader& in) {
  Breakage breakage;
  const uint8_t byte = in.u8();
  if (byte < 160) return breakage;  // most views are valid
  breakage.kind = 1 + byte % 6;
  breakage.axis = in.u8() % 4;
  breakage.value = read_value(in);
  return breakage;
}

const std::string kNone;

// Whether `bytes` starts with `expected` (memcmp without its null-pointer precondition).
bool same_bytes(const unsigned char* bytes, const std::vector<unsigned char>& expected) {
  return expected.empty() || std::memcmp(bytes, expected.data(), expected.size()) == 0;
}

// Runs `operation`; returns its error message, or "" when it returned.
template <typename Operation>
std::string attempt(Operation&& operation) {
  try {
    operation();
  } catch (const Error& error) {
    return error.what();
  }
  return kNone;
}

void op_append(KvCache& cache, ByteReader& in) {
  const KvCacheShape& shape = cache.shape();
  const int64_t n = in.u8() % 5;
  const auto layout = static_cast<Layout>(in.u8() % 3);
  if (!product_fits({shape.batch, n, shape.kv_heads, std::max(shape.head_dim, shape.v_head_dim)})) return;  // a huge cache of capacity 0
  TensorView k = contiguous_view(nullptr, shape.dtype, layout, shape_in_layout(layout, shape.batch, n, shape.kv_heads, shape.head_dim));
  TensorView v = contiguous_view(nullptr, shape.dtype, layout, shape_in_layout(layout, shape.batch, n, shape.kv_heads, shape.v_head_dim));
  Breakage k_break = read_breakage(in), v_break = read_breakage(in);
  k_break.apply_to(k);
  v_break.apply_to(v);
  // Positions: none (the next ones), or given with gaps, then maybe one value or the count broken.
  std::vector<int64_t> positions;
  int64_t count = 0;
  const uint8_t mode = in.u8();
  if (mode % 3 != 0) {
    static constexpr int64_t kGap[] = {1, 1, 2, 5, 100, 1000};
    const int64_t gap = kGap[in.u8() % 6];
    for (int64_t b = 0; b < shape.batch; ++b) {
      int64_t p = cache.last_position(b);
      for (int64_t i = 0; i < n; ++i) positions.push_back(p += 1 + (gap > 1 ? in.u8() % gap : 0));
    }
    count = static_cast<int64_t>(positions.size());
    if (mode % 3 == 2) {  // one position or the count broken
      const uint8_t which = in.u8();
      const int64_t value = read_value(in);
      if (which % 2 == 0 && !positions.empty()) positions[which % positions.size()] = value;
      else count = value;
    }
  }
  const bool own_storage = in.u8() == 255;  // k and v are the cache's own keys() and values()

  Backing k_memory, v_memory;
  if (own_storage) {
    k = cache.keys();
    v = cache.values();
  } else if (!k_memory.back(k, k_break.null_data, k_break.misalign) || !v_memory.back(v, v_break.null_data, v_break.misalign)) {
    return;
  }
  const std::span<const int64_t> position_span = backed_span(positions, count);
  const Snapshot before = snapshot(cache);
  const std::vector<unsigned char> k_before = own_storage ? std::vector<unsigned char>{} : std::vector<unsigned char>(k_memory.bytes.get(), k_memory.bytes.get() + k_memory.size);
  const std::vector<unsigned char> v_before = own_storage ? std::vector<unsigned char>{} : std::vector<unsigned char>(v_memory.bytes.get(), v_memory.bytes.get() + v_memory.size);
  ++stats.ops;
  const std::string error = attempt([&] { cache.append(k, v, position_span); });
  if (!own_storage) {
    require(same_bytes(k_memory.bytes.get(), k_before), "append does not write k");
    require(same_bytes(v_memory.bytes.get(), v_before), "append does not write v");
  }
  const Snapshot after = snapshot(cache);
  if (!error.empty()) {
    ++stats.ops_thrown;
    require_error_names_its_argument(error, "KvCache::append: ");
    require(after == before, "a refused append leaves the cache as it was", error);
    return;
  }
  ++stats.appends;
  const NamedAxes ka = named_axes(k), va = named_axes(v);
  for (int64_t b = 0; b < shape.batch; ++b) {
    const auto ub = static_cast<size_t>(b);
    const int64_t old_length = before.lengths[ub];
    require(after.lengths[ub] == old_length + ka.seq, "append adds the new tokens to every sequence");
    for (int64_t i = 0; i < ka.seq; ++i) {
      const int64_t slot = old_length + i;
      const int64_t previous = slot == 0 ? -1 : after.positions[ub][static_cast<size_t>(slot - 1)];
      const int64_t want = position_span.empty() ? previous + 1 : position_span[static_cast<size_t>(b * ka.seq + i)];
      require(after.positions[ub][static_cast<size_t>(slot)] == want, "append stores the positions given, or the next ones",
              "sequence " + std::to_string(b) + " slot " + std::to_string(slot));
      for (int64_t h = 0; h < shape.kv_heads && !own_storage; ++h) {
        const int64_t elem = dtype_size(shape.dtype);
        const unsigned char* stored = slot_bytes(after.values, cache, shape.v_head_dim, b, h, slot);
        for (int64_t e = 0; e < va.dim; ++e) {
          const int64_t index = b * va.stride_batch + i * va.stride_seq + h * va.stride_heads + e * va.stride_dim;
          require(std::memcmp(stored + e * elem, static_cast<const unsigned char*>(v.data) + index * elem, static_cast<size_t>(elem)) == 0,
                  "append copies v bitwise", "sequence " + std::to_string(b) + " slot " + std::to_string(slot));
        }
      }
    }
  }
}

// special: a NaN or inf was written into the cache's keys or values (the poison step below): the
// output's finiteness is compared with the reference's instead of the bound.
void op_attend(const KvCache& cache, ByteReader& in, bool special = false) {
  const KvCacheShape& shape = cache.shape();
  const int64_t q_len = in.u8() % 4;
  int64_t q_heads = 0;
  if (__builtin_mul_overflow(shape.kv_heads, 1 + in.u8() % 2, &q_heads)) return;
  const auto layout = static_cast<Layout>(in.u8() % 3);
  if (!product_fits({shape.batch, q_len, q_heads, std::max(shape.head_dim, shape.v_head_dim)})) return;
  TensorView q = contiguous_view(nullptr, shape.dtype, layout, shape_in_layout(layout, shape.batch, q_len, q_heads, shape.head_dim));
  TensorView out = contiguous_view(nullptr, shape.dtype, layout, shape_in_layout(layout, shape.batch, q_len, q_heads, shape.v_head_dim));
  Breakage q_break = read_breakage(in), out_break = read_breakage(in);
  q_break.apply_to(q);
  out_break.apply_to(out);
  KvAttendOptions options;
  options.mask = in.u8() % 2 == 0 ? Mask::Causal : Mask::None;
  options.window = in.u8() % 4;
  const uint8_t option_byte = in.u8();
  if (option_byte % 4 == 1) options.scale = 0.5;
  if (option_byte >= 200) {  // one option broken
    const int64_t value = read_value(in);
    switch (option_byte % 3) {
      case 0: options.mask = static_cast<Mask>(static_cast<uint64_t>(value) % 3); break;
      case 1: options.window = value; break;
      case 2: options.scale = special_double(value); break;
    }
  }
  const bool out_on_cache = in.u8() == 255;  // out written over the cache's own values()

  Backing q_memory, out_memory;
  if (!q_memory.back(q, q_break.null_data, q_break.misalign)) return;
  if (out_on_cache) {
    out.data = cache.values().data;
  } else if (!out_memory.back(out, out_break.null_data, out_break.misalign)) {
    return;
  }
  const Snapshot before = snapshot(cache);
  const std::vector<unsigned char> q_before(q_memory.bytes.get(), q_memory.bytes.get() + q_memory.size);
  const std::vector<unsigned char> out_before =
      out_on_cache ? std::vector<unsigned char>{} : std::vector<unsigned char>(out_memory.bytes.get(), out_memory.bytes.get() + out_memory.size);
  ++stats.ops;
  const std::string error = attempt([&] { cache.attend(q, out, options); });
  require(same_bytes(q_memory.bytes.get(), q_before), "attend does not write q");
  const Snapshot after = snapshot(cache);
  require(after == before, "attend leaves the cache as it was", error);
  if (!error.empty()) {
    ++stats.ops_thrown;
    require_error_names_its_argument(error, "KvCache::attend: ");
    if (!out_on_cache) require(same_bytes(out_memory.bytes.get(), out_before), "a refused attend writes nothing");
    return;
  }
  ++stats.attends;
  require(!out_on_cache || elements_of(out) == 0, "attend refuses an out over the cache's own values");
  if (out_on_cache) return;
  // Only out's elements changed.
  std::vector<bool> written(static_cast<size_t>(out_memory.size), false);
  if (out.data != nullptr && elements_of(out) > 0) mark_elements(out, out_memory.element0, written);
  for (size_t b = 0; b < written.size(); ++b) {
    require(written[b] || out_memory.bytes[b] == out_before[b], "attend writes only out's elements", "byte " + std::to_string(b));
  }
  if (elements_of(out) == 0) return;

  // The reference: q rotated by rotary::apply at the positions of each sequence's last q_len
  // slots, then reference::attention over keys() / values() with the lengths and offsets.
  const NamedAxes qa = named_axes(q);
  std::vector<int64_t> q_positions, lengths, offsets;
  int64_t seq_len = 1;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t length = cache.length(b);
    lengths.push_back(length);
    offsets.push_back(length - qa.seq);
    for (int64_t i = 0; i < qa.seq; ++i) q_positions.push_back(cache.position(b, length - qa.seq + i));
    if (length > 0) seq_len = std::max(seq_len, cache.last_position(b) + 1);
  }
  std::vector<double> rotated_storage(static_cast<size_t>(elements_of(q) * dtype_size(q.dtype) / 8 + 2));
  const TensorView rotated = contiguous_view(rotated_storage.data(), q.dtype, q.layout, q.shape);
  ApplyOptions apply_options;
  apply_options.rotary_offset = shape.rotary_offset;
  apply_options.seq_len = seq_len;
  apply(q, TensorView{}, rotated, TensorView{}, Positions::per_token(q_positions), cache.table(), apply_options);
  const TensorView keys = cache.keys(), values = cache.values();
  TensorView k_view = keys, v_view = values;
  if (q.layout != Layout::BHSD) {  // the cache's blocks seen in q's layout, as attend sees them
    const NamedAxes kx = named_axes(keys), vx = named_axes(values);
    auto in_layout = [&](const TensorView& block, const NamedAxes& x) {
      TensorView view = block;
      view.layout = q.layout;
      view.shape = shape_in_layout(q.layout, x.batch, x.seq, x.heads, x.dim);
      view.stride_elems = shape_in_layout(q.layout, x.stride_batch, x.stride_seq, x.stride_heads, x.stride_dim);
      return view;
    };
    k_view = in_layout(keys, kx);
    v_view = in_layout(values, vx);
  }
  AttentionOptions attention_options;
  attention_options.scale = options.scale;
  attention_options.mask = options.mask;
  attention_options.window = options.window;
  attention_options.kv_lengths = lengths;
  attention_options.query_offsets = offsets;
  std::vector<double> ref_storage(static_cast<size_t>(out_memory.size / 8 + 2));
  TensorView ref_out = out;
  ref_out.data = reinterpret_cast<unsigned char*>(ref_storage.data()) + out_memory.element0;
  reference::attention(rotated, k_view, v_view, ref_out, attention_options);

  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(shape.head_dim)));
  const double max_a = scale * static_cast<double>(shape.head_dim) * max_abs(rotated, rotated.data) * max_abs_finite(keys, keys.data);
  if (!(max_a <= 0x1p126 && scale * max_abs(rotated, rotated.data) <= 0x1p126)) return;  // scores past float32 (attention_args)
  if (special) {
    ++stats.special_attends;
    stats.compared += require_same_finiteness(out, out.data, ref_out.data);
    return;
  }
  const double arithmetic =
      test::attention_arithmetic_bound(shape.dtype, shape.head_dim, false, max_a, 0.0, shape.capacity, max_abs(values, values.data));
  stats.compared += require_within_attention_bound(out, out.data, ref_out.data, arithmetic);
}

void op_shift(KvCache& cache, ByteReader& in, bool all) {
  const uint8_t mode = in.u8();
  const int64_t sequence = mode < 200 ? in.u8() % (cache.shape().batch + 1) : read_value(in);
  const int64_t n_keep = mode % 4 == 3 ? read_value(in) : in.u8() % 8;
  const int64_t n_discard = mode % 8 == 7 ? read_value(in) : in.u8() % 8;
  const Snapshot before = snapshot(cache);
  ++stats.ops;
  const std::string error = attempt([&] {
    if (all) cache.shift(n_keep, n_discard);
    else cache.shift(sequence, n_keep, n_discard);
  });
  const Snapshot after = snapshot(cache);
  if (!error.empty()) {
    ++stats.ops_thrown;
    require_error_names_its_argument(error, "KvCache::shift: ");
    require(after == before, "a refused shift leaves the cache as it was", error);
    return;
  }
  ++stats.shifts;
  const KvCacheShape& shape = cache.shape();
  const int64_t elem = dtype_size(shape.dtype);
  for (int64_t b = 0; b < shape.batch; ++b) {
    const auto ub = static_cast<size_t>(b);
    if (!all && b != sequence) {
      require(after.lengths[ub] == before.lengths[ub] && after.positions[ub] == before.positions[ub], "a shift of one sequence leaves the others");
      continue;
    }
    const int64_t length = before.lengths[ub];
    require(after.lengths[ub] == length - n_discard, "a shift drops n_discard slots");
    for (int64_t slot = 0; slot < after.lengths[ub]; ++slot) {
      const bool kept = slot < n_keep;
      const int64_t source = kept ? slot : slot + n_discard;
      const int64_t want = before.positions[ub][static_cast<size_t>(source)] - (kept ? 0 : n_discard);
      require(after.positions[ub][static_cast<size_t>(slot)] == want, "a shift moves positions down by n_discard");
      for (int64_t h = 0; h < shape.kv_heads; ++h) {
        require(std::memcmp(slot_bytes(after.values, cache, shape.v_head_dim, b, h, slot),
                            slot_bytes(before.values, cache, shape.v_head_dim, b, h, source), static_cast<size_t>(shape.v_head_dim * elem)) == 0,
                "a shift moves values bitwise");
        if (kept || n_discard == 0) {
          require(std::memcmp(slot_bytes(after.keys, cache, shape.head_dim, b, h, slot),
                              slot_bytes(before.keys, cache, shape.head_dim, b, h, source), static_cast<size_t>(shape.head_dim * elem)) == 0,
                  "a shift leaves kept keys bitwise");
        }
      }
    }
  }
}

void op_query(const KvCache& cache, ByteReader& in) {
  const uint8_t mode = in.u8();
  const int64_t sequence = mode % 2 == 0 ? in.u8() % (cache.shape().batch + 2) - 1 : read_value(in);
  const int64_t slot = mode % 4 < 2 ? in.u8() % (cache.shape().capacity + 2) - 1 : read_value(in);
  const bool valid_sequence = sequence >= 0 && sequence < cache.shape().batch;
  ++stats.ops;
  for (int which = 0; which < 3; ++which) {
    int64_t result = 0;
    const std::string error = attempt([&] {
      if (which == 0) result = cache.length(sequence);
      if (which == 1) result = cache.last_position(sequence);
      if (which == 2) result = cache.position(sequence, slot);
    });
    const bool valid = valid_sequence && (which < 2 || (slot >= 0 && slot < cache.length(sequence)));
    require(error.empty() == valid, "a query throws exactly when its sequence or slot is out of range",
            error + " for sequence " + std::to_string(sequence) + ", slot " + std::to_string(slot));
    if (!error.empty()) require_error_names_its_argument(error, "KvCache::");
  }
}

}  // namespace

int kv_cache_ops_one_input(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const int spec_choice = in.u8() % kAttentionSpecs;
  const int options_choice = in.u8() % kAttentionTableOptions;
  const CosSinTable& table = table_for(spec_choice, options_choice);
  KvCacheShape shape;
  shape.batch = 1 + in.u8() % 3;
  shape.kv_heads = 1 + in.u8() % 2;
  shape.head_dim = 16 + in.u8() % 5;
  shape.v_head_dim = in.u8() % 9;  // 0 = head_dim
  shape.capacity = in.u8() % 41;
  shape.dtype = static_cast<DType>(in.u8() % 3);
  shape.rotary_offset = in.u8() % (shape.head_dim - table.spec().rotary_dim + 1);
  const uint8_t broken = in.u8();
  if (broken >= 224) {  // one shape field near a limit or invalid
    const int64_t value = read_value(in);
    switch (broken % 8) {
      case 0: shape.batch = value; break;
      case 1: shape.kv_heads = value; break;
      case 2: shape.head_dim = value; break;
      case 3: shape.v_head_dim = value; break;
      case 4: shape.capacity = value; break;
      case 5: shape.dtype = static_cast<DType>(static_cast<uint64_t>(value) % 6); break;
      case 6: shape.rotary_offset = value; break;
      case 7: shape.capacity = value & 0xffff; break;  // large but allocatable
    }
  }
  // A valid cache of more than 1 MiB is not built (its allocation is the run's cost, not a
  // finding); one whose bytes overflow int64 is, and must be refused.
  const int64_t v_dim = shape.v_head_dim == 0 ? shape.head_dim : shape.v_head_dim;
  // (The constructor's sum: K and V in the storage type, 8 bytes per slot and per sequence.)
  const int64_t elem = shape.dtype == DType::F32 ? 4 : 2;
  int64_t slots = 0, elems = 0, key_bytes = 0, value_bytes = 0, bookkeeping = 0, bytes = 0;
  const bool overflows = __builtin_mul_overflow(shape.batch, shape.capacity, &slots) || __builtin_mul_overflow(slots, shape.kv_heads, &elems) ||
                         __builtin_mul_overflow(elems, shape.head_dim, &key_bytes) || __builtin_mul_overflow(key_bytes, elem, &key_bytes) ||
                         __builtin_mul_overflow(elems, v_dim, &value_bytes) || __builtin_mul_overflow(value_bytes, elem, &value_bytes) ||
                         __builtin_add_overflow(slots, shape.batch, &bookkeeping) || __builtin_mul_overflow(bookkeeping, 8, &bookkeeping) ||
                         __builtin_add_overflow(key_bytes, value_bytes, &bytes) || __builtin_add_overflow(bytes, bookkeeping, &bytes);
  const bool valid_fields = shape.batch > 0 && shape.kv_heads > 0 && shape.head_dim > 0 && shape.v_head_dim >= 0 && shape.capacity >= 0;
  if (valid_fields && !overflows && bytes > (int64_t{1} << 20)) return 0;
  ++stats.caches;
  std::optional<KvCache> cache;
  const std::string error = attempt([&] { cache.emplace(table, shape); });
  if (!error.empty()) {
    ++stats.refused_caches;
    require(starts_with(error, "KvCache: ") && error.find("(got") != std::string::npos, "the constructor refuses naming the field", error);
    const bool refusable = table.spec().axes != PositionAxes::Single || table.spec().xpos.has_value() || broken >= 224 ||
                           shape.rotary_offset + table.spec().rotary_dim > shape.head_dim;
    require(refusable, "the constructor accepts a valid shape with a single-axis spec without xPos", error);
    return 0;
  }
  require(table.spec().axes == PositionAxes::Single && !table.spec().xpos.has_value(), "the cache refuses M-RoPE, vision and xPos");

  const int num_ops = 1 + in.u8() % 16;
  for (int op = 0; op < num_ops; ++op) {
    switch (in.u8() % 8) {
      case 0:
      case 1:
      case 2: op_append(*cache, in); break;
      case 3: op_attend(*cache, in); break;
      case 4: op_shift(*cache, in, /*all=*/false); break;
      case 5: op_shift(*cache, in, /*all=*/true); break;
      case 6: op_query(*cache, in); break;
      case 7: {
        ++stats.ops;
        cache->clear();
        for (int64_t b = 0; b < cache->shape().batch; ++b) {
          require(cache->length(b) == 0 && cache->last_position(b) == -1, "clear empties every sequence");
        }
        break;
      }
    }
  }
  // The poison step, read after the operations (older inputs end before it and keep their
  // meaning): a NaN, +inf or -inf written into one element of the cache's keys or values (through
  // the keys() / values() views, as a model's NaN would arrive), then one attend whose output's
  // finiteness must be the reference's element by element.
  const uint8_t poison = in.u8();
  if (poison % 4 != 0) {
    const TensorView block = poison / 4 % 2 == 0 ? cache->keys() : cache->values();
    const int64_t elements = elements_of(block);
    if (elements > 0) {
      const int64_t pick = (in.u8() | (in.u8() << 8)) % elements;  // contiguous BHSD: element index = offset
      const double value = poison % 4 == 1 ? std::numeric_limits<double>::quiet_NaN()
                           : poison % 4 == 2 ? std::numeric_limits<double>::infinity()
                                             : -std::numeric_limits<double>::infinity();
      test::store_element(block.data, block.dtype, pick, value);
      op_attend(*cache, in, /*special=*/true);
    }
  }
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::kv_cache_ops_one_input)
