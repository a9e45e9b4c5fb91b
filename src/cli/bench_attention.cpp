// src/cli/bench_attention.cpp: the attention cases of `rotary bench` (bench_attention.hpp).
#include "cli/bench_attention.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cli/args.hpp"
#include "cli/bench_probe.hpp"
#include "cli/bench_timing.hpp"
#include "cpu/bandwidth/buffer.hpp"
#include "cpu/bandwidth/fma_peak.hpp"
#include "cpu/bandwidth/streams.hpp"
#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/error.hpp"

namespace rotary::cli::bench {

const std::vector<std::string> kAttentionCaseNames = {"attn_decode", "attn_decode_32k", "attn_prefill"};

double AttentionCase::flops() const {
  // Decode: the one query sees every key. Causal prefill: query i sees i + 1 keys.
  const double pairs = prefill ? static_cast<double>(keys) * static_cast<double>(keys + 1) / 2.0
                               : static_cast<double>(queries) * static_cast<double>(keys);
  return 4.0 * static_cast<double>(kQHeads * kHeadDim) * pairs;
}

int64_t AttentionCase::kv_bytes(DType dtype) const { return 2 * keys * kKvHeads * kHeadDim * dtype_size(dtype); }

AttentionCase make_attention_case(const std::string& name) {
  AttentionCase c;
  c.name = name;
  if (name == "attn_prefill") {
    c.prefill = true;
    c.queries = c.keys = kAttentionPrefillTokens;
    c.shape = detail::concat("q [1,32,", c.keys, ",128] k v [1,8,", c.keys, ",128], causal, fused RoPE, pos 0..",
                             c.keys - 1);
    return c;
  }
  c.keys = name == "attn_decode_32k" ? kAttentionDecodeLongCache : kAttentionDecodeCache;
  c.shape = detail::concat("q [1,32,1,128] at pos ", c.keys - 1, ", rotated cache k v [1,8,", c.keys, ",128]");
  return c;
}

void FmaPeaks::compare(Row& row, double flops) const {
  row.gflop_per_s = flops / (row.median_ms * 1e-3) / 1e9;
  const auto found = peaks_.find(row.threads);
  row.peak_gflop_per_s = found == peaks_.end() ? std::nan("") : found->second;
  row.ratio_to_peak = row.gflop_per_s / row.peak_gflop_per_s;
}

void measure_fma_peaks(MeasureContext& context, const std::vector<int>& threads, int repetitions, FmaPeaks& peaks) {
  constexpr double kProbeMs = 30.0;
  for (const int thread_count : threads) {
    const double core_ghz = add_chain_ghz(kRowClockAdds);
    std::vector<double> runs;
    for (int r = 0; r < std::max(repetitions, 1); ++r) runs.push_back(bandwidth::fma_peak_gflop_per_s(thread_count, kProbeMs));
    std::sort(runs.begin(), runs.end());
    const double median = runs.size() % 2 == 1 ? runs[runs.size() / 2]
                                                : 0.5 * (runs[runs.size() / 2 - 1] + runs[runs.size() / 2]);
    peaks.record(thread_count, median);
    Row row;
    row.name = "fma_peak";
    row.workload = std::string(1, '-');  // not = "-": GCC 12 reports a false -Wrestrict on it
    row.dtype = "float32";
    row.threads = thread_count;
    row.layout = std::string(1, '-');
    row.shape = "16 independent float32 FMA chains per thread (src/cpu/bandwidth/fma_peak.hpp)";
    row.median_ms = kProbeMs;
    row.min_ms = kProbeMs * runs.front() / median;  // the fastest run, as a time (spread check)
    row.gb_per_s = std::nan("");
    row.ratio_to_copy = std::nan("");
    row.baseline = "fma_peak";
    row.baseline_gb_per_s = std::nan("");
    row.gflop_per_s = median;
    row.peak_gflop_per_s = median;
    row.ratio_to_peak = 1.0;
    row.target = context.target;
    row.repetitions = static_cast<int>(runs.size());
    row.core_ghz = core_ghz;
    context.add_row(std::move(row));
  }
}

namespace {

// Random non-zero values, sign random, magnitude in [0.05, 0.5) (scores of a few units, so the
// softmax is spread), rounded to the dtype. (fill_random's [0.25, 2) would give scores of ~30:
// one key would take all the weight, which no model's attention looks like.)
void fill_attention(std::byte* data, DType dtype, int64_t count, uint64_t seed) {
  fill_random(data, dtype, count, seed);
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == DType::F32) {
      reinterpret_cast<float*>(data)[i] *= 0.25f;
    } else {  // bf16 / f16: scale by a power of two, exact
      float value = dtype == DType::BF16 ? bf16_to_float(reinterpret_cast<uint16_t*>(data)[i])
                                         : f16_to_float(reinterpret_cast<uint16_t*>(data)[i]);
      value *= 0.25f;
      reinterpret_cast<uint16_t*>(data)[i] = dtype == DType::BF16 ? float_to_bf16(value) : float_to_f16(value);
    }
  }
}

struct AttentionBuffers {
  bandwidth::Buffer q, k, v, out, q_rot, k_rot;
  TensorView q_view, k_view, v_view, out_view, q_rot_view, k_rot_view;
  AttentionBuffers(DType dtype, int64_t queries, int64_t keys, bool rotated_copies) {
    const int64_t size = dtype_size(dtype);
    const auto bytes = [&](int64_t tokens, int64_t heads) { return static_cast<size_t>(tokens * heads * kHeadDim * size); };
    q = bandwidth::Buffer(bytes(queries, kQHeads));
    k = bandwidth::Buffer(bytes(keys, kKvHeads));
    v = bandwidth::Buffer(bytes(keys, kKvHeads));
    out = bandwidth::Buffer(bytes(queries, kQHeads));
    fill_attention(q.data(), dtype, queries * kQHeads * kHeadDim, 11);
    fill_attention(k.data(), dtype, keys * kKvHeads * kHeadDim, 12);
    fill_attention(v.data(), dtype, keys * kKvHeads * kHeadDim, 13);
    q_view = contiguous_view(q.data(), dtype, Layout::BHSD, {1, kQHeads, queries, kHeadDim});
    k_view = contiguous_view(k.data(), dtype, Layout::BHSD, {1, kKvHeads, keys, kHeadDim});
    v_view = contiguous_view(v.data(), dtype, Layout::BHSD, {1, kKvHeads, keys, kHeadDim});
    out_view = contiguous_view(out.data(), dtype, Layout::BHSD, {1, kQHeads, queries, kHeadDim});
    if (rotated_copies) {
      q_rot = bandwidth::Buffer(q.bytes());
      k_rot = bandwidth::Buffer(k.bytes());
      q_rot_view = contiguous_view(q_rot.data(), dtype, Layout::BHSD, {1, kQHeads, queries, kHeadDim});
      k_rot_view = contiguous_view(k_rot.data(), dtype, Layout::BHSD, {1, kKvHeads, keys, kHeadDim});
    }
  }
};

}  // namespace

void measure_attention(MeasureContext& context, const AttentionCase& c, DType dtype, const std::vector<int>& threads,
                       int repetitions, const CosSinTable& table, size_t stream_bytes, const FmaPeaks& peaks) {
  AttentionBuffers buffers(dtype, c.queries, c.keys, c.prefill);
  const int64_t size = dtype_size(dtype);
  const auto base_row = [&](const std::string& name, const Timing& timing, int thread_count, double core_ghz) {
    Row row;
    row.name = name;
    row.workload = c.name;
    row.dtype = std::string(to_string(dtype));
    row.threads = thread_count;
    row.layout = "bhsd";
    row.median_ms = timing.median_ms;
    row.min_ms = timing.min_ms;
    row.target = context.target;
    row.repetitions = timing.repetitions;
    row.calls_per_repetition = timing.calls_per_repetition;
    row.core_ghz = core_ghz;
    return row;
  };
  for (const int thread_count : threads) {
    set_num_threads(thread_count);
    const double core_ghz = add_chain_ghz(kRowClockAdds);
    if (!c.prefill) {
      // The cache holds rotated keys (KvCache's layout): plain attention, bottom-right causal.
      // Timed in alternation with the copy floor and with the read stream over the same K and V
      // (what the cores can read: a decode only reads).
      const AttentionOptions options{.mask = Mask::Causal, .query_offset = c.keys - 1};
      const TripleTiming timed = time_with_two_references(
          [&] { attention(buffers.q_view, buffers.k_view, buffers.v_view, buffers.out_view, options); },
          [&] { context.streams.run(false, stream_bytes, thread_count); },
          [&] {  // out of line, in rotary_bandwidth: its loads cannot be dropped for an unused checksum
            (void)bandwidth::read_stream(buffers.k.data(), buffers.k.bytes());
            (void)bandwidth::read_stream(buffers.v.data(), buffers.v.bytes());
          },
          repetitions);
      Row row = base_row(c.name, timed.call, thread_count, core_ghz);
      row.shape = c.shape;
      row.bytes = c.kv_bytes(dtype);
      row.gb_per_s = gb_per_s(row.bytes, row.median_ms);
      row.baseline = "copy";
      row.baseline_gb_per_s = gb_per_s(2 * static_cast<int64_t>(stream_bytes), timed.reference.median_ms);
      row.ratio_to_copy = row.gb_per_s / row.baseline_gb_per_s;
      row.baseline_spread = std::max(spread(timed.reference), spread(timed.second_reference));
      row.read_gb_per_s = gb_per_s(static_cast<int64_t>(buffers.k.bytes() + buffers.v.bytes()),
                                   timed.second_reference.median_ms);
      row.ratio_to_read = row.gb_per_s / row.read_gb_per_s;
      peaks.compare(row, c.flops());
      context.add_row(std::move(row));
      continue;
    }
    // Prefill: fused RoPE against rotary::apply + attention, in alternation.
    std::vector<int64_t> positions(static_cast<size_t>(c.keys));
    std::iota(positions.begin(), positions.end(), int64_t{0});
    const AttentionOptions options{.mask = Mask::Causal};
    const AttentionRope rope{.table = &table, .q_positions = positions, .k_positions = positions};
    const PairedTiming paired = time_paired(
        [&] { attention(buffers.q_view, buffers.k_view, buffers.v_view, buffers.out_view, rope, options); },
        [&] {
          apply(buffers.q_view, buffers.k_view, buffers.q_rot_view, buffers.k_rot_view, Positions::arange(), table);
          attention(buffers.q_rot_view, buffers.k_rot_view, buffers.v_view, buffers.out_view, options);
        },
        repetitions);
    const int64_t call_bytes = (2 * c.queries * kQHeads + 2 * c.keys * kKvHeads) * kHeadDim * size;  // q k v out
    for (const bool fused : {true, false}) {
      Row row = base_row(fused ? c.name : c.name + "_unfused", fused ? paired.call : paired.reference, thread_count,
                         core_ghz);
      row.shape = fused ? c.shape : detail::concat(c.shape.substr(0, c.shape.find(", fused")),
                                                    ", rotary::apply on q k then attention");
      row.bytes = call_bytes;
      row.gb_per_s = gb_per_s(row.bytes, row.median_ms);
      row.baseline = "fma_peak";
      row.baseline_gb_per_s = std::nan("");
      row.ratio_to_copy = std::nan("");
      peaks.compare(row, c.flops());
      context.add_row(std::move(row));
    }
  }
}

}  // namespace rotary::cli::bench
