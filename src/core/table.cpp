// src/core/table.cpp: CosSinTable (exact and Hugging Face-compatible) and RopeCache.
// A Stored table's pages are kept by table_stored.cpp; the llama.cpp/ggml and vLLM numerics are
// their engines' files, src/core/engines/ggml.cpp and vllm.cpp (what they share: table_internal.hpp).
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

#include "core/extended.hpp"
#include "rotary/error.hpp"
#include "core/scaling/registry.hpp"
#include "core/table_internal.hpp"

namespace rotary {

namespace {

using detail::Extended;

constexpr int64_t kDigitBase = int64_t{1} << kDigitBits;  // 256
constexpr int kLevels = 4;                                // 256^4 = 2^32 > kMaxPosition
// Below this magnitude an entry is recomputed exactly (see the header comment, step 4).
constexpr double kTinyValue = 1.0 / 65536.0;

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

// CosSinTable::StoredRows and PageRange: table_internal.hpp; reserve_rows, store_pages and the
// other stored-row members: table_stored.cpp.

// ---- engine numerics (Precision::Ggml, Precision::Vllm) --------------------------------------

// CosSinTable::EngineNumerics: table_internal.hpp. Each engine's file in src/core/engines/ holds
// the rest: init_ggml and ggml_rows (ggml.cpp), init_vllm (vllm.cpp).

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
    ggml_rows(first, last, out);  // src/core/engines/ggml.cpp
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
