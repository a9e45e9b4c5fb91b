// include/rotary/encodings.hpp: the position encodings other than RoPE, as plain numbers: ALiBi's
// head slopes and bias, and the sinusoidal absolute encoding. One definition, used by attention's
// encodings (attention.hpp: AttentionOptions::alibi_slopes, AttentionAbsolute) and by the
// analysis report's comparison of encodings (analysis.hpp, section 7).
//
// Sources:
//   sinusoidal: Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762), section 3.5:
//     PE(pos, 2i) = sin(pos / base^(2i/d_model)), PE(pos, 2i+1) = cos(pos / base^(2i/d_model)),
//     base = 10000, added to the token embedding;
//   ALiBi: Press, Smith, Lewis 2021, "Train Short, Test Long" (arXiv:2108.12409), section 3: a bias
//     -m * (i - j) added to the logit of query i and key j, with head slopes a geometric sequence
//     starting at 2^(-8/n) with ratio 2^(-8/n); for n not a power of two, the authors' get_slopes
//     (github.com/ofirpress/attention_with_linear_biases) takes the slopes of the closest lower
//     power of two c, then every other slope of the 2c-head sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace rotary {

// ALiBi's slopes for num_heads heads (head h gets slopes[h]). For n a power of two:
// slope_h = 2^(-8 (h + 1) / n), h = 0..n-1 (8 heads: 1/2, 1/4, ..., 1/256). Else, with c = the
// largest power of two below n: the c slopes for c heads, then every other slope of the 2c-head
// sequence (indices 0, 2, 4, ...) until n slopes (12 heads: the 8-head slopes, then 2^-0.5,
// 2^-1.5, 2^-2.5, 2^-3.5). Throws rotary::Error unless 0 < num_heads <= 2^20.
std::vector<double> alibi_slopes(int64_t num_heads);

// The bias ALiBi adds to the logit of a query at query_position for a key at key_position:
// -slope * |query_position - key_position|, which is the paper's -slope (i - j) for the keys a
// causal mask leaves (j <= i), and flash-attention's alibi_slopes convention for the others
// (flash_attn_interface.py: "A bias of (-alibi_slope * |i + seqlen_k - seqlen_q - j|) is added to
// the attention score of query i and key j").
double alibi_bias(double slope, int64_t query_position, int64_t key_position);

// Vaswani et al.'s encoding of one position: d_model values, PE[2i] = sin(pos / base^(2i/d_model)),
// PE[2i+1] = cos(...), in double. Throws rotary::Error unless d_model is even and > 0 and base is
// finite and > 1.
std::vector<double> sinusoidal_encoding(int64_t position, int64_t d_model, double base = 10000.0);

// The same for positions [0, rows), rounded once to float32, row-major [rows][d_model]: the table
// attention adds to q and k (AttentionAbsolute). Throws rotary::Error as sinusoidal_encoding, and
// for rows < 0 or a table of more than 2^31 values.
std::vector<float> sinusoidal_table(int64_t rows, int64_t d_model, double base = 10000.0);

}  // namespace rotary
