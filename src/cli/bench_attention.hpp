// src/cli/bench_attention.hpp: the attention cases of `rotary bench`:
// rotary::attention on Llama-3-8B shapes (32 q heads, 8 kv heads, head_dim 128), batch 1, BHSD
// (the KV cache's layout, and torch's), next to the copy floor and the FMA peak measured in the
// same run.
//   attn_decode      1 query at position 4,095 against a 4,096-token cache of rotated keys (what
//                    KvCache::attend runs): KV bytes read per call, as a ratio to the copy floor
//   attn_decode_32k  the same against a 32,768-token cache
//   attn_prefill     causal self-attention over 4,096 tokens with RoPE fused into the loads
//                    (llama-3.1-8b table), timed in alternation with attn_prefill_unfused
//                    (rotary::apply on q and k into buffers, then attention): GFLOP/s as a
//                    ratio to the FMA peak (rows fma_peak)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli/bench_measure.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary::cli::bench {

constexpr int64_t kAttentionDecodeCache = 4096;
constexpr int64_t kAttentionDecodeLongCache = 32768;
constexpr int64_t kAttentionPrefillTokens = 4096;
// A 4,096-token prefill takes 1-3 s per call on one core: few repetitions (each also follows an
// untimed call, time_paired).
constexpr int kAttentionPrefillRepetitionsCap = 3;

// The attention cases, in the order they run (only in the full bench, or named by --cases).
extern const std::vector<std::string> kAttentionCaseNames;

struct AttentionCase {
  std::string name;
  int64_t queries = 1;  // q tokens
  int64_t keys = 0;     // cache (decode) or sequence (prefill) length
  bool prefill = false;
  std::string shape;  // for people
  // float32 flops per call: 4 * q_heads * head_dim per visible (query, key) pair (2 for q.k,
  // 2 for p.v), the count attention papers and torch's flop counter use.
  double flops() const;
  // K + V bytes (decode: what the call must read) in `dtype`.
  int64_t kv_bytes(DType dtype) const;
};
AttentionCase make_attention_case(const std::string& name);

// The FMA peak by thread count, measured in this run (rows fma_peak).
class FmaPeaks {
 public:
  void record(int threads, double gflop_per_s) { peaks_[threads] = gflop_per_s; }
  // Sets a row's gflop_per_s from `flops`, and its peak and ratio_to_peak (NaN where not measured).
  void compare(Row& row, double flops) const;

 private:
  std::map<int, double> peaks_;
};

// rows fma_peak, one per thread count: the median of `repetitions` runs of the probe
// (src/cpu/bandwidth/fma_peak.hpp).
void measure_fma_peaks(MeasureContext& context, const std::vector<int>& threads, int repetitions, FmaPeaks& peaks);

// One attention case in one dtype for each thread count. Decode: the call timed in alternation
// with the copy floor over `stream_bytes` (the stream rows' own, q + k of prefill in `dtype`).
// Prefill: fused and unfused timed in alternation with each other.
void measure_attention(MeasureContext& context, const AttentionCase& attention_case, DType dtype,
                       const std::vector<int>& threads, int repetitions, const CosSinTable& table, size_t stream_bytes,
                       const FmaPeaks& peaks);

}  // namespace rotary::cli::bench
