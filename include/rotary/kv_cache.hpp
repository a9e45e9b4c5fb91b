// include/rotary/kv_cache.hpp: a KV cache for attention with RoPE: keys stored rotated at their
// positions, values beside them, per-sequence lengths; prefill, decode and llama.cpp's context
// shift. docs/attention.md, "The KV cache", has the layout, the shift identity and its error
// analysis, and what is refused and why.
//
// Memory layout (owned, C-contiguous, one block for K and one for V):
//   keys    [batch][kv_heads][capacity][head_dim]     storage dtype (F32 / BF16 / F16)
//   values  [batch][kv_heads][capacity][v_head_dim]
//   positions [batch][capacity]                        int64, the position of each slot
// Sequence b holds slots [0, length(b)); slot j of sequence b holds the key rotated at
// position(b, j), i.e. rotary::apply's forward rotation with the table's row (attention_scaling
// included), rounded once to the storage dtype. Positions in a sequence strictly increase with
// the slot. keys() / values() view the blocks as BHSD with seq = capacity.
//
// attend() rotates the new queries at the positions of the last q_len slots of each sequence (the
// tokens just appended), then runs rotary::attention (attention.hpp, the fast path) over the
// cached keys: kv_lengths = length(b), causal with query offset length(b) - q_len
// (bottom-right), so query i sees the slots up to its own. The keys are already rotated, so the
// fused-RoPE overload does not apply: it would rotate them a second time.
//
// Context shift (llama.cpp's llama_kv_cache_seq_rm + seq_add(-n_discard), the "context shift" of
// llama-server / main): keep slots [0, n_keep), drop [n_keep, n_keep + n_discard), move the rest
// down by n_discard slots and rotate each moved key by -n_discard in place. Exact because, per
// pair i with frequency theta_i (independent of the sequence length),
//     R(p - d) = R(-d) R(p),    R(p) = [[cos p theta_i, -sin p theta_i], [sin p theta_i, cos p theta_i]]
// (angles add), and a cached key is s R(p) k0 (s = attention_scaling), so s R(p - d) k0 =
// R(-d) (s R(p) k0): one rotation by the delta, UNSCALED. The table's row at d holds s cos(d
// theta_i) and s sin(d theta_i); the shift uses that row's float64 values (row_f64) divided by s,
// so a key is not multiplied by s a second time (YaRN's s = 1.1386 for Qwen2.5 would otherwise
// scale every moved key by 13.9 %). The rotation runs in float64 and rounds once to storage.
//
// Refused, with a message that says why:
//   - at construction: M-RoPE / 2-D vision (spec.axes: a token has several positions, a shift of
//     one stream is not a rotation of the whole key) and xPos (spec.xpos: keys carry the factor
//     zeta^-e(p), e(p) = (p - L//2)/scale_base, which a rotation does not change);
//   - sequence-dependent frequencies (dynamic NTK, LongRoPE: frequencies.hpp sequence_dependent):
//     the cache's keys are rotated with its table's frequencies, so an append is refused when the
//     sequence's new length (largest position + 1) would select other frequencies than the
//     table's (table.serves_seq_len): dynamic NTK past max_position_embeddings, LongRoPE across
//     original_max_position_embeddings. Transformers switches frequency set there and every
//     cached key would have to be rotated with the new frequencies (not a delta rotation); this
//     cache refuses instead of silently mixing two sets. A shift is refused when the shorter
//     sequence would select other frequencies (LongRoPE's long table shifted below the switch).
//     Build the cache with a table for the frequencies wanted (TableOptions::seq_len).
// Errors name the argument and its value: "KvCache::append: ... (got ...)".
//
// Threads: every member function may be called from several threads at once, as if the calls
// were made one after another in some order. append, shift and clear take the cache exclusively
// (a second writer, or a reader, waits until the first is done); attend, length, last_position
// and position share it with each other. keys() and values() return views of the storage, which
// never moves; reading them while another thread appends or shifts reads slots mid-write: order
// such reads with the writer yourself. The cache is neither copyable nor movable (it owns its lock).
#pragma once

#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <span>
#include <vector>

#include "rotary/attention.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary {

struct KvCacheShape {
  int64_t batch = 1;        // sequences
  int64_t kv_heads = 1;
  int64_t head_dim = 0;     // of keys (and queries); the table's rotary_dim must fit in it
  int64_t v_head_dim = 0;   // of values; 0 = head_dim
  int64_t capacity = 0;     // slots per sequence
  DType dtype = DType::F32; // storage of keys and values: F32, BF16 or F16
  int64_t rotary_offset = 0;  // first rotated element of a head (DeepSeek's [nope | rope])
};

struct KvAttendOptions {
  std::optional<double> scale;  // softmax scale; unset = 1/sqrt(head_dim)
  Mask mask = Mask::Causal;     // Causal (bottom-right, the new queries see their own slots) or None
  int64_t window = 0;           // sliding window in slots (attention.hpp); 0 = none
};

class KvCache {
 public:
  // Borrows the table (it must outlive the cache). Throws rotary::Error for a bad shape, a dtype
  // other than F32 / BF16 / F16, a spec the cache does not serve (M-RoPE, vision, xPos),
  // rotary_offset + rotary_dim > head_dim, or storage larger than the machine's memory and swap
  // or than the system will allocate (the message names the shape and the bytes).
  KvCache(const CosSinTable& table, const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  const CosSinTable& table() const { return *table_; }
  int64_t length(int64_t sequence) const;          // slots in use
  int64_t last_position(int64_t sequence) const;   // -1 when empty
  int64_t position(int64_t sequence, int64_t slot) const;
  // The storage, BHSD views [batch][kv_heads][capacity][dim] (slots past length(b) are stale).
  TensorView keys() const;
  TensorView values() const;

  // Appends new_tokens tokens to every sequence: k [batch, new_tokens, kv_heads, head_dim] and v
  // [.., v_head_dim], in any layout but THD, the cache's dtype. k is rotated at its positions
  // (rotary::apply) and stored; v is copied. positions: batch * new_tokens values in (batch, seq)
  // order, each sequence's strictly increasing and above its last_position(); empty = the next
  // positions, last_position(b) + 1, + 2, ... Errors (nothing is written): capacity overflow,
  // positions not increasing, positions past the table, frequencies that would change (above),
  // shapes / dtypes that disagree with the cache.
  void append(const TensorView& k, const TensorView& v, std::span<const int64_t> positions = {});

  // Attention of q [batch, q_len, q_heads, head_dim] (un-rotated; q_heads a multiple of kv_heads)
  // over the cache, into out [batch, q_len, q_heads, v_head_dim], both the cache's dtype, q's
  // layout (not THD). The queries are the last q_len tokens of each sequence (q_len <=
  // length(b)), rotated at their slots' positions.
  void attend(const TensorView& q, const TensorView& out, const KvAttendOptions& options = {}) const;

  // llama.cpp's context shift for one sequence, or for all: keep [0, n_keep), discard the next
  // n_discard slots, move the rest down and re-rotate them by -n_discard (header comment).
  // Positions of moved slots decrease by n_discard. Requires n_keep, n_discard >= 0 and
  // n_keep + n_discard <= length(b) (for every sequence with the all-sequence form; nothing is
  // changed when one fails).
  void shift(int64_t n_keep, int64_t n_discard);
  void shift(int64_t sequence, int64_t n_keep, int64_t n_discard);

  // Empties every sequence (lengths 0, positions restart at 0).
  void clear();

 private:
  void check_sequence(int64_t sequence, const char* where) const;
  void check_shift(int64_t sequence, int64_t n_keep, int64_t n_discard) const;
  void shift_unchecked(int64_t sequence, int64_t n_keep, int64_t n_discard);
  int64_t key_offset(int64_t b, int64_t h, int64_t slot) const;
  int64_t value_offset(int64_t b, int64_t h, int64_t slot) const;

  int64_t last_position_of(int64_t sequence) const;  // under the lock; sequence checked

  const CosSinTable* table_;
  KvCacheShape shape_;
  mutable std::shared_mutex mutex_;  // exclusive: append, shift, clear; shared: the readers
  std::vector<double> keys_;    // 8-byte aligned storage of any dtype
  std::vector<double> values_;
  std::vector<int64_t> positions_;  // [batch][capacity]
  std::vector<int64_t> lengths_;    // [batch]
};

}  // namespace rotary
