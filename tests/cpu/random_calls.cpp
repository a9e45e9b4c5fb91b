// tests/cpu/random_calls.cpp: drawing random apply() calls, running them and comparing with the
// reference (tests/cpu/random_calls.hpp, where the tolerances are derived).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <tuple>
#include <vector>
#include "tests/cpu/random_calls.hpp"

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "cpu/kernels.hpp"  // cpu::set_max_head_groups: both head orders on every machine
#include "tests/support/spec_builder.hpp"

namespace rotary::random_calls {
namespace {

using reference::TableValues;

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// ---- element storage ----------------------------------------------------------------------------

// dtype_size(), inline (the checks below run per element).
inline int64_t element_size(DType dtype) { return dtype == DType::F64 ? 8 : (dtype == DType::F32 ? 4 : 2); }

double load(const unsigned char* base, DType dtype, int64_t index) {
  const unsigned char* at = base + index * element_size(dtype);
  switch (dtype) {
    case DType::F32: {
      float f = 0;
      std::memcpy(&f, at, sizeof f);
      return f;
    }
    case DType::BF16: {
      uint16_t u = 0;
      std::memcpy(&u, at, sizeof u);
      return bf16_to_float(u);
    }
    case DType::F16: {
      uint16_t u = 0;
      std::memcpy(&u, at, sizeof u);
      return f16_to_float(u);
    }
    case DType::F64: {
      double v = 0;
      std::memcpy(&v, at, sizeof v);
      return v;
    }
  }
  return 0;
}

bool same_bits(const unsigned char* a, const unsigned char* b, DType dtype, int64_t index) {
  const int64_t size = element_size(dtype);
  a += index * size;
  b += index * size;
  switch (size) {
    case 2: {
      uint16_t x = 0, y = 0;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      return x == y;
    }
    case 4: {
      uint32_t x = 0, y = 0;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, b, 4);
      return x == y;
    }
    default: {
      uint64_t x = 0, y = 0;
      std::memcpy(&x, a, 8);
      std::memcpy(&y, b, 8);
      return x == y;
    }
  }
}

// One unit in the last place of the output format at magnitude v (at least its smallest
// subnormal).
double format_ulp(DType dtype, double v) {
  int precision = 23;
  double smallest = 0x1p-149;
  switch (dtype) {
    case DType::F32: break;
    case DType::BF16: precision = 7, smallest = 0x1p-133; break;
    case DType::F16: precision = 10, smallest = 0x1p-24; break;
    case DType::F64: precision = 52, smallest = 0x1p-1074; break;
  }
  v = std::fabs(v);
  if (!(v > 0) || !std::isfinite(v)) return smallest;
  return std::max(std::ldexp(1.0, std::ilogb(v) - precision), smallest);
}

// The named axes of a layout in its axis order (THD: batch first, extent 1, never stepped).
std::array<int, 4> layout_axes(Layout layout) {
  switch (layout) {
    case Layout::BSHD: return {kBatch, kSeq, kHeads, kDim};
    case Layout::BHSD: return {kBatch, kHeads, kSeq, kDim};
    case Layout::SBHD: return {kSeq, kBatch, kHeads, kDim};
    case Layout::THD: return {kBatch, kSeq, kHeads, kDim};
  }
  return {kBatch, kSeq, kHeads, kDim};
}

TensorView make_view(unsigned char* data, Layout layout, const ViewPlan& plan) {
  if (!plan.present()) return TensorView{};
  TensorView view;
  view.data = data + plan.offset * dtype_size(plan.dtype);
  view.dtype = plan.dtype;
  view.layout = layout;
  const std::array<int, 4> axes = layout_axes(layout);
  const int first = layout == Layout::THD ? 1 : 0;  // THD has no batch axis
  for (int k = first; k < 4; ++k) {
    view.shape[static_cast<size_t>(k - first)] = plan.extent[static_cast<size_t>(axes[static_cast<size_t>(k)])];
    view.stride_elems[static_cast<size_t>(k - first)] = plan.stride[static_cast<size_t>(axes[static_cast<size_t>(k)])];
  }
  return view;
}

std::string dims_text(const std::array<int64_t, 4>& v) {
  return "[" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + "," +
         std::to_string(v[3]) + "]";
}

// The stream pair i reads, from the rules in spec.hpp (independent of pair_streams()).
int stream_of_pair(const RopeSpec& spec, int64_t i) {
  if (spec.axes == PositionAxes::Vision2D) return i < spec.rotary_dim / 4 ? 0 : 1;
  if (spec.axes != PositionAxes::MRope) return 0;
  const auto [t, h, w] = spec.mrope.pairs;
  if (spec.mrope.assignment == MRopeAssignment::Chunked) return i < t ? 0 : (i < t + h ? 1 : 2);
  if (i % 3 == 1 && i < 3 * h) return 1;
  if (i % 3 == 2 && i < 3 * w) return 2;
  return 0;
}

std::string spec_text(const RopeSpec& spec) {
  std::ostringstream out;
  out << "rotary_dim " << spec.rotary_dim << ", " << to_string(spec.style) << ", theta " << spec.theta_base << ", "
      << to_string(spec.scaling.type);
  const Scaling& s = spec.scaling;
  if (s.type == ScalingType::Yarn) {
    out << " (factor " << s.factor.value_or(0) << ", original " << s.original_max_position_embeddings;
    if (s.attention_factor) out << ", attention_factor " << *s.attention_factor;
    if (s.mscale) out << ", mscale " << *s.mscale << "/" << s.mscale_all_dim.value_or(0);
    if (!s.truncate) out << ", truncate false";
    out << ")";
  }
  if (s.type == ScalingType::Proportional) out << " (partial_rotary_factor " << spec.partial_rotary_factor << ")";
  out << ", max_position_embeddings " << spec.max_position_embeddings;
  if (spec.axes == PositionAxes::MRope) {
    out << ", mrope " << to_string(spec.mrope.assignment) << " [" << spec.mrope.pairs[0] << ", "
        << spec.mrope.pairs[1] << ", " << spec.mrope.pairs[2] << "]";
  }
  if (spec.axes == PositionAxes::Vision2D) out << ", vision2d";
  if (spec.xpos) out << ", xpos scale_base " << spec.xpos->scale_base;
  return out.str();
}

// Rotated pair counts: everything up to 48 (head_dim 96), with extra weight on odd counts (SIMD
// tails) and on multiples of 8 (whole vectors).
int64_t draw_pairs(Rng& rng) {
  const int64_t r = rng.uniform(0, 99);
  if (r < 40) return rng.uniform(1, 48);
  if (r < 70) return rng.pick(std::vector<int64_t>{3, 5, 7, 11, 13, 17, 23});  // rotary_dim 6, 10, 14, 22, ...
  return rng.pick(std::vector<int64_t>{8, 16, 24, 32, 40, 48});
}

std::string list_text(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "}";
  return out.str();
}
const char* const kRoleNames[] = {"q", "k", "q_out", "k_out", "v"};

// A position for a token of the family: small, medium, around 2^24, past it, near 2^31 - 1 or
// anywhere, as the table allows; for xPos within L//2 +- 3000 (|e| <= 6).
int64_t draw_position(Rng& rng, const Config& c) {
  const Family& f = *c.family;
  const int64_t limit = f.position_limit;
  if (f.spec.xpos) {
    const int64_t half = (c.options.xpos_length > 0 ? c.options.xpos_length : f.spec.max_position_embeddings) / 2;
    return rng.uniform(std::max<int64_t>(0, half - 3000), std::min(limit, half + 3000));
  }
  constexpr int64_t k24 = int64_t{1} << 24;
  int64_t p = 0;
  switch (rng.uniform(0, 9)) {
    case 0: case 1: case 2: p = rng.uniform(0, 63); break;
    case 3: case 4: p = rng.uniform(0, 20000); break;
    case 5: p = k24 + rng.uniform(-64, 64); break;
    case 6: p = rng.uniform(k24, kMaxPosition); break;
    case 7: p = limit - rng.uniform(0, 64); break;
    default: p = rng.uniform(0, limit); break;
  }
  return std::clamp<int64_t>(p, 0, limit);
}

TensorView view_in(Buffers& buffers, const Config& c, const ViewPlan& plan) {
  if (!plan.present()) return TensorView{};
  return make_view(buffers[static_cast<size_t>(plan.buffer)].data(), c.layout, plan);
}


}  // namespace

uint64_t seed_of(const std::string& target) {
  uint64_t hash = 1469598103934665603u;  // FNV-1a
  for (const char ch : target) hash = (hash ^ static_cast<unsigned char>(ch)) * 1099511628211u;
  return hash % 1000000u;
}

void store(unsigned char* base, DType dtype, int64_t index, double value) {
  unsigned char* at = base + index * element_size(dtype);
  switch (dtype) {
    case DType::F32: {
      const auto f = static_cast<float>(value);
      std::memcpy(at, &f, sizeof f);
      return;
    }
    case DType::BF16: {
      const uint16_t u = float_to_bf16(static_cast<float>(value));
      std::memcpy(at, &u, sizeof u);
      return;
    }
    case DType::F16: {
      const uint16_t u = float_to_f16(static_cast<float>(value));
      std::memcpy(at, &u, sizeof u);
      return;
    }
    case DType::F64: std::memcpy(at, &value, sizeof value); return;
  }
}

std::string hex_bits(const unsigned char* base, DType dtype, int64_t index) {
  uint64_t raw = 0;
  std::memcpy(&raw, base + index * dtype_size(dtype), static_cast<size_t>(dtype_size(dtype)));
  std::ostringstream out;
  out << "0x" << std::hex << raw;
  return out.str();
}

int streams_of(const RopeSpec& spec) {
  return spec.axes == PositionAxes::MRope ? 3 : (spec.axes == PositionAxes::Vision2D ? 2 : 1);
}

Family draw_family(uint64_t seed) {
  Rng rng(seed);
  Family family;
  family.seed = seed;
  RopeSpec& spec = family.spec;
  spec.name = "apply_test";
  const int64_t axes = rng.uniform(0, 99);
  spec.axes = axes < 70 ? PositionAxes::Single : (axes < 85 ? PositionAxes::MRope : PositionAxes::Vision2D);
  spec.style = rng.coin() ? Style::NeoX : Style::GPTJ;
  spec.theta_base = rng.pick(std::vector<double>{10000.0, 500000.0, 1000000.0});
  spec.max_position_embeddings = 4096;
  const int64_t scheme = spec.axes == PositionAxes::Vision2D ? 0 : rng.uniform(0, 99);
  int64_t pairs = draw_pairs(rng);
  if (spec.axes == PositionAxes::Vision2D) pairs = 2 * rng.uniform(1, 24);  // rotary_dim % 4 == 0
  spec.rotary_dim = 2 * pairs;
  spec.head_dim = spec.rotary_dim;
  if (scheme >= 55 && scheme < 80) {
    Scaling& s = spec.scaling;
    s.type = ScalingType::Yarn;
    spec.max_position_embeddings = 16384;
    s.original_max_position_embeddings = 4096;
    switch (rng.uniform(0, 2)) {
      case 0:  // explicit attention factor
        s.factor = 4.0;
        s.attention_factor = 1.25;
        break;
      case 1:  // DeepSeek-style mscale ratio
        s.factor = 40.0;
        s.mscale = 1.0;
        s.mscale_all_dim = 0.5;
        break;
      default:  // gpt-oss-style fractional range, the 0.1 ln(s) + 1 formula
        s.factor = 32.0;
        s.truncate = false;
        break;
    }
  } else if (scheme >= 80) {
    spec.scaling.type = ScalingType::Proportional;
    spec.partial_rotary_factor = static_cast<double>(rng.uniform(0, pairs)) / static_cast<double>(pairs);
  }
  if (spec.axes == PositionAxes::Single && rng.percent(18)) spec.xpos = XPos{512.0};
  if (spec.axes == PositionAxes::MRope) {
    // Random sections summing to the pair count (a section may be empty).
    int64_t cut1 = rng.uniform(0, pairs), cut2 = rng.uniform(0, pairs);
    if (cut1 > cut2) std::swap(cut1, cut2);
    spec.mrope.pairs = {cut1, cut2 - cut1, pairs - cut2};
    spec.mrope.assignment = rng.coin() ? MRopeAssignment::Chunked : MRopeAssignment::Interleaved;
  }
  TableOptions& options = family.table_options;
  options.precision = rng.percent(30) ? Precision::HFCompat : Precision::Exact;
  const int64_t storage = rng.uniform(0, 99);
  if (storage < 40) {  // stored, grown by the calls: the pages of their positions, up to 2^31 - 1
    options.storage = Storage::Stored;
    options.initial_positions = rng.coin() ? 0 : rng.uniform(1, 300);
    family.position_limit = kMaxPosition;
  } else if (storage < 50) {  // a fixed table: the calls' positions stay below its length
    options.storage = Storage::Stored;
    options.fixed_positions = rng.uniform(16, 3000);
    family.position_limit = options.fixed_positions - 1;
  } else {  // on the fly: any position up to 2^31 - 1
    options.storage = Storage::OnTheFly;
    family.position_limit = kMaxPosition;
  }
  std::ostringstream text;
  text << "family seed " << seed << ": " << spec_text(spec) << "; table " << to_string(options.precision) << ", "
       << (options.storage == Storage::OnTheFly ? "on the fly"
                                                 : (options.fixed_positions > 0
                                                        ? "fixed " + std::to_string(options.fixed_positions) + " rows"
                                                        : "stored, initial " + std::to_string(options.initial_positions)));
  family.text = text.str();
  return family;
}

std::string Config::describe() const {
  std::ostringstream out;
  out << family->text << "\nconfig seed " << seed << ": " << to_string(layout);
  if (layout == Layout::THD) {
    out << " cu_seqlens " << list_text(cu_seqlens);
  } else {
    out << " batch " << batch << " seq " << seq;
  }
  out << "; q " << q_heads << " heads x " << q_dim << " " << to_string(q_dtype) << " -> " << to_string(q_out_dtype);
  if (has_k()) {
    out << "; k " << k_heads << " heads x " << k_dim << " " << to_string(k_dtype) << " -> " << to_string(k_out_dtype);
  } else {
    out << "; no k";
  }
  out << "; " << (in_place ? "in place" : "out of place") << ", " << to_string(options.direction)
      << ", rotary_offset " << options.rotary_offset;
  if (family->spec.xpos) out << ", xpos_length " << options.xpos_length;
  out << "; positions ";
  switch (source) {
    case Source::Arange: out << "none (arange)"; break;
    case Source::PerToken: out << "per_token " << list_text(per_token); break;
    case Source::SequenceOffsets: out << "sequence_offsets " << list_text(offsets); break;
  }
  out << "; " << (fast_first ? "apply() ran first" : "reference ran first") << "\n" << placement;
  return out.str();
}

void place(Config& c, Rng* rng, DType dtype, int64_t dim, std::vector<Member> members) {
  Physical physical;
  physical.order = layout_axes(c.layout);
  bool interleave = false;
  int64_t shift = 0;  // elements before the first view: the views' alignment
  if (rng != nullptr) {
    shift = rng->uniform(0, 15);
    // Mostly the layout's own axis order; sometimes batch, seq and heads in another order
    // (heads outside tokens, ...); rarely the dim axis not innermost, or every other element.
    const int64_t order = rng->uniform(0, 99);
    if (order < 10) {
      std::shuffle(physical.order.begin(), physical.order.begin() + 3, rng->engine());
    } else if (order < 13) {
      std::shuffle(physical.order.begin(), physical.order.end(), rng->engine());
    }
    for (int64_t& pad : physical.pad) pad = rng->percent(40) ? rng->uniform(1, 5) : 0;
    physical.inner_step = rng->percent(3) ? 2 : 1;
    bool same_heads = members.size() > 1;
    for (const Member& m : members) same_heads = same_heads && m.heads == members[0].heads;
    interleave = same_heads && rng->coin();
    std::shuffle(members.begin(), members.end(), rng->engine());
  }
  int64_t slots = 0;
  for (const Member& m : members) slots += m.heads;
  const std::array<int64_t, 4> extent = {c.batch, c.seq, slots, dim};
  std::array<int64_t, 4> stride{};
  int64_t running = physical.inner_step;
  for (int k = 3; k >= 0; --k) {
    const auto axis = static_cast<size_t>(physical.order[static_cast<size_t>(k)]);
    stride[axis] = running;
    running *= extent[axis] + physical.pad[axis];
  }
  const int buffer = static_cast<int>(c.buffer_dtypes.size());
  std::ostringstream text;
  text << "buffer " << buffer << " " << to_string(dtype) << ": views from element " << shift
       << ", named strides (b,s,h,d) " << dims_text(stride)
       << (interleave ? ", heads interleaved:" : ", heads blocked:");
  int64_t last = 0;
  int64_t first_slot = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    const Member& member = members[m];
    const int64_t first = interleave ? static_cast<int64_t>(m) : first_slot;
    const int64_t step = interleave ? static_cast<int64_t>(members.size()) : 1;
    first_slot += member.heads;
    text << " " << kRoleNames[member.role] << "@" << first;
    if (step > 1) text << "+" << step << "n";  // streamed: GCC 12 warns (-Wrestrict) on the string sum
    if (member.role == 4) continue;
    ViewPlan plan;
    plan.buffer = buffer;
    plan.dtype = dtype;
    plan.offset = shift + first * stride[kHeads];
    plan.extent = {c.batch, c.seq, member.heads, member.role % 2 == 0 ? c.q_dim : c.k_dim};
    plan.stride = stride;
    plan.stride[kHeads] *= step;
    if (plan.count() > 0) {
      last = std::max(last, plan.index(plan.extent[0] - 1, plan.extent[1] - 1, plan.extent[2] - 1, plan.extent[3] - 1));
    }
    (member.role == 0 ? c.q : member.role == 1 ? c.k : member.role == 2 ? c.q_out : c.k_out) = plan;
  }
  // Tight: the furthest element is the buffer's last, so an over-read past a view is out of bounds.
  c.buffer_dtypes.push_back(dtype);
  c.buffer_elements.push_back(last + 1);
  text << " (" << last + 1 << " elements)\n";
  c.placement += text.str();
}

void plan_tensors(Config& c, Rng* rng) {
  const bool can_fuse_in = c.has_k() && c.q_dim == c.k_dim && c.q_dtype == c.k_dtype;
  const bool fuse_in = rng != nullptr && can_fuse_in && rng->percent(40);
  std::vector<Member> qkv = {{0, c.q_heads}, {1, c.k_heads}, {4, c.k_heads}};
  if (c.in_place) {
    if (fuse_in) {
      place(c, rng, c.q_dtype, c.q_dim, qkv);
    } else {
      place(c, rng, c.q_dtype, c.q_dim, {{0, c.q_heads}});
      if (c.has_k()) place(c, rng, c.k_dtype, c.k_dim, {{1, c.k_heads}});
    }
    c.q_out = c.q;
    c.k_out = c.k;
    return;
  }
  const bool all_same = can_fuse_in && c.q_out_dtype == c.q_dtype && c.k_out_dtype == c.q_dtype;
  if (fuse_in && all_same && rng->percent(25)) {
    qkv.push_back({2, c.q_heads});
    qkv.push_back({3, c.k_heads});
    place(c, rng, c.q_dtype, c.q_dim, qkv);
    return;
  }
  if (fuse_in) {
    place(c, rng, c.q_dtype, c.q_dim, qkv);
  } else {
    place(c, rng, c.q_dtype, c.q_dim, {{0, c.q_heads}});
    if (c.has_k()) place(c, rng, c.k_dtype, c.k_dim, {{1, c.k_heads}});
    // Inputs may have stride 0 (a broadcast view: one head read as all heads, one token as all
    // tokens), outputs not.
    for (ViewPlan* input : {&c.q, &c.k}) {
      if (rng == nullptr || !c.may_broadcast || !input->present() || !rng->percent(4)) continue;
      const auto axis = static_cast<size_t>(rng->pick(std::vector<int>{kBatch, kSeq, kHeads}));
      input->stride[axis] = 0;
      c.placement += std::string(input == &c.q ? "q" : "k") + " broadcast: stride 0 on named axis " +
                     std::to_string(axis) + "\n";
    }
  }
  const bool can_fuse_out = c.has_k() && c.q_dim == c.k_dim && c.q_out_dtype == c.k_out_dtype;
  if (rng != nullptr && can_fuse_out && rng->percent(30)) {
    place(c, rng, c.q_out_dtype, c.q_dim, {{2, c.q_heads}, {3, c.k_heads}});
  } else {
    place(c, rng, c.q_out_dtype, c.q_dim, {{2, c.q_heads}});
    if (c.has_k()) place(c, rng, c.k_out_dtype, c.k_dim, {{3, c.k_heads}});
  }
}

Config draw_config(const Family& family, uint64_t seed, Constraints constraints) {
  Rng rng(seed);
  Config c;
  c.seed = seed;
  c.family = &family;
  const RopeSpec& spec = family.spec;
  c.layout = rng.pick(std::vector<Layout>{Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD});
  c.options.direction = rng.coin() ? Direction::Forward : Direction::Backward;
  // Head dims up to 96 (or rotary_dim): the rotated block at rotary_offset, then a tail.
  const int64_t room = std::max<int64_t>(96 - spec.rotary_dim, 0);
  c.options.rotary_offset = room > 0 && rng.coin() ? rng.uniform(1, room) : 0;
  const int64_t tail_room = room - c.options.rotary_offset;
  c.q_dim = c.options.rotary_offset + spec.rotary_dim + (tail_room > 0 && rng.coin() ? rng.uniform(1, tail_room) : 0);
  c.k_dim = rng.percent(75) ? c.q_dim : rng.uniform(c.options.rotary_offset + spec.rotary_dim, std::max<int64_t>(96, spec.rotary_dim));
  // Heads: GQA (k heads divide q heads), MQA (1), or no k.
  c.q_heads = rng.uniform(1, 6);
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= c.q_heads; ++d) {
    if (c.q_heads % d == 0) divisors.push_back(d);
  }
  c.k_heads = rng.percent(85) ? rng.pick(divisors) : 0;
  // Tokens.
  if (c.layout == Layout::THD) {
    const int64_t sequences = rng.uniform(1, 4);
    c.cu_seqlens = {0};
    for (int64_t n = 0; n < sequences; ++n) c.cu_seqlens.push_back(c.cu_seqlens.back() + (rng.percent(20) ? 0 : rng.uniform(1, 9)));
    c.batch = 1;
    c.seq = c.cu_seqlens.back();
  } else {
    c.batch = rng.uniform(1, 3);
    c.seq = rng.uniform(1, 9);
  }
  // Dtypes: mostly the same in and out; some mixed (bf16 -> f32, f32 -> f16, ...); a few f64.
  const std::vector<DType> narrow = {DType::F32, DType::F32, DType::BF16, DType::BF16, DType::F16, DType::F16};
  auto draw_dtype = [&] { return rng.percent(5) ? DType::F64 : rng.pick(narrow); };
  c.q_dtype = draw_dtype();
  c.k_dtype = rng.percent(10) ? draw_dtype() : c.q_dtype;
  c.in_place = !constraints.out_of_place_same_dtype && rng.percent(35);
  const bool mixed = !c.in_place && !constraints.out_of_place_same_dtype && rng.percent(20);
  c.q_out_dtype = mixed ? draw_dtype() : c.q_dtype;
  c.k_out_dtype = mixed ? (rng.coin() ? c.q_out_dtype : draw_dtype()) : c.k_dtype;
  if (spec.xpos) {
    const int64_t half_default = spec.max_position_embeddings / 2;
    c.options.xpos_length = rng.coin() && half_default <= family.position_limit
                                ? 0
                                : rng.uniform(1, std::min<int64_t>(8192, 2 * family.position_limit + 1));
  }
  // Positions.
  const int streams = streams_of(spec);
  const int64_t source = rng.uniform(0, 99);
  if (streams > 1) {
    c.source = source < 80 ? Source::PerToken : Source::Arange;
  } else {
    c.source = source < 50 ? Source::PerToken : (source < 80 ? Source::SequenceOffsets : Source::Arange);
  }
  if (spec.xpos && c.source == Source::Arange) c.source = Source::PerToken;  // arange would put e near -16
  if (c.source == Source::PerToken) {
    c.per_token.resize(static_cast<size_t>(streams * c.tokens()));
    for (int64_t& p : c.per_token) p = draw_position(rng, c);
    if (streams == 3 && rng.percent(30)) {  // text tokens in M-RoPE: t = h = w
      for (int64_t t = 0; t < c.tokens(); ++t) {
        c.per_token[static_cast<size_t>(c.tokens() + t)] = c.per_token[static_cast<size_t>(2 * c.tokens() + t)] =
            c.per_token[static_cast<size_t>(t)];
      }
    }
  } else if (c.source == Source::SequenceOffsets) {
    for (const auto& [first, length] : c.sequences()) {
      if (length == 0) {
        // An empty THD segment reads no position: its offset is never checked, nor used.
        c.offsets.push_back(rng.pick(std::vector<int64_t>{-5, kMaxPosition + 1, int64_t{1} << 40, 7}));
        continue;
      }
      const int64_t p = draw_position(rng, c);
      c.offsets.push_back(std::max<int64_t>(0, std::min(p, family.position_limit - (length - 1))));
    }
  }
  c.fast_first = rng.coin();
  c.may_broadcast = !constraints.out_of_place_same_dtype;  // InPlaceEqualsOutOfPlace reuses the inputs in place
  plan_tensors(c, &rng);
  return c;
}

Config plain_config(const Family& family, Layout layout, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                    int64_t dim, DType dtype) {
  Config c;
  c.family = &family;
  c.layout = layout;
  c.batch = layout == Layout::THD ? 1 : batch;
  c.seq = seq;
  if (layout == Layout::THD) c.cu_seqlens = {0, seq};
  c.q_heads = q_heads;
  c.k_heads = k_heads;
  c.q_dim = c.k_dim = dim;
  c.q_dtype = c.k_dtype = c.q_out_dtype = c.k_out_dtype = dtype;
  return c;
}

Family family_of(const RopeSpec& spec, TableOptions options) {
  Family family;
  family.spec = spec;
  family.table_options = std::move(options);
  family.position_limit = family.table_options.fixed_positions > 0 ? family.table_options.fixed_positions - 1
                          : family.table_options.storage == Storage::Stored ? 12000
                                                                            : kMaxPosition;
  family.text = "hand-written: " + spec_text(spec);
  return family;
}

RopeSpec text_spec(int64_t rotary_dim, Style style) {
  return test::rope_spec({.name = "apply_test", .head_dim = rotary_dim, .style = style});
}

Buffers make_buffers(const Config& c) {
  FastRng rng(c.seed ^ 0x5EEDF00Du);
  Buffers buffers;
  for (size_t i = 0; i < c.buffer_dtypes.size(); ++i) {
    Bytes bytes(static_cast<size_t>(c.buffer_elements[i] * dtype_size(c.buffer_dtypes[i])));
    for (size_t at = 0; at < bytes.size(); at += 8) {
      const uint64_t word = rng.next();
      std::memcpy(bytes.data() + at, &word, std::min<size_t>(8, bytes.size() - at));
    }
    buffers.push_back(std::move(bytes));
  }
  for (const ViewPlan* plan : {&c.q, &c.k}) {
    if (!plan->present()) continue;
    unsigned char* base = buffers[static_cast<size_t>(plan->buffer)].data();
    plan->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
      store(base, plan->dtype, plan->index(b, s, h, d), rng.value());
    });
  }
  return buffers;
}

std::optional<std::string> run(const Config& c, const CosSinTable& table, Buffers& buffers, bool fast) {
  const TensorView q = view_in(buffers, c, c.q), k = view_in(buffers, c, c.k);
  const TensorView q_out = view_in(buffers, c, c.q_out), k_out = view_in(buffers, c, c.k_out);
  const Positions positions = c.positions();
  try {
    if (fast) {
      apply(q, k, q_out, k_out, positions, table, c.options);
    } else {
      reference::apply(q, k, q_out, k_out, positions, table, c.options, TableValues::TableFloat32);
    }
  } catch (const std::exception& error) {
    return std::string(error.what());
  }
  return std::nullopt;
}

void check_results(const Config& c, const CosSinTable& table, const Buffers& initial, const Buffers& fast,
                   const Buffers& ref, Problems& problems) {
  const RopeSpec& spec = table.spec();
  // 1. Nothing outside the output views changed (gaps, v slots, inputs of out-of-place calls).
  for (size_t i = 0; i < initial.size(); ++i) {
    std::vector<char> covered(static_cast<size_t>(c.buffer_elements[i]), 0);
    for (const ViewPlan* plan : {&c.q_out, &c.k_out}) {
      if (plan->buffer != static_cast<int>(i)) continue;
      plan->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { covered[static_cast<size_t>(plan->index(b, s, h, d))] = 1; });
    }
    const DType dtype = c.buffer_dtypes[i];
    for (int64_t e = 0; e < c.buffer_elements[i]; ++e) {
      if (covered[static_cast<size_t>(e)]) continue;
      if (!same_bits(fast[i].data(), initial[i].data(), dtype, e)) {
        problems.add("apply() changed buffer " + std::to_string(i) + " element " + std::to_string(e) +
                     ", outside the output views: " + hex_bits(initial[i].data(), dtype, e) + " -> " +
                     hex_bits(fast[i].data(), dtype, e));
      }
      if (!same_bits(ref[i].data(), initial[i].data(), dtype, e)) {
        problems.add("harness: the reference changed buffer " + std::to_string(i) + " element " + std::to_string(e));
      }
    }
  }
  // 2. The outputs. Table rows at every token's positions, as the kernel sees them (float32).
  const int64_t pairs = table.num_pairs(), rotary_dim = 2 * pairs, offset = c.options.rotary_offset;
  const std::vector<int64_t> positions = c.token_positions();
  std::vector<float> cos_rows(positions.size() * static_cast<size_t>(pairs));
  std::vector<float> sin_rows(cos_rows.size());
  for (size_t r = 0; r < positions.size(); ++r) {
    table.row(positions[r], cos_rows.data() + r * static_cast<size_t>(pairs), sin_rows.data() + r * static_cast<size_t>(pairs));
  }
  for (const bool is_q : {true, false}) {
    const ViewPlan& in = is_q ? c.q : c.k;
    const ViewPlan& out = is_q ? c.q_out : c.k_out;
    if (!in.present()) continue;
    const unsigned char* in_base = initial[static_cast<size_t>(in.buffer)].data();
    const unsigned char* fast_base = fast[static_cast<size_t>(out.buffer)].data();
    const unsigned char* ref_base = ref[static_cast<size_t>(out.buffer)].data();
    const char* name = is_q ? "q_out" : "k_out";
    out.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
      const int64_t token = b * c.seq + s;
      const int64_t index = out.index(b, s, h, d);
      const double got = load(fast_base, out.dtype, index);
      const double want = load(ref_base, out.dtype, index);
      auto where = [&] {
        std::ostringstream text;
        text << name << "(b " << b << ", s " << s << ", h " << h << ", d " << d << ") at position "
             << positions[static_cast<size_t>(token)];
        return text.str();
      };
      const bool identical = same_bits(fast_base, ref_base, out.dtype, index);
      if (d < offset || d >= offset + rotary_dim) {
        if (!identical) {
          problems.add(where() + ", passed through: " + hex_bits(fast_base, out.dtype, index) + ", reference " +
                       hex_bits(ref_base, out.dtype, index));
        }
        return;
      }
      if (identical && std::isfinite(got)) return;  // within any tolerance
      // The pair and its inputs.
      const int64_t j = d - offset;
      int64_t pair = 0, index_a = 0, index_c = 0;
      if (spec.style == Style::NeoX) {
        pair = j % pairs;
        index_a = offset + pair;
        index_c = offset + pair + pairs;
      } else {
        pair = j / 2;
        index_a = offset + 2 * pair;
        index_c = index_a + 1;
      }
      const double a = load(in_base, in.dtype, in.index(b, s, h, index_a));
      const double cc = load(in_base, in.dtype, in.index(b, s, h, index_c));
      const int stream = stream_of_pair(spec, pair);
      const size_t row = static_cast<size_t>(stream * c.tokens() + token) * static_cast<size_t>(pairs) + static_cast<size_t>(pair);
      double cos_value = cos_rows[row], sin_value = sin_rows[row];
      double xpos_relative = 0;  // (u + delta_f), see the top
      if (spec.xpos) {
        const int64_t length = c.options.xpos_length > 0 ? c.options.xpos_length : spec.max_position_embeddings;
        const double e = static_cast<double>(positions[static_cast<size_t>(token)] - length / 2) / spec.xpos->scale_base;
        const double zeta = (2.0 * static_cast<double>(pair) + 0.4 * static_cast<double>(rotary_dim)) /
                            (1.4 * static_cast<double>(rotary_dim));
        const double factor = std::pow(zeta, is_q ? e : -e);
        cos_value *= factor;
        sin_value *= factor;
        xpos_relative = kU + (4.0 + 2.0 * std::fabs(e) * (1.0 + std::fabs(std::log(zeta)))) * kU;
      }
      if (!std::isfinite(a) || !std::isfinite(cc)) {
        // A poisoned pair: the reference's non-finite outputs, NaN for NaN.
        const bool both_nan = std::isnan(got) && std::isnan(want);
        if (!both_nan && !(got == want)) {
          problems.add(where() + ", pair with non-finite input (" + std::to_string(a) + ", " + std::to_string(cc) +
                       "): got " + std::to_string(got) + ", reference " + std::to_string(want));
        }
        return;
      }
      // The two products of this element: a*C and c*S for a', c*C and a*S for c'.
      const bool is_a = d == index_a;
      const double magnitude = is_a ? std::fabs(a * cos_value) + std::fabs(cc * sin_value)
                                    : std::fabs(cc * cos_value) + std::fabs(a * sin_value);
      double f32_term = 2 * kU * magnitude + 0x1p-50 * magnitude + xpos_relative * magnitude;
      if (in.dtype == DType::F64) f32_term += kU * magnitude;  // the kernel rounds a float64 input to float32
      double tolerance = 0;
      switch (out.dtype) {
        case DType::F32: tolerance = f32_term + kU * std::fabs(want); break;
        case DType::F64: tolerance = f32_term + 0x1p-52 * std::fabs(want); break;
        case DType::BF16:
        case DType::F16: tolerance = f32_term + format_ulp(out.dtype, std::max(std::fabs(got), std::fabs(want))); break;
      }
      if (!std::isfinite(got) || !(std::fabs(got - want) <= tolerance)) {
        std::ostringstream text;
        text.precision(9);
        text << where() << ", pair " << pair << " (a " << a << ", c " << cc << ", C " << cos_value << ", S "
             << sin_value << "): got " << got << " (" << hex_bits(fast_base, out.dtype, index) << "), reference " << want
             << " (" << hex_bits(ref_base, out.dtype, index) << "), |diff| " << std::fabs(got - want) << " > tolerance "
             << tolerance << " = " << std::fabs(got - want) / tolerance << "x";
        problems.add(text.str());
      }
      // Harness self-check: the reference agrees with this test's reading of the contract (the
      // pair, the stream, the row, xPos), so the tolerance above is computed from the right values.
      const bool forward = c.options.direction == Direction::Forward;
      const double expected = is_a ? (forward ? a * cos_value - cc * sin_value : a * cos_value + cc * sin_value)
                                   : (forward ? cc * cos_value + a * sin_value : cc * cos_value - a * sin_value);
      const double own = format_ulp(out.dtype, expected) + 0x1p-45 * magnitude;
      if (!(std::fabs(want - expected) <= own)) {
        std::ostringstream text;
        text.precision(17);
        text << "harness: " << where() << " reference " << want << " but the test's formula gives " << expected;
        problems.add(text.str());
      }
    });
  }
}

std::string run_and_check(const Config& c, const CosSinTable& table, const Buffers* initial_override) {
  const Buffers initial = initial_override ? *initial_override : make_buffers(c);
  Buffers fast = initial, ref = initial;
  std::optional<std::string> fast_error, ref_error;
  if (c.fast_first) {
    fast_error = run(c, table, fast, true);
    ref_error = run(c, table, ref, false);
  } else {
    ref_error = run(c, table, ref, false);
    fast_error = run(c, table, fast, true);
  }
  if (ref_error) {
    return "  harness: reference::apply rejected the configuration: " + *ref_error +
           (fast_error ? "" : " (apply() accepted it)") + "\n";
  }
  if (fast_error) return "  apply() threw: " + *fast_error + "\n";
  Problems problems;
  check_results(c, table, initial, fast, ref, problems);
  return problems.str();
}

}  // namespace rotary::random_calls
