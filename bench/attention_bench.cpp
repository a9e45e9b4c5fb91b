// bench/attention_bench.cpp: rotary::attention on Llama-3-8B shapes (Google Benchmark): 32 q heads,
// 8 kv heads, head_dim 128, BSHD, batch 1.
//   BM_Decode        1 query at position 4095 against a 4,096-token cache (kv read once per call)
//   BM_DecodeFused   the same with un-rotated q / k and RoPE fused into the loads (llama-3.1-8b
//                    table, Exact, Stored)
//   BM_Prefill       causal self-attention over 1,024 or 4,096 tokens (state.range(2))
//   BM_PrefillFused  the same with RoPE fused
//   BM_DecodeSplitAB the decode split over keys against the same call unsplit, in alternation
//                    (caches of 4,096 and 32,768 tokens)
//   BM_DecodeBf16DotAB  bf16 decode with vdpbf16ps scores allowed against the float32 path,
//                    likewise; at head dim 128 K is read in place, where the decode no longer
//                    takes vdpbf16ps, so both sides now time the same path (a check that it does)
//   BM_Decode16BitKInPlaceAB  bf16 / f16 decode with K read in place (widened as it loads)
//                    against K widened into the tile first, likewise (vdpbf16ps off)
//   BM_PrefillBf16DotAB bf16 causal prefill (unfused: q / k as stored) with vdpbf16ps scores in
//                    the transposed form against the float32 form, likewise (1,024 / 4,096 tokens)
//   BM_PrefillAmxAB  the same prefill with its scores and p.v on AMX tiles (amx_bf16.hpp) against
//                    the vdpbf16ps scores and float32 p.v, likewise; on a CPU without AMX both
//                    sides time the vdpbf16ps (or float32) path
//   BM_PrefillFusedAmxAB the same with RoPE fused (AMX takes q' and k' as bf16 hi + lo) against
//                    the float32 form
//   BM_CopyKv        the copy stream (src/cpu/bandwidth) over the decode's K + V bytes: the
//                    bandwidth floor the decode is compared with
// Arguments: dtype (0 float32, 1 bfloat16, 2 float16), threads (set_num_threads / stream threads).
// Counters: bytes_per_second = K + V bytes read per call (for BM_CopyKv: the bytes copied, so the
// two GB/s columns compare directly: decode at the floor would show the copy's figure);
// GFLOPs = 4 * q_heads * head_dim * (visible query-key pairs) per call (2 for q.k, 2 for p.v).
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "random_inputs.hpp"
#include "cpu/bandwidth/buffer.hpp"
#include "cpu/bandwidth/streams.hpp"
#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "attention/amx_bf16.hpp"  // use_amx_bf16: the A/B of the AMX prefill
#include "attention/bf16_dot.hpp"  // use_avx512_bf16: the A/B of the bf16 scores
#include "attention/kernels.hpp"   // k_in_place_16bit: the A/B of the 16-bit K loads
#include "attention/plan.hpp"      // split_over_keys: the A/B of the decode split

namespace {

using rotary::DType;
using rotary::Layout;

constexpr int64_t kHeadDim = 128;
constexpr int64_t kQHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kCacheTokens = 4096;

DType dtype_arg(const benchmark::State& state) {
  return state.range(0) == 0 ? DType::F32 : state.range(0) == 1 ? DType::BF16 : DType::F16;
}

const rotary::CosSinTable& llama_table() {
  static const rotary::CosSinTable table(rotary::preset(rotary::kDefaultPreset).spec,
                                         {.precision = rotary::Precision::Exact, .storage = rotary::Storage::Stored});
  static const bool reserved = (table.reserve_positions(kCacheTokens), true);
  (void)reserved;
  return table;
}

struct Buffers {
  rotary::bandwidth::Buffer q, k, v, out;
  rotary::TensorView q_view, k_view, v_view, out_view;
  Buffers(DType dtype, int64_t q_tokens, int64_t kv_tokens)
      : q(static_cast<size_t>(q_tokens * kQHeads * kHeadDim * rotary::dtype_size(dtype))),
        k(static_cast<size_t>(kv_tokens * kKvHeads * kHeadDim * rotary::dtype_size(dtype))),
        v(k.bytes()),
        out(q.bytes()) {
    rotary::bench_inputs::fill_random(q.data(), dtype, q_tokens * kQHeads * kHeadDim, 1, 0.05f, 0.5f);  // scores of a few units
    rotary::bench_inputs::fill_random(k.data(), dtype, kv_tokens * kKvHeads * kHeadDim, 2, 0.05f, 0.5f);
    rotary::bench_inputs::fill_random(v.data(), dtype, kv_tokens * kKvHeads * kHeadDim, 3, 0.05f, 0.5f);
    q_view = rotary::contiguous_view(q.data(), dtype, Layout::BSHD, {1, q_tokens, kQHeads, kHeadDim});
    k_view = rotary::contiguous_view(k.data(), dtype, Layout::BSHD, {1, kv_tokens, kKvHeads, kHeadDim});
    v_view = rotary::contiguous_view(v.data(), dtype, Layout::BSHD, {1, kv_tokens, kKvHeads, kHeadDim});
    out_view = rotary::contiguous_view(out.data(), dtype, Layout::BSHD, {1, q_tokens, kQHeads, kHeadDim});
  }
};

void report(benchmark::State& state, int64_t kv_bytes, double pairs) {
  state.SetBytesProcessed(state.iterations() * kv_bytes);
  state.counters["GFLOPs"] = benchmark::Counter(4.0 * kQHeads * kHeadDim * pairs * 1e-9 * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
  state.SetLabel(rotary::current_cpu_target());
}

void run(benchmark::State& state, int64_t q_tokens, bool fused) {
  const DType dtype = dtype_arg(state);
  rotary::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t kv_tokens = q_tokens == 1 ? kCacheTokens : q_tokens;
  Buffers b(dtype, q_tokens, kv_tokens);
  // Decode: the query at position kv_tokens - 1 (bottom-right causal); prefill: positions 0..n-1.
  const rotary::AttentionOptions options{.mask = rotary::Mask::Causal, .query_offset = kv_tokens - q_tokens};
  std::vector<int64_t> q_positions(static_cast<size_t>(q_tokens)), k_positions(static_cast<size_t>(kv_tokens));
  for (int64_t i = 0; i < q_tokens; ++i) q_positions[static_cast<size_t>(i)] = kv_tokens - q_tokens + i;
  for (int64_t j = 0; j < kv_tokens; ++j) k_positions[static_cast<size_t>(j)] = j;
  const rotary::AttentionRope rope{.table = &llama_table(), .q_positions = q_positions, .k_positions = k_positions};
  const auto call = [&] {
    if (fused) {
      rotary::attention(b.q_view, b.k_view, b.v_view, b.out_view, rope, options);
    } else {
      rotary::attention(b.q_view, b.k_view, b.v_view, b.out_view, options);
    }
  };
  call();  // warm-up (and the table rows)
  for (auto _ : state) {
    call();
    benchmark::ClobberMemory();
  }
  const double pairs = q_tokens == 1 ? static_cast<double>(kv_tokens)
                                     : static_cast<double>(q_tokens) * static_cast<double>(q_tokens + 1) / 2;
  report(state, static_cast<int64_t>(b.k.bytes() + b.v.bytes()), pairs);
}

void BM_Decode(benchmark::State& state) { run(state, 1, false); }
void BM_DecodeFused(benchmark::State& state) { run(state, 1, true); }
void BM_Prefill(benchmark::State& state) { run(state, state.range(2), false); }
void BM_PrefillFused(benchmark::State& state) { run(state, state.range(2), true); }

// A call with an internal switch on against the same call with it off, timed in alternation
// within each iteration (this machine is shared: two runs minutes apart see different loads).
// Counters: on_us and off_us per call, the KV GB/s of each, and GFLOP/s of each (4 * q_heads *
// head_dim per visible query-key pair, as report() counts). Arguments: dtype, threads, tokens
// (decode: the cache, one query at its end; prefill: causal self-attention over that many). The
// switches:
//   BM_DecodeSplitAB    the split over keys (flash-decoding, src/attention/plan.hpp key_split)
//   BM_DecodeBf16DotAB  the bf16 scores through vdpbf16ps (src/attention/bf16_dot.hpp; off: the
//                       float32 path; the same on a CPU without AVX512_BF16)
//   BM_PrefillBf16DotAB the same switch on the prefill (the transposed form's scores)
void switch_ab(benchmark::State& state, std::atomic<bool>& knob, bool prefill, bool fused = false) {
  const DType dtype = dtype_arg(state);
  rotary::set_num_threads(static_cast<int>(state.range(1)));
  const int64_t kv_tokens = state.range(2), q_tokens = prefill ? kv_tokens : 1;
  Buffers b(dtype, q_tokens, kv_tokens);
  const rotary::AttentionOptions options{.mask = rotary::Mask::Causal, .query_offset = kv_tokens - q_tokens};
  std::vector<int64_t> q_positions(static_cast<size_t>(q_tokens)), k_positions(static_cast<size_t>(kv_tokens));
  for (int64_t i = 0; i < q_tokens; ++i) q_positions[static_cast<size_t>(i)] = kv_tokens - q_tokens + i;
  for (int64_t j = 0; j < kv_tokens; ++j) k_positions[static_cast<size_t>(j)] = j;
  const rotary::AttentionRope rope{.table = &llama_table(), .q_positions = q_positions, .k_positions = k_positions};
  using Clock = std::chrono::steady_clock;
  double on_s = 0, off_s = 0;
  const auto timed = [&](bool on) {
    knob = on;
    const auto start = Clock::now();
    if (fused) {
      rotary::attention(b.q_view, b.k_view, b.v_view, b.out_view, rope, options);
    } else {
      rotary::attention(b.q_view, b.k_view, b.v_view, b.out_view, options);
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  timed(true), timed(false);  // warm-up
  for (auto _ : state) {
    on_s += timed(true);
    off_s += timed(false);
    benchmark::ClobberMemory();
  }
  knob = true;
  const auto n = static_cast<double>(state.iterations());
  const double kv_bytes = static_cast<double>(b.k.bytes() + b.v.bytes());
  const double pairs = prefill ? static_cast<double>(q_tokens) * static_cast<double>(q_tokens + 1) / 2
                               : static_cast<double>(kv_tokens);
  const double flops = 4.0 * kQHeads * kHeadDim * pairs;
  state.counters["on_us"] = on_s / n * 1e6;
  state.counters["off_us"] = off_s / n * 1e6;
  state.counters["on_GBps"] = kv_bytes / (on_s / n) / 1e9;
  state.counters["off_GBps"] = kv_bytes / (off_s / n) / 1e9;
  state.counters["on_GFLOPs"] = flops / (on_s / n) / 1e9;
  state.counters["off_GFLOPs"] = flops / (off_s / n) / 1e9;
  state.SetLabel(rotary::current_cpu_target());
}
void BM_DecodeSplitAB(benchmark::State& state) { switch_ab(state, rotary::attention_internal::split_over_keys, false); }
void BM_DecodeBf16DotAB(benchmark::State& state) { switch_ab(state, rotary::attention_internal::use_avx512_bf16, false); }
void BM_PrefillBf16DotAB(benchmark::State& state) { switch_ab(state, rotary::attention_internal::use_avx512_bf16, true); }
void BM_PrefillAmxAB(benchmark::State& state) { switch_ab(state, rotary::attention_internal::use_amx_bf16, true); }
void BM_PrefillFusedAmxAB(benchmark::State& state) {
  switch_ab(state, rotary::attention_internal::use_amx_bf16, true, true);
}
void BM_Decode16BitKInPlaceAB(benchmark::State& state) {
  rotary::attention_internal::use_avx512_bf16 = false;  // the bf16 scores then widen K, as f16's do
  switch_ab(state, rotary::attention_internal::k_in_place_16bit, false);
  rotary::attention_internal::use_avx512_bf16 = true;
}

void BM_CopyKv(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(2 * kCacheTokens * kKvHeads * kHeadDim * rotary::dtype_size(dtype_arg(state)));
  const int threads = static_cast<int>(state.range(1));
  rotary::bandwidth::Buffer src(bytes), dst(bytes);
  rotary::bandwidth::copy_inplace_init(src.data(), bytes);
  rotary::bandwidth::copy_stream(dst.data(), src.data(), bytes, threads);  // warm-up
  for (auto _ : state) {
    rotary::bandwidth::copy_stream(dst.data(), src.data(), bytes, threads);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.SetLabel(rotary::bandwidth::stream_target());
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "threads"});
  for (int64_t dtype : {0, 1})
    for (int64_t threads : {1, 2}) b->Args({dtype, threads});
}

void PrefillArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "threads", "tokens"});
  for (int64_t tokens : {1024, 4096})
    for (int64_t dtype : {0, 1})
      for (int64_t threads : {1, 2}) b->Args({dtype, threads, tokens});
}

BENCHMARK(BM_CopyKv)->Apply(DecodeArgs)->UseRealTime();
BENCHMARK(BM_Decode)->Apply(DecodeArgs)->UseRealTime();
BENCHMARK(BM_DecodeFused)->Apply(DecodeArgs)->UseRealTime();
BENCHMARK(BM_DecodeSplitAB)->ArgNames({"dtype", "threads", "cache"})->ArgsProduct({{0, 1}, {1, 2}, {4096, 32768}})->UseRealTime();
BENCHMARK(BM_DecodeBf16DotAB)->ArgNames({"dtype", "threads", "cache"})->ArgsProduct({{1}, {1, 2}, {4096, 32768}})->UseRealTime();
BENCHMARK(BM_Decode16BitKInPlaceAB)->ArgNames({"dtype", "threads", "cache"})->ArgsProduct({{1, 2}, {1, 2}, {4096, 32768}})->UseRealTime();
BENCHMARK(BM_PrefillBf16DotAB)->ArgNames({"dtype", "threads", "tokens"})->ArgsProduct({{1}, {1, 2}, {1024, 4096}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillAmxAB)->ArgNames({"dtype", "threads", "tokens"})->ArgsProduct({{1}, {1, 2}, {1024, 4096}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillFusedAmxAB)->ArgNames({"dtype", "threads", "tokens"})->ArgsProduct({{1}, {1, 2}, {1024, 4096}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)->Apply(PrefillArgs)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillFused)->Apply(PrefillArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
