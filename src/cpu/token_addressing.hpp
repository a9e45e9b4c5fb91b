// src/cpu/token_addressing.hpp: where each token of a checked apply() call is (internal to
// rotary_cpu): which entry of the positions it reads, and where its heads are in a tensor.
//
// Tokens are numbered in per-token order: (batch, seq) row-major for BSHD / BHSD / SBHD, the
// packed order for THD; that is the order of per-token position values. A token's position
// comes from the one source Positions names (apply.hpp): values[stream * num_tokens + t]
// (PerToken; stream-major for M-RoPE / vision), values[b] + s (SequenceOffsets), or s
// (Arange), where b is the token's sequence (its batch row, or its cu_seqlens segment for THD)
// and s its index in that sequence.
// Its tensor coordinates are (batch row, seq index), or (0, t) for THD (batch 1, seq = tokens).
//
// Everything here reads the call's arguments as check_apply_arguments accepted them: every
// position entry exists and every coordinate is in range. Immutable after construction; any
// number of threads may read it at once.
#pragma once

#include <cstdint>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/tensor.hpp"

namespace rotary::cpu {

// The most position streams a token carries (M-RoPE's t, h, w).
inline constexpr int kMaxPositionStreams = 3;

struct TokenCoordinates {
  int64_t batch_index = 0;
  int64_t seq_index = 0;
};

class TokenAddressing {
 public:
  // `axes`: q's named axes (named_axes(q)); `thd`: q.layout == Layout::THD.
  TokenAddressing(const NamedAxes& axes, bool thd, const Positions& positions)
      : thd_(thd),
        seq_(axes.seq),
        num_tokens_(axes.batch * axes.seq),
        per_token_(positions.source == Positions::Source::PerToken ? positions.values.data() : nullptr),
        sequence_offsets_(positions.source == Positions::Source::SequenceOffsets ? positions.values.data() : nullptr),
        cu_seqlens_(positions.cu_seqlens.data()) {
    // THD: the sequence of each token, so that position() needs no search.
    if (thd_) {
      sequence_of_.resize(static_cast<size_t>(num_tokens_));
      const auto num_sequences = static_cast<int64_t>(positions.cu_seqlens.size()) - 1;
      for (int64_t b = 0; b < num_sequences; ++b) {
        for (int64_t t = cu_seqlens_[b]; t < cu_seqlens_[b + 1]; ++t) sequence_of_[static_cast<size_t>(t)] = b;
      }
    }
  }

  int64_t num_tokens() const { return num_tokens_; }

  // The position of token t in stream `stream` (0 for single-stream specs).
  int64_t position(int64_t t, int stream) const {
    if (per_token_ != nullptr) return per_token_[stream * num_tokens_ + t];
    const int64_t b = thd_ ? sequence_of_[static_cast<size_t>(t)] : t / seq_;
    const int64_t s = thd_ ? t - cu_seqlens_[b] : t % seq_;
    return sequence_offsets_ != nullptr ? sequence_offsets_[b] + s : s;
  }

  // Token t's coordinates in the tensors (all four views share q's batch and seq extents).
  TokenCoordinates coordinates(int64_t t) const {
    if (thd_) return {0, t};
    return {t / seq_, t % seq_};
  }

 private:
  bool thd_ = false;
  int64_t seq_ = 0;
  int64_t num_tokens_ = 0;
  const int64_t* per_token_ = nullptr;
  const int64_t* sequence_offsets_ = nullptr;
  const int64_t* cu_seqlens_ = nullptr;
  std::vector<int64_t> sequence_of_;  // THD only
};

// The element offset of a token's head 0, element 0 in a tensor with these axes.
inline int64_t token_offset_elems(TokenCoordinates at, const NamedAxes& axes) {
  return at.batch_index * axes.stride_batch + at.seq_index * axes.stride_seq;
}

}  // namespace rotary::cpu
