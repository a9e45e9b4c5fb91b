// src/cli/bench_workloads.cpp: the cases of `rotary bench` (bench_workloads.hpp).
#include "cli/bench_workloads.hpp"

#include <algorithm>
#include <random>

#include "rotary/error.hpp"

namespace rotary::cli::bench {
namespace {

int64_t product(const std::array<int64_t, 4>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Workload make_prefill(const std::string& name, int64_t tokens) {
  Workload w;
  w.name = name;
  w.layout = Layout::BSHD;
  w.q_shape = {1, tokens, kQHeads, kHeadDim};
  w.k_shape = {1, tokens, kKvHeads, kHeadDim};
  w.max_position = tokens - 1;
  w.shape = detail::concat("q [1,", tokens, ",32,128] k [1,", tokens, ",8,128], pos 0..", tokens - 1);
  w.torch_batch = 1;
  w.torch_tokens = tokens;
  w.torch_heads_q = kQHeads;
  return w;
}

Workload make_decode() {
  Workload w;
  w.name = "decode";
  w.layout = Layout::BSHD;
  w.q_shape = {kDecodeSequences, 1, kDecodeQHeads, kHeadDim};
  w.k_shape = {kDecodeSequences, 1, kKvHeads, kHeadDim};
  std::mt19937_64 generator(20240605);
  std::uniform_int_distribution<int64_t> position(0, kDecodePositionLimit - 1);
  for (int64_t s = 0; s < kDecodeSequences; ++s) w.per_token_positions.push_back(position(generator));
  w.max_position = *std::max_element(w.per_token_positions.begin(), w.per_token_positions.end());
  w.shape = detail::concat("q [64,1,40,128] k [64,1,8,128], 64 scattered pos < ", kDecodePositionLimit);
  w.torch_batch = kDecodeSequences;
  w.torch_tokens = 1;
  w.torch_heads_q = kDecodeQHeads;
  return w;
}

Workload make_varlen() {
  Workload w;
  w.name = "varlen";
  w.layout = Layout::THD;
  int64_t tokens = 0;
  w.cu_seqlens.push_back(0);
  for (int64_t length : kVarlenLengths) {
    tokens += length;
    w.cu_seqlens.push_back(tokens);
    w.max_position = std::max(w.max_position, length - 1);
  }
  w.q_shape = {tokens, kQHeads, kHeadDim, 1};
  w.k_shape = {tokens, kKvHeads, kHeadDim, 1};
  w.shape = detail::concat("q [", tokens, ",32,128] k [", tokens, ",8,128], ", kVarlenLengths.size(),
                           " seqs of 128..2560, pos from 0");
  return w;
}

}  // namespace

const std::vector<std::string> kWorkloadNames = {"prefill", "prefill_long", "decode", "varlen"};

int64_t Workload::q_elements() const { return product(q_shape); }
int64_t Workload::k_elements() const { return product(k_shape); }

Positions Workload::positions() const {
  if (!per_token_positions.empty()) return Positions::per_token(per_token_positions, cu_seqlens);
  return Positions::arange(cu_seqlens);
}

Workload make_workload(const std::string& name) {
  if (name == "prefill") return make_prefill(name, kPrefillTokens);
  if (name == "prefill_long") return make_prefill(name, kLongPrefillTokens);
  if (name == "decode") return make_decode();
  return make_varlen();
}

void fill_random(std::byte* data, DType dtype, int64_t count, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state] {  // splitmix64: fast enough for 10^8 elements
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = next();
    const float magnitude = 0.25f + 1.75f * static_cast<float>(bits >> 40) * 0x1.0p-24f;
    const float value = (bits & 1) ? -magnitude : magnitude;
    if (dtype == DType::BF16) {
      reinterpret_cast<uint16_t*>(data)[i] = float_to_bf16(value);
    } else if (dtype == DType::F16) {
      reinterpret_cast<uint16_t*>(data)[i] = float_to_f16(value);
    } else {
      reinterpret_cast<float*>(data)[i] = value;
    }
  }
}

}  // namespace rotary::cli::bench
