// fuzz/cos_sin_fuzz.cpp: rotary::check_cos_sin_arguments and rotary::apply_cos_sin (the explicit
// cos/sin kernel behind the Python drop-in) on calls built from fuzz bytes.
//
// The bytes first choose a valid-looking call: a layout, dtypes for x, out and cos/sin, a small
// shape, a rotary_dim, in place or not, pairing, direction, rounding, and whether cos/sin
// broadcast over the batch. Then up to 6 edits each set one field (a shape entry, a stride, a
// data offset, a dtype, a layout, null data, or an enum argument) to a small, raw or limit value
// (apply_case.hpp's read_value), so that the checks see every rule broken alone and in pairs.
//
// Properties:
//   - apply_cos_sin either returns or throws rotary::Error "apply: ..."; when it throws, no byte
//     of the arena has changed; when check_cos_sin_arguments rejects the views, apply_cos_sin
//     rejects the call with the same message (or an earlier one about an enum argument);
//   - a call it accepts, small enough to back with memory, runs on a buffer exactly as long as the
//     views' extents (AddressSanitizer catches any access past them) and writes no byte outside
//     out's elements.
// Results are compared with the formula by tests/cpu/apply_cos_sin_test.cpp.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apply_case.hpp"  // kArenaBytes
#include "case_support.hpp"  // ByteReader, read_value, arena_pattern, span_bytes, mark_elements
#include "fuzz_support.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"

namespace rotary::fuzz {
namespace {

struct CosSinCase {
  std::array<TensorView, 4> views{};  // x, out, cos, sin
  std::array<int64_t, 4> offset_bytes{};
  std::array<bool, 4> null_data{};
  Style style = Style::NeoX;
  Direction direction = Direction::Forward;
  Rounding rounding = Rounding::Once;

  void bind(unsigned char* arena) {
    for (size_t v = 0; v < 4; ++v) views[v].data = null_data[v] ? nullptr : arena + offset_bytes[v];
  }
};

CosSinCase decode(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  CosSinCase c;
  const auto layout = static_cast<Layout>(in.u8() % 4);
  const auto x_type = static_cast<DType>(in.u8() % 4);
  const auto table_type = static_cast<DType>(in.u8() % 4);
  const int64_t batch = in.u8() % 4;
  const int64_t seq = in.u8() % 7;
  const int64_t heads = in.u8() % 5;
  const int64_t dim = 2 * (in.u8() % 9);
  const int64_t rotary_dim = 2 * (in.u8() % 9);
  const uint8_t flags = in.u8();
  const bool in_place = (flags & 1) != 0;
  c.style = (flags & 2) != 0 ? Style::GPTJ : Style::NeoX;
  c.direction = (flags & 4) != 0 ? Direction::Backward : Direction::Forward;
  c.rounding = (flags & 8) != 0 ? Rounding::LikeTorch : Rounding::Once;
  const bool broadcast_batch = (flags & 16) != 0;
  const bool out_type_differs = (flags & 32) != 0;

  const bool thd = layout == Layout::THD;
  std::array<int64_t, 4> shape{};
  switch (layout) {
    case Layout::BSHD: shape = {batch, seq, heads, dim}; break;
    case Layout::BHSD: shape = {batch, heads, seq, dim}; break;
    case Layout::SBHD: shape = {seq, batch, heads, dim}; break;
    case Layout::THD: shape = {seq, heads, dim, 1}; break;
  }
  const int64_t tokens = thd ? seq : batch * seq;
  const int64_t table_batch = thd || broadcast_batch ? 1 : batch;
  const DType out_type = out_type_differs && !in_place ? static_cast<DType>((static_cast<int>(x_type) + 1) % 4) : x_type;
  int64_t next = 0;
  auto place = [&](size_t v, DType dtype, Layout view_layout, std::array<int64_t, 4> view_shape, int64_t elements) {
    c.views[v] = contiguous_view(nullptr, dtype, view_layout, view_shape);
    c.offset_bytes[v] = next;
    next += (elements * dtype_size(dtype) + 63) / 64 * 64;
  };
  place(0, x_type, layout, shape, tokens * heads * dim);
  place(1, out_type, layout, shape, tokens * heads * dim);
  place(2, table_type, Layout::BSHD, {table_batch, seq, 1, rotary_dim}, table_batch * seq * rotary_dim);
  place(3, table_type, Layout::BSHD, {table_batch, seq, 1, rotary_dim}, table_batch * seq * rotary_dim);
  if (in_place) c.offset_bytes[1] = c.offset_bytes[0];

  const int num_edits = in.u8() % 7;
  for (int e = 0; e < num_edits; ++e) {
    const uint8_t kind = in.u8();
    const uint8_t target = in.u8();
    const size_t v = target % 4;
    const size_t axis = (target >> 2) % 4;
    const int64_t value = read_value(in);
    switch (kind % 10) {
      case 0: c.views[v].shape[axis] = value; break;
      case 1: c.views[v].stride_elems[axis] = value; break;
      case 2:
        c.offset_bytes[v] = static_cast<int64_t>(static_cast<uint64_t>(value) % static_cast<uint64_t>(kArenaBytes));
        break;
      case 3: c.views[v].dtype = static_cast<DType>(static_cast<uint64_t>(value) % 6); break;   // 4, 5: invalid
      case 4: c.views[v].layout = static_cast<Layout>(static_cast<uint64_t>(value) % 6); break;  // 4, 5: invalid
      case 5: c.null_data[v] = !c.null_data[v]; break;
      case 6: c.style = static_cast<Style>(static_cast<uint64_t>(value) % 4); break;             // 2, 3: invalid
      case 7: c.direction = static_cast<Direction>(static_cast<uint64_t>(value) % 4); break;
      case 8: c.rounding = static_cast<Rounding>(static_cast<uint64_t>(value) % 4); break;
      case 9:  // out on x or a few bytes past it: exact alias, partial overlap, misalignment
        c.offset_bytes[1] = std::min<int64_t>(kArenaBytes - 1,
                                              c.offset_bytes[0] + static_cast<int64_t>(static_cast<uint64_t>(value) % 64));
        break;
    }
  }
  return c;
}

std::string call(const CosSinCase& c) {
  try {
    apply_cos_sin(c.views[0], c.views[1], c.views[2], c.views[3],
                  {.style = c.style, .direction = c.direction, .rounding = c.rounding, .name = "x"});
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

void run_accepted(CosSinCase& c, const std::vector<unsigned char>& arena) {
  int64_t end = 1;
  int64_t total_elements = 0;
  for (size_t v = 0; v < 4; ++v) {
    if (c.null_data[v]) continue;
    const int64_t elements = element_count(c.views[v], "fuzz");  // checked: no overflow
    if (elements == 0) continue;
    total_elements += std::min<int64_t>(elements, int64_t{1} << 40);
    const int64_t span = span_bytes(c.views[v]);
    if (span > kArenaBytes - c.offset_bytes[v]) return;  // not backed by the arena: nothing to run
    end = std::max(end, c.offset_bytes[v] + span);
  }
  if (total_elements > (int64_t{1} << 16)) return;
  std::vector<bool> written(static_cast<size_t>(end), false);
  if (!c.null_data[1] && element_count(c.views[1], "fuzz") > 0) mark_elements(c.views[1], c.offset_bytes[1], written);
  const std::vector<unsigned char> before(arena.begin(), arena.begin() + end);
  std::unique_ptr<unsigned char[]> buffer(new unsigned char[static_cast<size_t>(end)]);
  std::memcpy(buffer.get(), before.data(), before.size());
  c.bind(buffer.get());
  const std::string error = call(c);
  require(error.empty(), "apply_cos_sin runs every call check_cos_sin_arguments accepts", error);
  for (size_t b = 0; b < before.size(); ++b) {
    if (written[b] || buffer[b] == before[b]) continue;
    require(false, "apply_cos_sin writes only out's elements", "changed byte " + std::to_string(b));
  }
}

}  // namespace

int cos_sin_one_input(const uint8_t* data, size_t size) {
  CosSinCase c = decode(data, size);
  static const std::vector<unsigned char> arena = arena_pattern(static_cast<size_t>(kArenaBytes), 777);
  std::vector<unsigned char> work = arena;
  c.bind(work.data());

  std::string check_error;
  try {
    check_cos_sin_arguments(c.views[0], c.views[1], c.views[2], c.views[3], "x");
  } catch (const Error& error) {
    check_error = error.what();
    require(starts_with(check_error, "apply: "), "argument errors start with \"apply: \"", check_error);
  }
  const bool enums_valid = (c.style == Style::NeoX || c.style == Style::GPTJ) &&
                           (c.direction == Direction::Forward || c.direction == Direction::Backward) &&
                           (c.rounding == Rounding::Once || c.rounding == Rounding::LikeTorch);
  if (!check_error.empty() || !enums_valid) {
    const std::string error = call(c);
    require(starts_with(error, "apply: "), "apply_cos_sin rejects what the checks reject", error);
    if (enums_valid) require(error == check_error, "the same message as the checks", error + " vs " + check_error);
    require(work == arena, "a rejected call writes nothing", error);
    return 0;
  }
  run_accepted(c, arena);
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::cos_sin_one_input)
