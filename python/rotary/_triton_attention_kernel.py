"""The Triton kernel of rotary._triton_attention (attention with fused RoPE, prefill forward;
docs/gpu.md, "Attention"). Importing this module imports triton: only _triton_attention._kernel
does, on the first launch. triton.jit reads TRITON_INTERPRET when the kernel is defined, as for
_triton_rope_kernel.

A flash-attention forward (Dao et al. 2022, "FlashAttention", Algorithm 1; online softmax over
key blocks): a program per (block of BLOCK_M queries, batch row, q head). q and k tiles are loaded
exactly into float32 and, with fused RoPE, rotated there as the apply kernel rotates (a*C - b*S,
b*C + a*S with the table's float32 C and S, _triton_rope_kernel.rotate_heads) but kept in float32;
q is then multiplied by the float32 scale. Scores, weights and the output are accumulated in
float32 (tl.dot with input_precision="ieee": no TF32), and the output is divided by the weight sum
and rounded once to the storage type.
"""
import os

import triton
import triton.language as tl

from ._triton_rope_kernel import to_storage

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def load_rotated(x, rows, t, t_mask, x_ss, x_sd, head_dim, cos, sin, pairs, rotary_offset,
                 ROPE: tl.constexpr, NEOX: tl.constexpr, BLOCK_D: tl.constexpr):
    """[BLOCK, BLOCK_D] float32: tokens t (their table rows `rows`) of one head, rotated in the
    block [rotary_offset, rotary_offset + 2 * pairs) when ROPE; zeros past head_dim and t_mask."""
    d = tl.arange(0, BLOCK_D)
    mask = t_mask[:, None] & (d < head_dim)[None, :]
    xt = x + t[:, None] * x_ss
    value = tl.load(xt + d[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    if ROPE:
        rel = d - rotary_offset
        in_block = (rel >= 0) & (rel < 2 * pairs)
        if NEOX:  # pairs (i, i + pairs)
            first = rel < pairs
            pair = tl.where(first, rel, rel - pairs)
            partner = tl.where(first, rel + pairs, rel - pairs)
        else:  # pairs (2i, 2i + 1)
            first = (rel % 2) == 0
            pair = rel // 2
            partner = tl.where(first, rel + 1, rel - 1)
        pair = tl.where(in_block, pair, 0)
        partner = tl.where(in_block, partner, 0) + rotary_offset
        rot_mask = mask & in_block[None, :]
        other = tl.load(xt + partner[None, :] * x_sd, mask=rot_mask, other=0.0).to(tl.float32)
        table = rows[:, None] * pairs + pair[None, :]
        c = tl.load(cos + table, mask=rot_mask, other=0.0)
        s = tl.load(sin + table, mask=rot_mask, other=0.0)
        # first of a pair: a*C - b*S (value a, other b); second: b*C + a*S (value b, other a).
        rotated = tl.where(first[None, :], value * c - other * s, value * c + other * s)
        value = tl.where(in_block[None, :], rotated, value)
    return value


# The row reductions through tl.reduce with these combine functions: tl.max and tl.sum are
# triton.jit functions of triton's own library, which the interpreter runs only when triton was
# imported with TRITON_INTERPRET already set (a test process imports triton before its fixtures set
# it); tl.reduce is a builtin.
@triton.jit
def max_of(a, b):
    return tl.maximum(a, b)


@triton.jit
def sum_of(a, b):
    return a + b


@triton.jit
def tanh(x):
    """tanh in float32 from exp (tl.math has no tanh in the interpreter): (1 - e) / (1 + e) with
    e = exp(-2|x|) <= 1, within a few float32 units of 1 in absolute terms."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def attention_kernel(q, k, v, o, lse, cos, sin, q_rows, k_rows,
                     q_sb, q_sh, q_ss, q_sd, k_sb, k_sh, k_ss, k_sd, v_sb, v_sh, v_ss, v_sd,
                     o_sb, o_sh, o_ss, o_sd, l_sb, l_sh, l_ss,
                     q_len, kv_len, q_heads, group, head_dim, v_dim, scale, softcap, query_offset, window,
                     pairs, rotary_offset,
                     CAUSAL: tl.constexpr, WINDOW: tl.constexpr, ROPE: tl.constexpr, NEOX: tl.constexpr,
                     ARANGE: tl.constexpr, SOFTCAP: tl.constexpr, RETURN_LSE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    # Offsets in int64: a large tensor's element offsets pass 2^31.
    block_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // q_heads
    h = bh % q_heads
    kvh = h // group  # GQA: q head h reads kv head h // group
    i = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    i_mask = i < q_len
    i_pos = query_offset + i  # the query's position in the key sequence (masks)
    q_base = q + b * q_sb + h * q_sh
    k_base = k + b * k_sb + kvh * k_sh
    v_base = v + b * v_sb + kvh * v_sh
    if ARANGE:  # RoPE rows: query i at query_offset + i, key j at j
        q_row = i_pos.to(tl.int64)
    else:
        q_row = tl.load(q_rows + b * q_len + i, mask=i_mask, other=0)
    qt = load_rotated(q_base, q_row, i.to(tl.int64), i_mask, q_ss, q_sd, head_dim, cos, sin, pairs, rotary_offset,
                      ROPE, NEOX, BLOCK_D) * scale
    dv = tl.arange(0, BLOCK_DV)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.full((BLOCK_M,), 0.0, tl.float32)
    acc = tl.full((BLOCK_M, BLOCK_DV), 0.0, tl.float32)
    # The key range any query of the block can see (the masks below decide per element).
    lo = 0
    hi = kv_len
    if CAUSAL:
        hi = tl.minimum(hi, query_offset + (block_m + 1) * BLOCK_M)
    if WINDOW:
        lo = tl.maximum(0, query_offset + block_m * BLOCK_M - window + 1)
        lo = (lo // BLOCK_N) * BLOCK_N
    for start in range(lo, hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        j_mask = j < kv_len
        if ARANGE:
            k_row = j.to(tl.int64)
        else:
            k_row = tl.load(k_rows + b * kv_len + j, mask=j_mask, other=0)
        kt = load_rotated(k_base, k_row, j.to(tl.int64), j_mask, k_ss, k_sd, head_dim, cos, sin, pairs,
                          rotary_offset, ROPE, NEOX, BLOCK_D)
        s = tl.dot(qt, tl.trans(kt), input_precision="ieee")
        if SOFTCAP:  # Gemma 2: cap * tanh(s / cap), before the mask
            s = softcap * tanh(s / softcap)
        visible = i_mask[:, None] & j_mask[None, :]
        if CAUSAL:
            visible = visible & (j[None, :] <= i_pos[:, None])
        if WINDOW:
            visible = visible & (i_pos[:, None] - j[None, :] < window)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.reduce(s, 1, max_of))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen no key yet
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, sum_of)
        v_mask = j_mask[:, None] & (dv < v_dim)[None, :]
        vt = tl.load(v_base + j.to(tl.int64)[:, None] * v_ss + dv[None, :] * v_sd, mask=v_mask,
                     other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, vt, input_precision="ieee")
        m_i = m_new
    seen = l_i > 0
    out = acc / tl.where(seen, l_i, 1.0)[:, None]  # a query that sees no key gets zeros
    o_base = o + b * o_sb + h * o_sh
    o_mask = i_mask[:, None] & (dv < v_dim)[None, :]
    tl.store(o_base + i.to(tl.int64)[:, None] * o_ss + dv[None, :] * o_sd, to_storage(out, o), mask=o_mask)
    if RETURN_LSE:
        row_lse = tl.where(seen, m_i + tl.log(tl.where(seen, l_i, 1.0)), float("-inf"))
        tl.store(lse + b * l_sb + h * l_sh + i.to(tl.int64) * l_ss, row_lse, mask=i_mask)
