// bench/apply_bench.cpp: rotary::apply on Llama-3-8B shapes (Google Benchmark), next to the
// memory streams it is bounded by.
//
// The same cases as `rotary bench` (src/cli/bench_command.cpp), which is the one to read for
// their goals: it prints the ratios to the copy bandwidth measured in the same run.
// Here Google Benchmark's statistics (--benchmark_repetitions, aggregates) are the point.
//   BM_Prefill   BSHD, batch 1, 4096 tokens, q 32 heads, k 8 heads, head_dim 128, positions 0..4095
//   BM_Decode    BSHD, 64 sequences x 1 token at scattered positions, q 40 heads
//   BM_Varlen    THD, 8 packed sequences of 128..2560 tokens (8192), cu_seqlens, positions from 0
//   BM_Copy / BM_Memcpy / BM_CopyInPlace  the streams of src/cpu/bandwidth/streams.hpp over q + k
//                of BM_Prefill: streaming-store copy (the out-of-place floor), glibc's memcpy (for
//                reference: at this size it uses ordinary stores here, see streams.hpp),
//                read-modify-write in place (the in-place floor); copy and in place each
//                sequentially and four pages at a time (the faster is the floor), with the
//                kernels' SIMD target (the label; $ROTARY_CPU_TARGET forces both)
// Arguments: dtype (0 float32, 1 bfloat16), threads (set_num_threads, or std::threads for the
// streams), in_place (output view == input view). Bytes processed per call = (q + k elements) x
// element size x 2 (read once, written once), so bytes_per_second is the GB/s of `rotary bench`.
// The table (llama-3.1-8b, Exact, Stored) is built once, before any timing.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "random_inputs.hpp"
#include "cpu/bandwidth/buffer.hpp"
#include "cpu/bandwidth/streams.hpp"
#include "rotary/apply.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace {

using rotary::DType;
using rotary::Layout;

constexpr int64_t kHeadDim = 128;
constexpr int64_t kQHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kDecodeQHeads = 40;  // the decode case: 64 x 1 token, 40 heads (goal: < 50 us)
constexpr int64_t kDecodeSequences = 64;
constexpr int64_t kPrefillTokens = 4096;
constexpr int64_t kMaxPosition = 32767;  // decode positions are drawn from [0, this]
constexpr std::array<int64_t, 8> kVarlenLengths = {2048, 512, 1536, 128, 1024, 2560, 256, 128};

// The preset's frequencies; the head counts are the bench's own (decode: 40 q heads), as in
// `rotary bench`: unset, so that apply() does not hold the tensors to the preset's 32 / 8.
rotary::RopeSpec bench_spec() {
  rotary::RopeSpec spec = rotary::preset(rotary::kDefaultPreset).spec;
  spec.num_attention_heads = 0;
  spec.num_key_value_heads = 0;
  return spec;
}

const rotary::CosSinTable& llama_table() {
  static const rotary::CosSinTable table(bench_spec(),
                                         {.precision = rotary::Precision::Exact, .storage = rotary::Storage::Stored});
  static const bool reserved = (table.reserve_positions(kMaxPosition + 1), true);
  (void)reserved;
  return table;
}

DType dtype_arg(const benchmark::State& state) { return state.range(0) == 0 ? DType::F32 : DType::BF16; }

int64_t product(const std::array<int64_t, 4>& shape, Layout layout) {
  const int rank = rotary::layout_rank(layout);
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

// Times apply() on q / k of the given shapes, out of place or in place per state.range(2).
void run_apply(benchmark::State& state, Layout layout, std::array<int64_t, 4> q_shape, std::array<int64_t, 4> k_shape,
               const rotary::Positions& positions) {
  const DType dtype = dtype_arg(state);
  const int threads = static_cast<int>(state.range(1));
  const bool in_place = state.range(2) != 0;
  const int64_t q_elements = product(q_shape, layout);
  const int64_t k_elements = product(k_shape, layout);
  const int64_t element_bytes = rotary::dtype_size(dtype);
  rotary::bandwidth::Buffer q(static_cast<size_t>(q_elements * element_bytes));
  rotary::bandwidth::Buffer k(static_cast<size_t>(k_elements * element_bytes));
  rotary::bandwidth::Buffer q_out(in_place ? 0 : q.bytes());
  rotary::bandwidth::Buffer k_out(in_place ? 0 : k.bytes());
  rotary::bench_inputs::fill_random(q.data(), dtype, q_elements, 1, 0.25f, 2.0f);
  rotary::bench_inputs::fill_random(k.data(), dtype, k_elements, 2, 0.25f, 2.0f);
  const rotary::TensorView q_view = rotary::contiguous_view(q.data(), dtype, layout, q_shape);
  const rotary::TensorView k_view = rotary::contiguous_view(k.data(), dtype, layout, k_shape);
  const rotary::TensorView q_out_view =
      in_place ? q_view : rotary::contiguous_view(q_out.data(), dtype, layout, q_shape);
  const rotary::TensorView k_out_view =
      in_place ? k_view : rotary::contiguous_view(k_out.data(), dtype, layout, k_shape);
  const rotary::CosSinTable& table = llama_table();
  rotary::set_num_threads(threads);
  rotary::apply(q_view, k_view, q_out_view, k_out_view, positions, table);  // warm-up
  for (auto _ : state) {
    rotary::apply(q_view, k_view, q_out_view, k_out_view, positions, table);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (q_elements + k_elements) * element_bytes * 2);
  state.SetLabel(rotary::current_cpu_target());
}

void BM_Prefill(benchmark::State& state) {
  run_apply(state, Layout::BSHD, {1, kPrefillTokens, kQHeads, kHeadDim}, {1, kPrefillTokens, kKvHeads, kHeadDim},
            rotary::Positions::arange());  // positions 0..4095: the index within the sequence
}

void BM_Decode(benchmark::State& state) {
  static const std::vector<int64_t> positions = [] {
    std::mt19937_64 generator(20240605);
    std::uniform_int_distribution<int64_t> position(0, kMaxPosition);
    std::vector<int64_t> drawn;
    for (int64_t s = 0; s < kDecodeSequences; ++s) drawn.push_back(position(generator));
    return drawn;
  }();
  run_apply(state, Layout::BSHD, {kDecodeSequences, 1, kDecodeQHeads, kHeadDim},
            {kDecodeSequences, 1, kKvHeads, kHeadDim}, rotary::Positions::per_token(positions));
}

void BM_Varlen(benchmark::State& state) {
  static const std::vector<int64_t> cu_seqlens = [] {
    std::vector<int64_t> offsets{0};
    for (int64_t length : kVarlenLengths) offsets.push_back(offsets.back() + length);
    return offsets;
  }();
  const int64_t tokens = cu_seqlens.back();
  run_apply(state, Layout::THD, {tokens, kQHeads, kHeadDim, 1}, {tokens, kKvHeads, kHeadDim, 1},
            rotary::Positions::arange(cu_seqlens));
}

// The streams over q + k of BM_Prefill in the dtype given (bytes moved = 2 x buffer).
size_t prefill_bytes(DType dtype) {
  return static_cast<size_t>(kPrefillTokens * (kQHeads + kKvHeads) * kHeadDim * rotary::dtype_size(dtype));
}

// The streams take a fourth argument, the access pattern: 0 sequential, 1 four pages at a time
// (streams.hpp; which is faster depends on the machine, and `rotary bench` takes the faster).
rotary::bandwidth::Pattern pattern_arg(const benchmark::State& state) {
  return state.range(2) == 0 ? rotary::bandwidth::Pattern::Sequential : rotary::bandwidth::Pattern::FourPages;
}

void BM_Copy(benchmark::State& state) {
  const size_t bytes = prefill_bytes(dtype_arg(state));
  const int threads = static_cast<int>(state.range(1));
  const rotary::bandwidth::Pattern pattern = pattern_arg(state);
  rotary::bandwidth::Buffer src(bytes);
  rotary::bandwidth::Buffer dst(bytes);
  rotary::bandwidth::copy_inplace_init(src.data(), bytes);
  rotary::bandwidth::copy_stream(dst.data(), src.data(), bytes, threads, pattern);  // warm-up
  for (auto _ : state) {
    rotary::bandwidth::copy_stream(dst.data(), src.data(), bytes, threads, pattern);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes) * 2);
  state.SetLabel(rotary::bandwidth::stream_target());
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = prefill_bytes(dtype_arg(state));
  const int threads = static_cast<int>(state.range(1));
  rotary::bandwidth::Buffer src(bytes);
  rotary::bandwidth::Buffer dst(bytes);
  rotary::bandwidth::copy_inplace_init(src.data(), bytes);
  rotary::bandwidth::memcpy_stream(dst.data(), src.data(), bytes, threads);  // warm-up
  for (auto _ : state) {
    rotary::bandwidth::memcpy_stream(dst.data(), src.data(), bytes, threads);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes) * 2);
}

void BM_CopyInPlace(benchmark::State& state) {
  const size_t bytes = prefill_bytes(dtype_arg(state));
  const int threads = static_cast<int>(state.range(1));
  const rotary::bandwidth::Pattern pattern = pattern_arg(state);
  rotary::bandwidth::Buffer data(bytes);
  rotary::bandwidth::copy_inplace_init(data.data(), bytes);
  rotary::bandwidth::copy_inplace_stream(data.data(), bytes, threads, pattern);  // warm-up
  for (auto _ : state) {
    rotary::bandwidth::copy_inplace_stream(data.data(), bytes, threads, pattern);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes) * 2);
  state.SetLabel(rotary::bandwidth::stream_target());
}

// dtype x threads x in_place.
void KernelArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "threads", "in_place"});
  for (int64_t dtype : {0, 1}) {
    for (int64_t threads : {1, 2}) {
      for (int64_t in_place : {0, 1}) b->Args({dtype, threads, in_place});
    }
  }
}

void StreamArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "threads"});
  for (int64_t dtype : {0, 1}) {
    for (int64_t threads : {1, 2}) b->Args({dtype, threads});
  }
}

// dtype x threads x pattern (0 sequential, 1 four pages at a time).
void PatternStreamArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "threads", "pattern"});
  for (int64_t dtype : {0, 1}) {
    for (int64_t threads : {1, 2}) {
      for (int64_t pattern : {0, 1}) b->Args({dtype, threads, pattern});
    }
  }
}

BENCHMARK(BM_Copy)->Apply(PatternStreamArgs)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memcpy)->Apply(StreamArgs)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CopyInPlace)->Apply(PatternStreamArgs)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Prefill)->Apply(KernelArgs)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Apply(KernelArgs)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Varlen)->Apply(KernelArgs)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
