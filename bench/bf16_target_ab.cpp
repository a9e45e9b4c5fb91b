// bench/bf16_target_ab.cpp: AVX3_BF16 (the CPU's bf16 conversions) against AVX3 (the integer
// rounding) in one process, interleaved, on `rotary bench`'s shapes, so that both see the same
// machine load: a shared or busy machine moves every absolute figure, much less the ratios of
// samples taken next to each other.
//
// Per round, for each target in turn (forced with force_cpu_target): the in-place copy stream
// over the bf16 prefill's bytes (the in-place floor, copy_inplace of src/cpu/bandwidth), the
// bf16 prefill in place (4096 tokens, q 32 heads, k 8, head_dim 128), the decode step (64 x 1
// token, q 40 heads) in bf16 and f32, in place and out of place. Each sample is one call
// (prefill, stream) or the mean of kDecodeCalls calls back to back (decode). Prints, per case and
// target, the median and the minimum over the rounds, and the medians of the per-round ratios
// prefill / copy_inplace and bf16 decode / f32 decode. 1 thread.
//
// Usage: rotary_bf16_target_ab [rounds] (default 15); AB_CPU_TIME=1 times thread CPU time. Needs a CPU with AVX3_BF16 (cpu_targets()).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <time.h>

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
using Clock = std::chrono::steady_clock;

constexpr int64_t kHeadDim = 128;
constexpr int kDecodeCalls = 200;

struct Call {
  rotary::bandwidth::Buffer q, k, q_out, k_out;
  rotary::TensorView qv, kv, qov, kov;
  rotary::Positions positions;
};

Call make_call(DType dtype, std::array<int64_t, 4> q_shape, std::array<int64_t, 4> k_shape, bool in_place,
               rotary::Positions positions) {
  const int64_t q_n = q_shape[0] * q_shape[1] * q_shape[2] * q_shape[3];
  const int64_t k_n = k_shape[0] * k_shape[1] * k_shape[2] * k_shape[3];
  const auto size = static_cast<size_t>(rotary::dtype_size(dtype));
  Call c{rotary::bandwidth::Buffer(static_cast<size_t>(q_n) * size), rotary::bandwidth::Buffer(static_cast<size_t>(k_n) * size),
         rotary::bandwidth::Buffer(in_place ? 0 : static_cast<size_t>(q_n) * size),
         rotary::bandwidth::Buffer(in_place ? 0 : static_cast<size_t>(k_n) * size), {}, {}, {}, {}, positions};
  rotary::bench_inputs::fill_random(c.q.data(), dtype, q_n, 1, 0.25f, 2.0f);
  rotary::bench_inputs::fill_random(c.k.data(), dtype, k_n, 2, 0.25f, 2.0f);
  c.qv = rotary::contiguous_view(c.q.data(), dtype, Layout::BSHD, q_shape);
  c.kv = rotary::contiguous_view(c.k.data(), dtype, Layout::BSHD, k_shape);
  c.qov = in_place ? c.qv : rotary::contiguous_view(c.q_out.data(), dtype, Layout::BSHD, q_shape);
  c.kov = in_place ? c.kv : rotary::contiguous_view(c.k_out.data(), dtype, Layout::BSHD, k_shape);
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  const std::vector<std::string> available = rotary::cpu_targets();
  if (std::find(available.begin(), available.end(), "AVX3_BF16") == available.end()) {
    std::printf("AVX3_BF16 is not available on this CPU or build: nothing to compare\n");
    return 0;
  }
  rotary::set_num_threads(1);
  // The preset's frequencies; the head counts are the bench's own (decode: 40 q heads), as in
  // `rotary bench`.
  rotary::RopeSpec spec = rotary::preset(rotary::kDefaultPreset).spec;
  spec.num_attention_heads = 0;
  spec.num_key_value_heads = 0;
  const rotary::CosSinTable table(spec, {.precision = rotary::Precision::Exact, .storage = rotary::Storage::Stored});
  table.reserve_positions(32768);
  std::vector<int64_t> decode_positions;
  std::mt19937_64 generator(20240605);
  std::uniform_int_distribution<int64_t> position(0, 32767);
  for (int s = 0; s < 64; ++s) decode_positions.push_back(position(generator));

  Call prefill = make_call(DType::BF16, {1, 4096, 32, kHeadDim}, {1, 4096, 8, kHeadDim}, true, rotary::Positions::arange());
  const size_t prefill_bytes = prefill.q.bytes() + prefill.k.bytes();
  rotary::bandwidth::Buffer stream(prefill_bytes);
  rotary::bandwidth::copy_inplace_init(stream.data(), prefill_bytes);
  std::map<std::string, Call> decode;
  for (const bool in_place : {true, false}) {
    for (const DType dtype : {DType::BF16, DType::F32}) {
      const std::string name = std::string("decode ") + (dtype == DType::BF16 ? "bf16" : "f32 ") +
                               (in_place ? " in place" : " out of place");
      decode.emplace(name, make_call(dtype, {64, 1, 40, kHeadDim}, {64, 1, 8, kHeadDim}, in_place,
                                     rotary::Positions::per_token(decode_positions)));
    }
  }
  const auto apply = [&](Call& c) { rotary::apply(c.qv, c.kv, c.qov, c.kov, c.positions, table); };
  // Wall time, or with $AB_CPU_TIME=1 this thread's CPU time (on a machine shared with other
  // busy processes, the time this thread ran: preemption drops out, memory contention stays).
  const bool cpu_time = std::getenv("AB_CPU_TIME") != nullptr && std::string(std::getenv("AB_CPU_TIME")) == "1";
  const auto now = [cpu_time] {
    if (cpu_time) {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    }
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  };
  const auto seconds_of = [&](auto&& body) {
    const double t0 = now();
    body();
    return now() - t0;
  };

  std::map<std::string, std::vector<double>> samples;  // "case | target" -> seconds
  std::map<std::string, std::vector<double>> ratios;
  const std::vector<std::string> targets = {"AVX3", "AVX3_BF16"};
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& target : targets) {
      rotary::force_cpu_target(target);
      apply(prefill);  // warm
      rotary::bandwidth::copy_inplace_stream(stream.data(), prefill_bytes, 1);
      const double copy = seconds_of([&] { rotary::bandwidth::copy_inplace_stream(stream.data(), prefill_bytes, 1); });
      const double pre = seconds_of([&] { apply(prefill); });
      samples["copy_inplace (bf16 prefill bytes) | " + target].push_back(copy);
      samples["prefill bf16 in place | " + target].push_back(pre);
      ratios["prefill bf16 in place / copy_inplace (x copy = inverse) | " + target].push_back(copy / pre);
      std::map<std::string, double> this_round;
      for (auto& [name, call] : decode) {
        apply(call);
        const double s = seconds_of([&] {
                           for (int i = 0; i < kDecodeCalls; ++i) apply(call);
                         }) /
                         kDecodeCalls;
        samples[name + " | " + target].push_back(s);
        this_round[name] = s;
      }
      ratios["decode bf16 / f32, in place | " + target].push_back(this_round["decode bf16 in place"] /
                                                                 this_round["decode f32  in place"]);
      ratios["decode bf16 / f32, out of place | " + target].push_back(this_round["decode bf16 out of place"] /
                                                                      this_round["decode f32  out of place"]);
    }
  }
  rotary::force_cpu_target("");
  std::printf("%d rounds, 1 thread, targets interleaved (AVX3, AVX3_BF16) in each round; %s\n", rounds,
              cpu_time ? "thread CPU time" : "wall time");
  std::printf("%-58s %12s %12s\n", "case | target", "median", "min");
  for (const auto& [name, v] : samples) {
    const bool micro = name.rfind("decode", 0) == 0;
    const double scale = micro ? 1e6 : 1e3;
    std::printf("%-58s %9.2f %s %9.2f %s\n", name.c_str(), median(v) * scale, micro ? "us" : "ms",
                *std::min_element(v.begin(), v.end()) * scale, micro ? "us" : "ms");
  }
  std::printf("%-66s %8s\n", "ratio (per round, median)", "median");
  for (const auto& [name, v] : ratios) std::printf("%-66s %8.3f\n", name.c_str(), median(v));
  return 0;
}
