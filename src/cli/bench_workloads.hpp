// src/cli/bench_workloads.hpp: the cases `rotary bench` times: Llama-3-8B's shapes (head_dim 128,
// q 32 heads, k 8 heads) and their data.
//   prefill       BSHD, batch 1, 4096 tokens, positions 0..4095
//   prefill_long  the same with 32,768 tokens
//   decode        BSHD, 64 sequences x 1 token at scattered per-token positions, q 40 heads
//                 (a large model's decode step)
//   varlen        THD, 8 packed sequences of 128..2560 tokens (8192 in all) with cu_seqlens,
//                 positions from 0 in each sequence
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/tensor.hpp"

namespace rotary::cli::bench {

constexpr int64_t kHeadDim = 128;
constexpr int64_t kQHeads = 32;        // Llama-3-8B num_attention_heads
constexpr int64_t kKvHeads = 8;        // num_key_value_heads (GQA)
constexpr int64_t kDecodeQHeads = 40;  // a large model's decode step: 64 x 1 token, 40 heads
constexpr int64_t kDecodeSequences = 64;
constexpr int64_t kDecodePositionLimit = 32768;  // decode positions are drawn from [0, this)
constexpr int64_t kPrefillTokens = 4096;
constexpr int64_t kLongPrefillTokens = 32768;
// Mixed lengths, short and long interleaved; they sum to 8192 tokens.
constexpr std::array<int64_t, 8> kVarlenLengths = {2048, 512, 1536, 128, 1024, 2560, 256, 128};

// The kernel cases, in the order they run.
extern const std::vector<std::string> kWorkloadNames;

struct Workload {
  std::string name;
  Layout layout = Layout::BSHD;
  std::array<int64_t, 4> q_shape{};  // THD: (tokens, heads, dim, 1); contiguous_view reads 3
  std::array<int64_t, 4> k_shape{};
  std::vector<int64_t> per_token_positions;  // empty: position = index within the sequence
  std::vector<int64_t> cu_seqlens;           // THD only
  int64_t max_position = 0;
  std::string shape;  // for people
  // The same shape for the PyTorch peer (BSHD, positions arange(tokens)); 0 = not expressible.
  int64_t torch_batch = 0, torch_tokens = 0, torch_heads_q = 0;

  int64_t q_elements() const;
  int64_t k_elements() const;
  int64_t elements() const { return q_elements() + k_elements(); }
  // The workload's positions as rotary::apply takes them (pointing into this workload).
  Positions positions() const;
};

// One of kWorkloadNames.
Workload make_workload(const std::string& name);

// Random non-zero values: sign random, magnitude in [0.25, 2), then rounded to the dtype (never
// zero, never subnormal: subnormal results cost x86 a microcode assist per lane).
void fill_random(std::byte* data, DType dtype, int64_t count, uint64_t seed);

}  // namespace rotary::cli::bench
