// include/rotary/table.hpp: cos/sin tables, exact or Hugging Face-compatible.
//
// A CosSinTable holds, for each position p and pair i, attention_scaling * cos(p * inv_freq_i)
// and attention_scaling * sin(p * inv_freq_i) as float32 (pair order, not duplicated; the
// NeoX "cat(freqs, freqs)" layout is a view of it, see expand_row()).
//
//   Precision::Exact     inv_freq in 113-bit precision (the formula on the config's numbers),
//                        the angle p * inv_freq reduced modulo 2 pi exactly, cos/sin to ~1e-16
//                        absolute, times attention_scaling, rounded once to float32: within
//                        1 float32 ulp of the true value at every position in [0, 2^31 - 1]
//                        (docs/numerics.md gives the measurement).
//   Precision::HFCompat  Hugging Face's float32 path: inv_freq as transformers computes it in
//                        float32 (or a model's inv_freq buffer given explicitly), the angle
//                        fl32(fl32(p) * inv_freq), cos/sin of that angle, times
//                        fl32(attention_scaling) in float32. Reproduces a model's training
//                        numerics, errors and all (positions >= 2^24 round).
//   Precision::Ggml      llama.cpp's CPU rope (ggml-cpu ops.cpp ggml_rope_cache_init, rope_yarn):
//                        theta_scale = powf(base, -2/n_dims) and the angle p * theta_scale^i built
//                        by repeated float32 multiplication pair by pair, divided by the GGUF's
//                        frequency factors (Llama 3's rope_freqs as convert_hf_to_gguf.py writes
//                        them, LongRoPE's short or long list by seq_len), YaRN's float32 ramp over
//                        ggml_rope_yarn_corr_dims (always floored / ceiled) with its mscale folded
//                        as llama_context does, cosf / sinf times mscale. Schemes llama.cpp has no
//                        form for (dynamic NTK, NTK-alpha, proportional, M-RoPE, vision, xPos,
//                        DeepSeek's mscale_all_dim) are refused.
//   Precision::Vllm      vLLM's cos_sin_cache (RotaryEmbedding._compute_cos_sin_cache): inv_freq
//                        in float32 as torch computes it (the same chains as HFCompat; linear
//                        scaling divides the float32 positions instead), t in float32, the outer
//                        product, cos / sin in float32 times the float32 mscale, then cast to
//                        TableOptions::cache_dtype; built once for positions [0, fixed_positions)
//                        (default: the rows vLLM builds, vllm_cache_rows() in engine_export.hpp;
//                        LongRoPE: the long cache's max_position_embeddings rows when seq_len,
//                        vLLM's max_model_len here, exceeds the original context, else the short
//                        cache's original rows): a position past it is an error, as it would
//                        index past vLLM's cache. Dynamic NTK is refused (docs/interop.md).
//
// Storage::Stored keeps the rows calls use, in pages of 256 rows stored when a call first needs
// a row in them: memory follows the rows used, not the largest position (a call at position 10^6
// stores one page, 128 KiB at 64 pairs, not 10^6 rows). Readers of stored rows never block and
// never see a partial row, while one writer at a time adds pages (docs/design.md, "Table
// growth"). Storage::OnTheFly stores no rows; row() computes the identical values (the same
// code), for bounded memory.
//
// The sequence-dependent schemes have Hugging Face's forward-time behaviour in RopeCache below;
// a CosSinTable itself is for one fixed seq_len (TableOptions::seq_len).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "rotary/frequencies.hpp"
#include "rotary/spec.hpp"
#include "rotary/tensor.hpp"

namespace rotary {

// Positions are int64 in [0, kMaxPosition]. Beyond it float64 angles would no longer hold an
// integer position exactly enough for the exact path's guarantees, and no model is near it.
inline constexpr int64_t kMaxPosition = (int64_t{1} << 31) - 1;

enum class Precision { Exact, HFCompat, Ggml, Vllm };
enum class Storage { Stored, OnTheFly };

std::string_view to_string(Precision precision);  // "exact", "hf", "ggml", "vllm"
// "exact", "hf" / "hfcompat", "ggml" / "llama.cpp", "vllm".
std::optional<Precision> parse_precision(std::string_view name);

struct TableOptions {
  Precision precision = Precision::Exact;
  Storage storage = Storage::Stored;
  // The seq_len the frequencies are for (dynamic NTK, LongRoPE; see frequencies()). 0 =
  // construction time.
  int64_t seq_len = 0;
  // Rows built at construction (Stored).
  int64_t initial_positions = 0;
  // 0: grow on demand. > 0: a fixed table of exactly this many rows, built at construction;
  // a position past it is an error naming the position and the table length.
  int64_t fixed_positions = 0;
  // Upper bound on the memory of stored rows; growth past it is an error that suggests
  // Storage::OnTheFly. Default 8 GiB.
  int64_t max_bytes = int64_t{8} << 30;
  // HFCompat and Vllm: a model's float32 inv_freq buffer (length rotary_dim / 2), used instead of
  // the float32 operation chain for the spec's scheme.
  std::vector<float> hf_inv_freq;
  // Ggml only: a GGUF's rope frequency-factor tensor (rope_freqs.weight, or the LongRoPE set in
  // use), rotary_dim / 2 finite values > 0, used instead of deriving it from the config (the
  // converter's float32 frequencies come from torch's pow, 1 ulp from rotary's in ~1% of pairs).
  std::vector<float> ggml_freq_factors;
  // Vllm only: the dtype vLLM casts its cache to (the model dtype). F32, BF16 or F16.
  DType cache_dtype = DType::F32;
};

class CosSinTable {
 public:
  explicit CosSinTable(const RopeSpec& spec, TableOptions options = {});
  ~CosSinTable();
  CosSinTable(const CosSinTable&) = delete;
  CosSinTable& operator=(const CosSinTable&) = delete;

  const RopeSpec& spec() const { return spec_; }
  Precision precision() const { return options_.precision; }
  Storage storage() const { return options_.storage; }
  // The seq_len the frequencies are for (TableOptions::seq_len). A call serves a seq_len T
  // when frequency_seq_len(spec, T) == frequency_seq_len(spec, seq_len()) (frequencies.hpp).
  int64_t seq_len() const { return options_.seq_len; }
  bool serves_seq_len(int64_t seq_len) const {
    return frequency_seq_len(spec_, seq_len) == frequency_seq_len(spec_, options_.seq_len);
  }
  int64_t num_pairs() const { return num_pairs_; }
  double attention_scaling() const { return attention_scaling_; }
  // Exact: the double inv_freq (frequencies()); HFCompat, Vllm: the float32 values, widened;
  // Ggml: the angle ggml reaches at position 1 for each pair (its float32 chain), widened.
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // HFCompat: the float32 inv_freq in use. Exact: the doubles rounded to float32.
  const std::vector<float>& inv_freq_f32() const { return inv_freq_f32_; }

  // The stored prefix: rows [0, size()) are all stored (readable by stored_row without growth).
  // Pages stored further out, for calls at far positions, are not counted. 0 for OnTheFly.
  int64_t size() const { return size_.load(std::memory_order_acquire); }
  // Whether the row of `position` is stored (false outside [0, max_position()], and for
  // OnTheFly). Never blocks; a row once stored stays stored.
  bool is_stored(int64_t position) const;
  // Bytes the table holds for stored rows: its pages, the unused rest of the block they are
  // carved from, and the page directory. TableOptions::max_bytes bounds it; 0 for OnTheFly.
  int64_t stored_bytes() const;
  // The largest position row() accepts: fixed_positions - 1 for a fixed table, else kMaxPosition.
  int64_t max_position() const;

  // Cos and sin of one position, num_pairs() values each, pair order, scaling included.
  // Stored: stores the position's page when it is not stored yet (thread-safe). Errors: a
  // negative position, a position past max_position(), growth past max_bytes.
  void row(int64_t position, float* cos_out, float* sin_out) const;

  // A stored row: 2 * num_pairs() floats, cos then sin, valid for the table's lifetime.
  // Requires Stored and is_stored(position) (checked: rotary::Error otherwise).
  const float* stored_row(int64_t position) const;

  // Stores rows [0, positions) of a Stored table (no-op for OnTheFly). Thread-safe.
  void reserve_positions(int64_t positions) const;

  // Stores the rows of these positions (any order, repeats allowed): the pages holding them,
  // nothing in between (no-op for OnTheFly). Thread-safe. Errors as row(); past max_bytes
  // nothing is stored.
  void reserve_rows(std::span<const int64_t> positions) const;

  // The same values in float64 before the final rounding. Exact: the exact value to ~1e-15
  // absolute; HFCompat: the float32 values widened. For the float64 reference.
  void row_f64(int64_t position, double* cos_out, double* sin_out) const;

 private:
  struct PageRange;
  void check_position(int64_t position, const char* where) const;
  void store_pages(std::span<const PageRange> pages) const;
  void compute_rows(int64_t first, int64_t last, float* out) const;
  void init_ggml();
  void ggml_rows(int64_t first, int64_t last, float* out) const;
  void init_vllm();

  RopeSpec spec_;
  TableOptions options_;
  int64_t num_pairs_ = 0;
  double attention_scaling_ = 1.0;
  std::vector<double> inv_freq_;
  std::vector<float> inv_freq_f32_;

  struct Engine;  // the exact angle machinery (src/core/table.cpp)
  std::unique_ptr<Engine> engine_;
  // Ggml and Vllm: the engine's parameters (src/core/table.cpp).
  struct EngineNumerics;
  std::unique_ptr<EngineNumerics> numerics_;

  // Stored rows live in pages found through a directory (src/core/table.cpp), so a row never
  // moves once written and memory follows the pages used. Null for OnTheFly.
  struct StoredRows;
  std::unique_ptr<StoredRows> stored_;
  mutable std::atomic<int64_t> size_{0};
};

// The row in the layout Hugging Face returns and `rotary table` prints: rotary_dim values.
// NeoX: cat(v, v) (pair i at i and i + rotary_dim/2); GPT-J: each pair's value twice (2i, 2i+1).
std::vector<float> expand_row(const float* pair_values, int64_t num_pairs, Style style);

// Hugging Face's forward-time behaviour for the sequence-dependent schemes
// (transformers dynamic_rope_update):
//   dynamic NTK: a call whose seq_len = max(position)+1 exceeds the largest seen recomputes the
//     frequencies for that seq_len; once a call is shorter than max_position_embeddings after
//     growth, the original frequencies return.
//   LongRoPE: seq_len > original_max_position_embeddings uses the long factors, else the short.
//   Every other scheme: one table.
// The result depends on the call history for dynamic NTK, as in Hugging Face. Thread-safe.
// A grown table serves calls shorter than its seq_len: pass ApplyOptions::seq_len =
// table->seq_len() to apply() with it (apply's default, the call's largest position + 1, would
// refuse a table whose frequencies differ from that seq_len's).
class RopeCache {
 public:
  RopeCache(RopeSpec spec, TableOptions options = {});
  // The table for a call whose largest position is `max_position`.
  std::shared_ptr<const CosSinTable> table_for(int64_t max_position);
  int64_t max_seq_len_cached() const;

 private:
  RopeSpec spec_;
  TableOptions options_;
  mutable std::mutex mutex_;
  std::shared_ptr<const CosSinTable> original_;
  std::shared_ptr<const CosSinTable> current_;
  std::shared_ptr<const CosSinTable> long_;  // LongRoPE
  int64_t max_seq_len_cached_ = 0;
};

namespace detail {
// Hugging Face's float32 inv_freq for the spec at seq_len, following transformers' float32
// operation chain for each scheme (golden README, "The hf_f32 numerics"). Within 1 float32 ulp
// of transformers' own buffer (torch's vectorized pow and glibc's powf differ by 1 ulp in ~1% of
// entries).
std::vector<float> hf_inv_freq_f32(const RopeSpec& spec, int64_t seq_len);
}  // namespace detail

}  // namespace rotary
