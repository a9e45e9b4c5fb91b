// src/core/table.cpp: CosSinTable (exact and Hugging Face-compatible) and RopeCache.
//
// Exact rows, and why they are both exact and fast (docs/numerics.md, "Exact cos/sin tables"):
//   1. inv_freq_i is evaluated in binary128 (detail::inv_freq_extended; ~1e-34 relative).
//   2. One "exact evaluation" of cos/sin(p * theta_i): x = p * theta_i in binary128, reduced
//      x - k * 2pi with k = nearbyint(x / 2pi), also in binary128 (absolute error < 1e-24 for
//      p < 2^31), then split r = r_hi + r_lo into doubles and
//        cos(r) = cos(r_hi) - sin(r_hi) * r_lo,   sin(r) = sin(r_hi) + cos(r_hi) * r_lo,
//      which is accurate to about 1 double ulp of the result even where it is tiny.
//      It costs ~200 ns, far too slow for every entry.
//   3. So positions are split into base-256 digits, p = d0 + 256 d1 + 256^2 d2 + 256^3 d3, and
//      the factors cos/sin(d_L * 256^L * theta_i) are evaluated exactly once per digit value
//      and pair (levels, computed lazily: a table below 65536 positions needs two levels).
//      An entry is the complex product of at most four exact factors: |error| <= ~1.2e-15
//      absolute (each factor ~1.2e-16, each complex product adds ~2.2e-16).
//   4. A float32 value v has ulp >= 2^-39 for |v| >= 2^-16, so 1.2e-15 is below 0.001 ulp there
//      and the single rounding to float32 is correct except within 0.001 ulp of a tie (then the
//      neighbour: 1 ulp). Entries with |v| < 2^-16 (about 1 in 10^5) are recomputed with the
//      exact evaluation of step 2, whose absolute error ~1e-24 keeps them within 1 ulp too.
//   Result: every Exact entry within 1 float32 ulp of the true value for p in [0, 2^31 - 1];
//   docs/numerics.md has the measurement.
//
// HFCompat rows follow transformers' float32 path: angle = fl32(fl32(p) * inv_freq_f32),
// fl32(cos(angle)) (computed in double and rounded: correctly rounded, where torch's float32
// cos is within 1 ulp), times fl32(attention_scaling) in float32.
#include "rotary/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numbers>

#include "extended.hpp"
#include "huge_pages.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "core/scaling/registry.hpp"

namespace rotary {

namespace {

using detail::Extended;

constexpr int kDigitBits = 8;
constexpr int64_t kDigitBase = int64_t{1} << kDigitBits;  // 256
constexpr int kLevels = 4;                                // 256^4 = 2^32 > kMaxPosition
// Below this magnitude an entry is recomputed exactly (see the header comment, step 4).
constexpr double kTinyValue = 1.0 / 65536.0;

// Stored rows (docs/design.md, "Table growth"): pages of 256 rows, stored when a call first
// needs a row in them, found through a two-level directory:
//   directory[position >> 20] -> leaf,  leaf[(position >> 8) & 4095] -> page,  row position & 255.
// A page is one block of the position's lowest base-256 digit, so building it is a dense build's
// work per row (one block base per page, then one complex product per entry), and a page at a
// far position costs what a page near 0 costs. 2048 leaves of 4096 pages cover 2^31 positions;
// the directory is 16 KiB, a leaf 32 KiB, a page 256 x 2 x num_pairs floats (128 KiB at 64 pairs).
constexpr int kPageRowsLog2 = kDigitBits;
constexpr int64_t kPageRows = int64_t{1} << kPageRowsLog2;  // 256
constexpr int kLeafPagesLog2 = 12;
constexpr int64_t kLeafPages = int64_t{1} << kLeafPagesLog2;  // 4096: 2^20 rows a leaf
constexpr int64_t kDirectoryLeaves = (kMaxPosition + 1) >> (kPageRowsLog2 + kLeafPagesLog2);  // 2048
// Pages are carved from blocks of memory ("slabs") that double with the table up to this size
// (store_pages): few allocations while a table grows densely, and the unused rest of the newest
// slab, the only unused one, stays below this size (and below what is stored, under 2 MiB).
constexpr int64_t kMaxSlabBytes = int64_t{4} << 20;
constexpr int64_t kHugePageBytes = static_cast<int64_t>(detail::kHugePageBytes);

float round_to_float(double value) { return static_cast<float>(value); }

// The hot loop of a table build, kept apart so that the compiler sees no aliasing and
// vectorizes it: (base * level0) * scaling, rounded to float32, for one row.
void complex_product_row(const double* __restrict base_cos, const double* __restrict base_sin,
                         const double* __restrict level_cos, const double* __restrict level_sin, double scaling,
                         float* __restrict cos_out, float* __restrict sin_out, int64_t num_pairs) {
  for (int64_t pair = 0; pair < num_pairs; ++pair) {
    const double c = base_cos[pair] * level_cos[pair] - base_sin[pair] * level_sin[pair];
    const double s = base_sin[pair] * level_cos[pair] + base_cos[pair] * level_sin[pair];
    cos_out[pair] = static_cast<float>(scaling * c);
    sin_out[pair] = static_cast<float>(scaling * s);
  }
}

// How many of a row's values are below `tiny` in magnitude (vectorizable, unlike an early exit).
int count_tiny(const float* cos_row, const float* sin_row, float tiny, int64_t num_pairs) {
  int count = 0;
  for (int64_t pair = 0; pair < num_pairs; ++pair) {
    count += (std::fabs(cos_row[pair]) < tiny) + (std::fabs(sin_row[pair]) < tiny);
  }
  return count;
}

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

std::string_view to_string(Precision precision) {
  switch (precision) {
    case Precision::Exact: return "exact";
    case Precision::HFCompat: return "hf";
    case Precision::Ggml: return "ggml";
    case Precision::Vllm: return "vllm";
  }
  return "unknown";
}

std::optional<Precision> parse_precision(std::string_view name) {
  if (name == "exact") return Precision::Exact;
  if (name == "hf" || name == "hfcompat" || name == "hf-compat") return Precision::HFCompat;
  if (name == "ggml" || name == "llama.cpp" || name == "llama-cpp") return Precision::Ggml;
  if (name == "vllm") return Precision::Vllm;
  return std::nullopt;
}

// ---- the exact angle machinery ---------------------------------------------------------------

struct CosSinTable::Engine {
  int64_t num_pairs = 0;
  // inv_freq as an unevaluated sum hi + lo of doubles (106 bits), from the binary128 value.
  std::vector<double> theta_hi, theta_lo;
  // 2 pi = kTwoPi1 + kTwoPi2 + kTwoPi3 (each the double nearest the remainder).
  double two_pi_1 = 0, two_pi_2 = 0, two_pi_3 = 0;
  // level_cos[L][digit * num_pairs + pair] = cos(digit * 256^L * theta_pair), exact; digits
  // [0, level_ready[L]) are computed (lazily, in order, under level_mutex; published with
  // release so that readers who saw the count see the values).
  std::array<std::vector<double>, kLevels> level_cos;
  std::array<std::vector<double>, kLevels> level_sin;
  std::array<std::atomic<int64_t>, kLevels> level_ready{};
  std::mutex level_mutex;

  Engine(int64_t pairs, const std::vector<Extended>& theta) : num_pairs(pairs) {
    for (const Extended& t : theta) {
      const double hi = static_cast<double>(t);
      theta_hi.push_back(hi);
      theta_lo.push_back(static_cast<double>(t - static_cast<Extended>(hi)));
    }
    const Extended two_pi = detail::ext_two_pi();
    two_pi_1 = static_cast<double>(two_pi);
    two_pi_2 = static_cast<double>(two_pi - static_cast<Extended>(two_pi_1));
    two_pi_3 = static_cast<double>(two_pi - static_cast<Extended>(two_pi_1) - static_cast<Extended>(two_pi_2));
    for (int level = 0; level < kLevels; ++level) {
      level_cos[level].resize(static_cast<size_t>(kDigitBase * num_pairs));
      level_sin[level].resize(static_cast<size_t>(kDigitBase * num_pairs));
    }
  }

  // Step 2: cos/sin(position * theta_pair) to ~1 double ulp of the result, for 0 <= position
  // < 2^32, in double-double arithmetic (error-free products and Sterbenz subtraction):
  //   x = p * theta = x_hi + e1 + p * theta_lo                (two_prod: x_hi + e1 exact)
  //   k = nearbyint(x_hi / 2 pi);  k * 2pi_1 = a + ea, k * 2pi_2 = b + eb   (exact)
  //   r = (x_hi - a) + (e1 + p theta_lo - ea - b - eb - k 2pi_3)
  // x_hi - a is exact (Sterbenz: both within a factor 2), the rest are below 2^-20 in
  // magnitude, so r carries an absolute error below ~1e-22 (the neglected rounding of the
  // small sum and of p * theta_lo), whatever the size of cos(r).
  void exact(int64_t position, int64_t pair, double& cos_out, double& sin_out) const {
    const double p = static_cast<double>(position);
    const double x_hi = p * theta_hi[pair];
    const double e1 = std::fma(p, theta_hi[pair], -x_hi);
    const double k = std::nearbyint(x_hi * (1.0 / two_pi_1));
    const double a = k * two_pi_1;
    const double ea = std::fma(k, two_pi_1, -a);
    const double b = k * two_pi_2;
    const double eb = std::fma(k, two_pi_2, -b);
    const double head = x_hi - a;
    const double tail = ((e1 + p * theta_lo[pair]) - ea) - b - eb - k * two_pi_3;
    const double r_hi = head + tail;
    const double r_lo = tail - (r_hi - head);  // fast two-sum: |head| >= |tail| or head == 0
    double s = 0;
    double c = 0;
    sincos_pair(r_hi, s, c);
    cos_out = c - s * r_lo;
    sin_out = s + c * r_lo;
  }

  static void sincos_pair(double x, double& s, double& c) {
    s = std::sin(x);
    c = std::cos(x);
  }

  // Makes digits [0, digits) of a level available.
  void ensure_digits(int level, int64_t digits) {
    if (level_ready[level].load(std::memory_order_acquire) >= digits) return;
    std::lock_guard<std::mutex> lock(level_mutex);
    const int64_t ready = level_ready[level].load(std::memory_order_relaxed);
    const int64_t step = int64_t{1} << (kDigitBits * level);
    for (int64_t digit = ready; digit < digits; ++digit) {
      for (int64_t pair = 0; pair < num_pairs; ++pair) {
        exact(digit * step, pair, level_cos[level][digit * num_pairs + pair],
              level_sin[level][digit * num_pairs + pair]);
      }
    }
    if (digits > ready) level_ready[level].store(digits, std::memory_order_release);
  }

  // The digits rows [first, last) need at every level.
  void ensure_for_rows(int64_t first, int64_t last) {
    for (int level = 0; level < kLevels; ++level) {
      const int shift = kDigitBits * level;
      // If the range stays inside one block of the next level, the digits run up to that of
      // last - 1; otherwise every digit value occurs.
      const bool one_block = (first >> (shift + kDigitBits)) == ((last - 1) >> (shift + kDigitBits));
      const int64_t max_digit = one_block ? ((last - 1) >> shift) & (kDigitBase - 1) : kDigitBase - 1;
      ensure_digits(level, max_digit + 1);
    }
  }

  // cos/sin of (high_digits * 256) * theta for every pair: the product of levels 1..3.
  void block_base(int64_t position, double* base_cos, double* base_sin) const {
    for (int64_t pair = 0; pair < num_pairs; ++pair) {
      base_cos[pair] = 1.0;
      base_sin[pair] = 0.0;
    }
    for (int level = 1; level < kLevels; ++level) {
      const int64_t digit = (position >> (kDigitBits * level)) & (kDigitBase - 1);
      if (digit == 0) continue;
      const double* lc = &level_cos[level][digit * num_pairs];
      const double* ls = &level_sin[level][digit * num_pairs];
      for (int64_t pair = 0; pair < num_pairs; ++pair) {
        const double c = base_cos[pair] * lc[pair] - base_sin[pair] * ls[pair];
        const double s = base_sin[pair] * lc[pair] + base_cos[pair] * ls[pair];
        base_cos[pair] = c;
        base_sin[pair] = s;
      }
    }
  }

  // Calls row(position, level0_cos, level0_sin, base_cos, base_sin) for every position in
  // [first, last): the row is the complex product of the level-0 factor of its lowest digit and
  // the base of its block (levels 1..3), recomputed only when the block changes.
  template <class Row>
  void for_each_row(int64_t first, int64_t last, Row&& row) const {
    std::vector<double> base_cos(static_cast<size_t>(num_pairs));
    std::vector<double> base_sin(static_cast<size_t>(num_pairs));
    int64_t current_block = -1;
    for (int64_t position = first; position < last; ++position) {
      const int64_t block = position >> kDigitBits;
      if (block != current_block) {
        block_base(position, base_cos.data(), base_sin.data());
        current_block = block;
      }
      const int64_t digit = position & (kDigitBase - 1);
      row(position, &level_cos[0][digit * num_pairs], &level_sin[0][digit * num_pairs], base_cos.data(),
          base_sin.data());
    }
  }

  // Exact rows [first, last) in double (scaled), into cos_out/sin_out [row][pair].
  void rows_f64(int64_t first, int64_t last, double scaling, double* cos_out, double* sin_out) const {
    for_each_row(first, last, [&](int64_t position, const double* lc, const double* ls, const double* bc,
                                  const double* bs) {
      double* co = cos_out + (position - first) * num_pairs;
      double* so = sin_out + (position - first) * num_pairs;
      for (int64_t pair = 0; pair < num_pairs; ++pair) {
        double c = bc[pair] * lc[pair] - bs[pair] * ls[pair];
        double s = bs[pair] * lc[pair] + bc[pair] * ls[pair];
        if (std::abs(c) < kTinyValue || std::abs(s) < kTinyValue) exact(position, pair, c, s);
        co[pair] = scaling * c;
        so[pair] = scaling * s;
      }
    });
  }

  // Exact rows [first, last) as float32 rows of 2 * num_pairs (cos then sin). The hot path of
  // a table build: one complex product per entry, vectorizable; the rare tiny entries are
  // fixed up afterwards, row by row.
  void rows_f32(int64_t first, int64_t last, double scaling, float* out) const {
    const float tiny = static_cast<float>(kTinyValue * scaling);
    for_each_row(first, last, [&](int64_t position, const double* lc, const double* ls, const double* bc,
                                  const double* bs) {
      float* co = out + (position - first) * 2 * num_pairs;
      float* so = co + num_pairs;
      complex_product_row(bc, bs, lc, ls, scaling, co, so, num_pairs);
      const bool any_tiny = count_tiny(co, so, tiny, num_pairs) > 0;
      if (any_tiny) {
        for (int64_t pair = 0; pair < num_pairs; ++pair) {
          if (std::abs(co[pair]) < tiny || std::abs(so[pair]) < tiny) {
            double c = 0;
            double s = 0;
            exact(position, pair, c, s);
            co[pair] = round_to_float(scaling * c);
            so[pair] = round_to_float(scaling * s);
          }
        }
      }
    });
  }
};

// ---- stored rows -----------------------------------------------------------------------------

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

// ---- engine numerics (Precision::Ggml, Precision::Vllm) --------------------------------------

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

namespace {

// ggml's rope_yarn_ramp and rope_yarn (ops.cpp): one pair's cos and sin, as ggml-cpu is built for
// x86-64 with FMA (GGML_FMA, -mfma): GCC contracts the blend a*b + c*d into fma(a, b, c*d) and
// 1 + 0.1*log(..) into fma(0.1, log(..), 1), so those two are fused here too (checked bit for bit
// against ggml itself, tests/core/engine_numerics_test.cpp; without them the YaRN ramp's pairs
// differ by an ulp).
void ggml_rope_yarn(float theta_extrap, float freq_scale, const float corr_dims[2], int64_t i0, float ext_factor,
                    float mscale, float* cos_theta, float* sin_theta) {
  const float theta_interp = freq_scale * theta_extrap;
  float theta = theta_interp;
  if (ext_factor != 0.0f) {
    const float y = (static_cast<float>(static_cast<int>(i0) / 2) - corr_dims[0]) / std::max(0.001f, corr_dims[1] - corr_dims[0]);
    const float ramp = 1 - std::min(1.0f, std::max(0.0f, y));
    const float ramp_mix = ramp * ext_factor;
    theta = std::fma(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
    mscale *= std::fma(0.1f, std::log(1.0f / freq_scale), 1.0f);
  }
  *cos_theta = std::cos(theta) * mscale;
  *sin_theta = std::sin(theta) * mscale;
}

[[noreturn]] void refuse_scheme(const RopeSpec& spec, Precision precision, std::string_view what) {
  throw Error(detail::concat("CosSinTable: precision ", to_string(precision), " cannot reproduce spec ", spec.name, ": ",
                             what));
}

void check_engine_geometry(const RopeSpec& spec, Precision precision) {
  if (spec.xpos) refuse_scheme(spec, precision, "xPos is not part of its rope");
  if (spec.axes == PositionAxes::Vision2D) refuse_scheme(spec, precision, "axes vision2d has another frequency layout there");
  if (spec.axes == PositionAxes::MRope && precision == Precision::Ggml) {
    refuse_scheme(spec, precision, "axes mrope (ggml_rope_multi) is not modelled");
  }
}

}  // namespace

// ---- the table -------------------------------------------------------------------------------

CosSinTable::CosSinTable(const RopeSpec& spec, TableOptions options) : spec_(spec), options_(std::move(options)) {
  validate(spec_);
  if (options_.seq_len < 0) throw Error(detail::concat("CosSinTable: seq_len must be >= 0 (got ", options_.seq_len, ")"));
  if (options_.initial_positions < 0 || options_.initial_positions > kMaxPosition + 1) {
    throw Error(detail::concat("CosSinTable: initial_positions must be in [0, ", kMaxPosition + 1, "] (got ",
                               options_.initial_positions, ")"));
  }
  if (options_.fixed_positions < 0 || options_.fixed_positions > kMaxPosition + 1) {
    throw Error(detail::concat("CosSinTable: fixed_positions must be in [0, ", kMaxPosition + 1, "] (got ",
                               options_.fixed_positions, ")"));
  }
  if (options_.max_bytes <= 0) {
    throw Error(detail::concat("CosSinTable: max_bytes must be > 0 (got ", options_.max_bytes, ")"));
  }
  num_pairs_ = spec_.rotary_dim / 2;
  const Frequencies freqs = frequencies(spec_, options_.seq_len);
  attention_scaling_ = freqs.attention_scaling;

  if (options_.cache_dtype != DType::F32 && options_.precision != Precision::Vllm) {
    throw Error(detail::concat("CosSinTable: cache_dtype is for Precision::Vllm only (got ", to_string(options_.cache_dtype),
                               " with precision ", to_string(options_.precision), ")"));
  }
  if (!options_.ggml_freq_factors.empty() && options_.precision != Precision::Ggml) {
    throw Error(detail::concat("CosSinTable: ggml_freq_factors is for Precision::Ggml only (got precision ",
                               to_string(options_.precision), ")"));
  }
  if (options_.precision == Precision::Exact || options_.precision == Precision::Ggml) {
    if (!options_.hf_inv_freq.empty()) {
      throw Error(detail::concat("CosSinTable: hf_inv_freq is for Precision::HFCompat and Vllm only (got a buffer with "
                                 "precision ",
                                 to_string(options_.precision), ")"));
    }
  }
  if (options_.precision == Precision::Exact) {
    inv_freq_ = freqs.inv_freq;
    engine_ = std::make_unique<Engine>(num_pairs_, detail::inv_freq_extended(spec_, options_.seq_len));
  } else if (options_.precision == Precision::Ggml) {
    init_ggml();
  } else {
    if (!options_.hf_inv_freq.empty()) {
      if (static_cast<int64_t>(options_.hf_inv_freq.size()) != num_pairs_) {
        throw Error(detail::concat("CosSinTable: hf_inv_freq must have rotary_dim/2 = ", num_pairs_,
                                   " values (got ", options_.hf_inv_freq.size(), ")"));
      }
      for (size_t i = 0; i < options_.hf_inv_freq.size(); ++i) {
        const float v = options_.hf_inv_freq[i];
        if (!std::isfinite(v) || v < 0.0f) {
          throw Error(detail::concat("CosSinTable: hf_inv_freq[", i, "] must be finite and >= 0 (got ", v, ")"));
        }
      }
      inv_freq_f32_ = options_.hf_inv_freq;
    } else if (options_.precision == Precision::Vllm && spec_.scaling.type == ScalingType::Linear) {
      RopeSpec unscaled = spec_;  // vLLM divides the positions, not inv_freq
      unscaled.scaling = Scaling{};
      inv_freq_f32_ = detail::hf_inv_freq_f32(unscaled, 0);
    } else {
      inv_freq_f32_ = detail::hf_inv_freq_f32(spec_, options_.seq_len);
    }
    inv_freq_.assign(inv_freq_f32_.begin(), inv_freq_f32_.end());
    if (options_.precision == Precision::Vllm) init_vllm();
  }
  if (inv_freq_f32_.empty()) {
    for (double v : inv_freq_) inv_freq_f32_.push_back(static_cast<float>(v));
  }

  if (options_.storage == Storage::Stored) {
    stored_ = std::make_unique<StoredRows>();
    const int64_t build = options_.fixed_positions > 0 ? options_.fixed_positions : options_.initial_positions;
    if (build > 0) reserve_positions(build);
  }
}

CosSinTable::~CosSinTable() = default;

// llama.cpp's parameters for the spec (see EngineNumerics): which GGUF keys and tensors the
// converter writes for each scheme, and what llama_context derives from them.
void CosSinTable::init_ggml() {
  const RopeSpec& spec = spec_;
  check_engine_geometry(spec, Precision::Ggml);
  auto n = std::make_unique<EngineNumerics>();
  const Scaling& s = spec.scaling;
  const float base = static_cast<float>(spec.theta_base);
  const int n_dims = static_cast<int>(spec.rotary_dim);
  n->theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  // The scheme's llama.cpp form (its row's ggml_rope, src/core/scaling/).
  const scaling::ScalingScheme& scheme = scaling::scheme(s.type);
  scaling::GgmlRope rope;
  if (const std::string refusal = scheme.ggml_rope(spec, options_.seq_len, rope); !refusal.empty()) {
    refuse_scheme(spec, Precision::Ggml, refusal);
  }
  n->freq_scale = rope.freq_scale;
  n->ext_factor = rope.ext_factor;
  n->attn_factor = rope.attn_factor;
  n->corr_dims[0] = rope.corr_dims[0];
  n->corr_dims[1] = rope.corr_dims[1];
  n->freq_factors = std::move(rope.freq_factors);
  if (!options_.ggml_freq_factors.empty()) {
    if (!scheme.ggml_reads_freq_factors) {
      throw Error(detail::concat("CosSinTable: ggml_freq_factors is for rope_type llama3 or longrope (spec ", spec.name,
                                 " has rope_type ", to_string(s.type), ")"));
    }
    if (static_cast<int64_t>(options_.ggml_freq_factors.size()) != num_pairs_) {
      throw Error(detail::concat("CosSinTable: ggml_freq_factors must have rotary_dim/2 = ", num_pairs_, " values (got ",
                                 options_.ggml_freq_factors.size(), ")"));
    }
    for (size_t i = 0; i < options_.ggml_freq_factors.size(); ++i) {
      const float v = options_.ggml_freq_factors[i];
      if (!std::isfinite(v) || !(v > 0.0f)) {
        throw Error(detail::concat("CosSinTable: ggml_freq_factors[", i, "] must be finite and > 0 (got ", v, ")"));
      }
    }
    n->freq_factors = options_.ggml_freq_factors;
  }
  numerics_ = std::move(n);
  // The frequencies ggml reaches: its angle at position 1, pair by pair (scaling as it applies).
  inv_freq_f32_.resize(static_cast<size_t>(num_pairs_));
  float theta = 1.0f;
  for (int64_t i = 0; i < num_pairs_; ++i) {
    const float ff = numerics_->freq_factors.empty() ? 1.0f : numerics_->freq_factors[i];
    const float extrap = theta / ff;
    float angle = numerics_->freq_scale * extrap;
    if (numerics_->ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - numerics_->corr_dims[0]) /
                      std::max(0.001f, numerics_->corr_dims[1] - numerics_->corr_dims[0]);
      const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * numerics_->ext_factor;
      angle = std::fma(angle, 1 - ramp_mix, extrap * ramp_mix);
    }
    inv_freq_f32_[i] = angle;
    theta *= numerics_->theta_scale;
  }
  inv_freq_.assign(inv_freq_f32_.begin(), inv_freq_f32_.end());
  float mscale = numerics_->attn_factor;
  if (numerics_->ext_factor != 0.0f) mscale *= std::fma(0.1f, std::log(1.0f / numerics_->freq_scale), 1.0f);
  attention_scaling_ = mscale;
}

// vLLM's cache: which schemes its classes build one static cache for, and its length: the rows
// vllm_cache_rows() counts (engine_export.hpp), so that `rotary table --precision vllm`,
// `rotary diverge` and `rotary export --format vllm` serve the same rows.
void CosSinTable::init_vllm() {
  const RopeSpec& spec = spec_;
  check_engine_geometry(spec, Precision::Vllm);
  const ScalingType type = spec.scaling.type;
  if (type == ScalingType::Dynamic) {
    // DynamicNTKScalingRotaryEmbedding builds one cache at the unscaled frequencies (its base
    // formula gives the base back at max_len = L x factor), which is not dynamic NTK.
    refuse_scheme(spec, Precision::Vllm,
                  "rope_type dynamic changes with the sequence length, and vLLM's dynamic class keeps the unscaled "
                  "frequencies in one cache instead");
  }
  if (type == ScalingType::Proportional) refuse_scheme(spec, Precision::Vllm, "rope_type proportional is not modelled");
  if (spec.axes == PositionAxes::MRope && type == ScalingType::Yarn) {
    // mrope.py hands YaRN 4 x original_max_position_embeddings as its context, which moves the
    // correction range: vLLM's frequencies are not the config's (export_table refuses it too).
    refuse_scheme(spec, Precision::Vllm, "axes mrope with rope_type yarn: vLLM's MRotaryEmbedding computes YaRN's "
                                         "correction range over 4 x the original context");
  }
  if (options_.cache_dtype == DType::F64) {
    throw Error("CosSinTable: cache_dtype must be float32, bfloat16 or float16 for Precision::Vllm (got float64)");
  }
  auto n = std::make_unique<EngineNumerics>();
  n->cache_dtype = options_.cache_dtype;
  if (type == ScalingType::Linear) n->position_divisor = static_cast<float>(*spec.scaling.factor);
  numerics_ = std::move(n);
  const int64_t original = spec.original_context();
  if (type == ScalingType::LongRope) {
    if (original <= 0 || spec.max_position_embeddings <= 0) {
      refuse_scheme(spec, Precision::Vllm, detail::concat("rope_type longrope needs max_position_embeddings and the "
                                                          "original context for vLLM's mscale (got ",
                                                          spec.max_position_embeddings, " and ", original, ")"));
    }
    // Phi3LongRoPEScaledRotaryEmbedding: both caches times one mscale, sqrt(1 + ln s / ln L0)
    // with s = max_position_embeddings / L0 (1 for s <= 1), computed in Python float; get_rope
    // passes it no attention_factor (only short_mscale / long_mscale, which rotary does not read).
    const double scale = static_cast<double>(spec.max_position_embeddings) / static_cast<double>(original);
    attention_scaling_ = scale <= 1.0 ? 1.0 : std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(original)));
  }
  if (options_.fixed_positions == 0) {
    int64_t rows = vllm_cache_rows(spec);
    if (type == ScalingType::LongRope && rows > 0) {
      // long_short_cos_sin_cache = cat(short cache [0, L0), long cache [0, L)). forward() picks
      // one for every call: the long one (index p + L0) when max_model_len > L0, else the short
      // one; TableOptions::seq_len plays max_model_len here, and the inv_freq chosen above by it
      // is the same choice.
      rows = options_.seq_len > original ? rows - original : original;
    }
    if (rows <= 0 || rows > kMaxPosition + 1) {
      throw Error(detail::concat("CosSinTable: fixed_positions must be given for Precision::Vllm: spec ", spec.name,
                                 " gives vLLM's cache ", rows, " rows (max_position_embeddings ",
                                 spec.max_position_embeddings, "), outside [1, ", kMaxPosition + 1, "]"));
    }
    options_.fixed_positions = rows;
  }
}

int64_t CosSinTable::max_position() const {
  return options_.fixed_positions > 0 ? options_.fixed_positions - 1 : kMaxPosition;
}

void CosSinTable::check_position(int64_t position, const char* where) const {
  if (position < 0) throw Error(detail::concat(where, ": position must be >= 0 (got ", position, ")"));
  if (position > max_position()) {
    if (options_.fixed_positions > 0) {
      throw Error(detail::concat(where, ": position must be < the fixed table length ", options_.fixed_positions,
                                 " (got ", position, ")",
                                 options_.precision == Precision::Vllm ? ": vLLM's cache has no row for it" : ""));
    }
    throw Error(detail::concat(where, ": position must be <= ", kMaxPosition, " (got ", position, ")"));
  }
}

void CosSinTable::compute_rows(int64_t first, int64_t last, float* out) const {
  if (first >= last) return;
  if (engine_) {
    engine_->ensure_for_rows(first, last);
    engine_->rows_f32(first, last, attention_scaling_, out);
    return;
  }
  if (options_.precision == Precision::Ggml) {
    // ggml_rope_cache_init: theta starts at the float position and is multiplied by theta_scale
    // once per pair; each pair's angle is divided by its frequency factor, then rope_yarn.
    const EngineNumerics& n = *numerics_;
    for (int64_t position = first; position < last; ++position) {
      float* co = out + (position - first) * 2 * num_pairs_;
      float* so = co + num_pairs_;
      float theta = static_cast<float>(position);
      for (int64_t pair = 0; pair < num_pairs_; ++pair) {
        const float ff = n.freq_factors.empty() ? 1.0f : n.freq_factors[pair];
        ggml_rope_yarn(theta / ff, n.freq_scale, n.corr_dims, 2 * pair, n.ext_factor, n.attn_factor, &co[pair], &so[pair]);
        theta *= n.theta_scale;
      }
    }
    return;
  }
  // HFCompat: transformers' float32 path. Vllm: the same, with vLLM's positions (linear scaling
  // divides them) and the cast of its cache to the model dtype.
  const float scaling = static_cast<float>(attention_scaling_);
  const bool vllm = options_.precision == Precision::Vllm;
  const float divisor = vllm ? numerics_->position_divisor : 1.0f;
  const DType cache_dtype = vllm ? numerics_->cache_dtype : DType::F32;
  auto cast = [cache_dtype](float v) {
    switch (cache_dtype) {
      case DType::BF16: return bf16_to_float(float_to_bf16(v));
      case DType::F16: return f16_to_float(float_to_f16(v));
      default: return v;
    }
  };
  for (int64_t position = first; position < last; ++position) {
    float* co = out + (position - first) * 2 * num_pairs_;
    float* so = co + num_pairs_;
    float p = static_cast<float>(position);  // rounds for p >= 2^24, as torch's .float()
    if (divisor != 1.0f) p = p / divisor;
    for (int64_t pair = 0; pair < num_pairs_; ++pair) {
      const float angle = p * inv_freq_f32_[pair];
      co[pair] = cast(static_cast<float>(std::cos(static_cast<double>(angle))) * scaling);
      so[pair] = cast(static_cast<float>(std::sin(static_cast<double>(angle))) * scaling);
    }
  }
}

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

void CosSinTable::row(int64_t position, float* cos_out, float* sin_out) const {
  check_position(position, "CosSinTable::row");
  if (stored_) {
    const float* stored = stored_->find(position, 2 * num_pairs_);
    if (stored == nullptr) {
      reserve_rows({&position, 1});
      stored = stored_->find(position, 2 * num_pairs_);
    }
    std::memcpy(cos_out, stored, static_cast<size_t>(num_pairs_) * sizeof(float));
    std::memcpy(sin_out, stored + num_pairs_, static_cast<size_t>(num_pairs_) * sizeof(float));
    return;
  }
  std::vector<float> buffer(static_cast<size_t>(2 * num_pairs_));
  compute_rows(position, position + 1, buffer.data());
  std::memcpy(cos_out, buffer.data(), static_cast<size_t>(num_pairs_) * sizeof(float));
  std::memcpy(sin_out, buffer.data() + num_pairs_, static_cast<size_t>(num_pairs_) * sizeof(float));
}

void CosSinTable::row_f64(int64_t position, double* cos_out, double* sin_out) const {
  check_position(position, "CosSinTable::row_f64");
  if (engine_) {
    engine_->ensure_for_rows(position, position + 1);
    engine_->rows_f64(position, position + 1, attention_scaling_, cos_out, sin_out);
    return;
  }
  std::vector<float> c(static_cast<size_t>(num_pairs_));
  std::vector<float> s(static_cast<size_t>(num_pairs_));
  row(position, c.data(), s.data());
  for (int64_t i = 0; i < num_pairs_; ++i) {
    cos_out[i] = c[i];
    sin_out[i] = s[i];
  }
}

std::vector<float> expand_row(const float* pair_values, int64_t num_pairs, Style style) {
  std::vector<float> out(static_cast<size_t>(2 * num_pairs));
  for (int64_t i = 0; i < num_pairs; ++i) {
    if (style == Style::NeoX) {
      out[i] = out[i + num_pairs] = pair_values[i];
    } else {
      out[2 * i] = out[2 * i + 1] = pair_values[i];
    }
  }
  return out;
}

// ---- Hugging Face's float32 inv_freq chains ---------------------------------------------------

// Each scheme's chain is its row's hf_inv_freq_f32 (src/core/scaling/).
std::vector<float> detail::hf_inv_freq_f32(const RopeSpec& spec, int64_t seq_len) {
  validate(spec);
  return scaling::scheme(spec.scaling.type).hf_inv_freq_f32(spec, seq_len);
}

// ---- RopeCache -------------------------------------------------------------------------------

RopeCache::RopeCache(RopeSpec spec, TableOptions options) : spec_(std::move(spec)), options_(std::move(options)) {
  options_.seq_len = 0;
  original_ = std::make_shared<const CosSinTable>(spec_, options_);
  current_ = original_;
  max_seq_len_cached_ = spec_.max_position_embeddings;
}

std::shared_ptr<const CosSinTable> RopeCache::table_for(int64_t max_position) {
  if (max_position < 0) {
    throw Error(detail::concat("RopeCache::table_for: max_position must be >= 0 (got ", max_position, ")"));
  }
  const int64_t seq_len = max_position + 1;
  std::lock_guard<std::mutex> lock(mutex_);
  if (spec_.scaling.type == ScalingType::Dynamic) {
    // transformers dynamic_frequency_update: growth, then reset below the original length.
    const int64_t cached = max_seq_len_cached_;
    const int64_t original = spec_.max_position_embeddings;
    if (seq_len > cached) {
      TableOptions grown = options_;
      grown.seq_len = seq_len;
      current_ = std::make_shared<const CosSinTable>(spec_, grown);
      max_seq_len_cached_ = seq_len;
    }
    if (seq_len < original && cached > original) {
      current_ = original_;
      max_seq_len_cached_ = original;
    }
    return current_;
  }
  if (spec_.scaling.type == ScalingType::LongRope) {
    // transformers longrope_frequency_update: long factors past the original length.
    if (seq_len > spec_.original_context()) {
      if (!long_) {
        TableOptions long_options = options_;
        long_options.seq_len = spec_.original_context() + 1;
        long_ = std::make_shared<const CosSinTable>(spec_, long_options);
      }
      return long_;
    }
    return original_;
  }
  return original_;
}

int64_t RopeCache::max_seq_len_cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_seq_len_cached_;
}

}  // namespace rotary
