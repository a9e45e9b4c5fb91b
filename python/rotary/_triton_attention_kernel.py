"""The Triton kernels of rotary._triton_attention (attention with fused RoPE, forward; docs/gpu.md,
"Attention"). Importing this module imports triton: only _triton_attention._launch does, on the
first launch. triton.jit reads TRITON_INTERPRET when the kernel is defined, as for
_triton_rope_kernel.

A flash-attention forward (Dao et al. 2022, "FlashAttention", Algorithm 1: online softmax over
key tiles), with two changes of the decode-oriented FlashAttention follow-ups ("Flash-Decoding",
Dao et al. 2023): the rows of a program are the (q head, query) pairs of one kv head, so that the
q heads of a GQA group share each K and V tile they load, and the keys can be split among
programs (SPLITS > 1), each writing its partial (max, sum, unnormalized output) for combine_kernel
to merge, so that a decode step with few rows still fills the GPU.

RoPE is fused into the tile loads without gathers: each tile is loaded as the first and the
second elements of its rotated pairs (NeoX: columns off + p and off + P + p; GPT-J: off + 2p and
off + 2p + 1) and the columns outside the rotary block (the rest), and rotated in float32 as the
apply kernel rotates: (a*C - b*S, b*C + a*S) with the table's float32 C and S. The score is the
sum of the three products, q1.k1 + q2.k2 + rest_q.rest_k, times the float32 scale.

The dot products take one of three input precisions (DOT, chosen per dtype by the caller):
- DOT_IEEE: float32 operands, exact float32 products (input_precision="ieee": no tensor cores on
  NVIDIA's GPUs before Blackwell, the slowest);
- DOT_TF32X3: float32 operands split into three TF32 products on tensor cores (each product
  within a few float32 units, docs/gpu.md);
- DOT_STORAGE: operands rounded to the inputs' storage type (bfloat16 / float16), float32
  accumulation: flash-attention's own choice. Unrotated bfloat16 q and k are exact there; rotated
  ones round once, as an unfused apply would have stored them; the softmax weights p round once
  before P.V.
Softmax and accumulation are float32 in every mode, and the output is divided by the weight sum
and rounded once to the storage type.
"""
import os

import triton
import triton.language as tl

from ._triton_rope_kernel import to_storage

# A constexpr, so that the compiled kernels may read it (a plain global is a compile error on a GPU,
# which the interpreter does not check); `bool(INTERPRETED)` is its value in Python.
INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"))
DOT_IEEE = 0
DOT_TF32X3 = 1
DOT_STORAGE = 2


@triton.jit
def load_columns(base, row_off, row_mask, sd, cols, col_mask):
    """[rows, cols] float32: element (r, c) at base + row_off[r] + cols[c] * sd, 0 where masked."""
    mask = row_mask[:, None] & col_mask[None, :]
    return tl.load(base + row_off[:, None] + cols[None, :] * sd, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def rotated_halves(base, row_off, row_mask, sd, table_rows, cos, sin, pairs, rotary_offset,
                   NEOX: tl.constexpr, BLOCK_P: tl.constexpr):
    """([rows, BLOCK_P], [rows, BLOCK_P]) float32: the first and second elements of each rotated
    pair, rotated by the table's rows `table_rows` (one per row); zeros past `pairs`."""
    p = tl.arange(0, BLOCK_P)
    p_mask = p < pairs
    if NEOX:  # pairs (i, i + pairs)
        first = rotary_offset + p
        second = first + pairs
    else:  # pairs (2i, 2i + 1)
        first = rotary_offset + 2 * p
        second = first + 1
    a = load_columns(base, row_off, row_mask, sd, first, p_mask)
    b = load_columns(base, row_off, row_mask, sd, second, p_mask)
    mask = row_mask[:, None] & p_mask[None, :]
    entry = table_rows[:, None] * pairs + p[None, :]
    c = tl.load(cos + entry, mask=mask, other=0.0)
    s = tl.load(sin + entry, mask=mask, other=0.0)
    return a * c - b * s, b * c + a * s


@triton.jit
def rest_columns(base, row_off, row_mask, sd, head_dim, pairs, rotary_offset, ROPE: tl.constexpr,
                 BLOCK_D: tl.constexpr):
    """[rows, BLOCK_D] float32: the columns outside the rotary block (all of them without RoPE)."""
    d = tl.arange(0, BLOCK_D)
    keep = d < head_dim
    if ROPE:
        keep = keep & ((d < rotary_offset) | (d >= rotary_offset + 2 * pairs))
    return load_columns(base, row_off, row_mask, sd, d, keep)


@triton.jit
def operand(x, like, DOT: tl.constexpr):
    """x as a dot operand: float32, or rounded to `like`'s storage type (DOT_STORAGE). The
    interpreter multiplies bfloat16 tiles as raw bits, so there the rounded values go back to
    float32 (exactly) and the product is float32's, the same numbers."""
    if DOT == 2:
        x = to_storage(x, like)
        if INTERPRETED:
            x = x.to(tl.float32)
    return x


@triton.jit
def dot(a, b, acc, DOT: tl.constexpr):
    """acc + a @ b in float32 with DOT's input precision (operands already from `operand`)."""
    if DOT == 1:
        return tl.dot(a, b, acc, input_precision="tf32x3")
    elif DOT == 2:
        if INTERPRETED:
            return tl.dot(a, b, acc, input_precision="ieee")
        return tl.dot(a, b, acc)
    else:
        return tl.dot(a, b, acc, input_precision="ieee")


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
def nonfinite_values(p, visible, vt):
    """[rows, BLOCK_DV] float32 of 0, NaN, +inf and -inf: what the non-finite elements of a V tile
    add to each row's output in IEEE arithmetic, counting only the keys the row sees (a masked key
    has weight 0, and 0 * inf in P.V would leak it into the row): NaN from a NaN element or from an
    infinite one whose weight is 0 (0 * inf), +inf / -inf from an infinite one of positive weight
    (both signs: NaN). The counts are exact dot products of 0 / 1 matrices."""
    v32 = vt.to(tl.float32)
    inf = float("inf")
    nan_v = tl.where(v32 != v32, 1.0, 0.0)
    pos = tl.where(v32 == inf, 1.0, 0.0)
    neg = tl.where(v32 == -inf, 1.0, 0.0)
    weighted = tl.where(visible & (p > 0), 1.0, 0.0)
    zero = tl.where(visible & (p == 0), 1.0, 0.0)
    n_nan = tl.dot(tl.where(visible, 1.0, 0.0), nan_v, input_precision="ieee")
    n_nan = tl.dot(zero, pos + neg, n_nan, input_precision="ieee")
    n_pos = tl.dot(weighted, pos, input_precision="ieee")
    n_neg = tl.dot(weighted, neg, input_precision="ieee")
    return tl.where(n_nan > 0, float("nan"), 0.0) + tl.where(n_pos > 0, inf, 0.0) + tl.where(n_neg > 0, -inf, 0.0)


@triton.jit
def attention_kernel(q, k, v, o, lse, part_acc, part_m, part_l, cos, sin, q_rows, k_rows,
                     q_sb, q_sh, q_ss, q_sd, k_sb, k_sh, k_ss, k_sd, v_sb, v_sh, v_ss, v_sd,
                     o_sb, o_sh, o_ss, o_sd, l_sb, l_sh, l_ss,
                     q_len, kv_len, kv_heads, group, head_dim, v_dim, scale, softcap, query_offset, window,
                     pairs, rotary_offset, split_len,
                     CAUSAL: tl.constexpr, WINDOW: tl.constexpr, ROPE: tl.constexpr, NEOX: tl.constexpr,
                     ARANGE: tl.constexpr, SOFTCAP: tl.constexpr, HAS_REST: tl.constexpr, SPLIT: tl.constexpr,
                     DOT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                     BLOCK_P: tl.constexpr, BLOCK_DV: tl.constexpr):
    # Offsets in int64: a large tensor's element offsets pass 2^31.
    tile = tl.program_id(0)
    bkv = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    b = bkv // kv_heads
    kvh = bkv % kv_heads
    # Row r of the kv head's group * q_len rows: q head kvh * group + r // q_len, query r % q_len.
    rows = group * q_len
    r = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    r_mask = r < rows
    g = r // q_len
    i = r - g * q_len
    h = (kvh * group + g).to(tl.int64)
    i_pos = query_offset + i  # the query's position in the key sequence (masks)
    q_off = b * q_sb + h * q_sh + i.to(tl.int64) * q_ss
    if ARANGE:  # RoPE rows: query i at query_offset + i, key j at j
        q_row = i_pos.to(tl.int64)
    else:
        q_row = tl.load(q_rows + b * q_len + i, mask=r_mask, other=0)
    if ROPE:
        q1, q2 = rotated_halves(q, q_off, r_mask, q_sd, q_row, cos, sin, pairs, rotary_offset, NEOX, BLOCK_P)
        q1 = operand(q1, v, DOT)
        q2 = operand(q2, v, DOT)
    if HAS_REST:
        q0 = operand(rest_columns(q, q_off, r_mask, q_sd, head_dim, pairs, rotary_offset, ROPE, BLOCK_D), v, DOT)
    dv = tl.arange(0, BLOCK_DV)
    dv_mask = dv < v_dim
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.full((BLOCK_M,), 0.0, tl.float32)
    acc = tl.full((BLOCK_M, BLOCK_DV), 0.0, tl.float32)
    # The keys any row of the tile can see (the masks below decide per element): the tile's queries
    # are i_lo..i_hi when it lies in one q head, else all of them.
    r_first = tile * BLOCK_M
    r_last = tl.minimum(r_first + BLOCK_M, rows) - 1
    one_head = (r_first // q_len) == (r_last // q_len)
    i_lo = tl.where(one_head, r_first - (r_first // q_len) * q_len, 0)
    i_hi = tl.where(one_head, r_last - (r_last // q_len) * q_len, q_len - 1)
    lo = split * split_len
    hi = tl.minimum(kv_len, lo + split_len)
    if CAUSAL:
        hi = tl.minimum(hi, query_offset + i_hi + 1)
    if WINDOW:
        lo = tl.maximum(lo, ((query_offset + i_lo - window + 1) // BLOCK_N) * BLOCK_N)
    k_head = k + b * k_sb + kvh * k_sh
    v_head = v + b * v_sb + kvh * v_sh
    for start in range(lo, hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        j_mask = j < kv_len
        k_off = j.to(tl.int64) * k_ss
        if ARANGE:
            k_row = j.to(tl.int64)
        else:
            k_row = tl.load(k_rows + b * kv_len + j, mask=j_mask, other=0)
        s = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
        if ROPE:
            k1, k2 = rotated_halves(k_head, k_off, j_mask, k_sd, k_row, cos, sin, pairs, rotary_offset, NEOX, BLOCK_P)
            s = dot(q1, tl.trans(operand(k1, v, DOT)), s, DOT)
            s = dot(q2, tl.trans(operand(k2, v, DOT)), s, DOT)
        if HAS_REST:
            k0 = rest_columns(k_head, k_off, j_mask, k_sd, head_dim, pairs, rotary_offset, ROPE, BLOCK_D)
            s = dot(q0, tl.trans(operand(k0, v, DOT)), s, DOT)
        s = s * scale
        if SOFTCAP:  # Gemma 2: cap * tanh(s / cap), before the mask
            s = softcap * tanh(s / softcap)
        visible = r_mask[:, None] & j_mask[None, :]
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
        vt = tl.load(v_head + j.to(tl.int64)[:, None] * v_ss + dv[None, :] * v_sd,
                     mask=j_mask[:, None] & dv_mask[None, :], other=0.0)
        # Non-finite values (docs/attention.md, special values): P.V would multiply a masked key's
        # weight 0 by them (NaN in rows that cannot see the key), so such a tile takes them out of
        # the product and adds what they give the rows that see them. A finite tile is untouched.
        finite = tl.abs(vt.to(tl.float32)) < float("inf")  # false for NaN
        special = tl.full((BLOCK_M, BLOCK_DV), 0.0, tl.float32)
        if tl.reduce(tl.reduce(tl.where(finite, 0, 1), 1, max_of), 0, max_of) > 0:
            special = nonfinite_values(p, visible, vt)
            vt = tl.where(finite, vt, 0.0).to(vt.dtype)
        if DOT == 2:
            pv = operand(p, v, DOT)
            if INTERPRETED:
                vt = vt.to(tl.float32)
        else:
            pv = p
            vt = vt.to(tl.float32)
        acc = dot(pv, vt, acc * alpha[:, None], DOT) + special
        m_i = m_new
    # A row that sees keys whose scores are all -inf ends with l = 0, as a row that sees none; the
    # reference's exp(-inf + inf) makes it NaN. Which rows see a key of this split, from the masks:
    k_lo = split * split_len
    k_hi = tl.minimum(kv_len, k_lo + split_len)
    if CAUSAL:
        k_hi = tl.minimum(k_hi, i_pos + 1)
    if WINDOW:
        k_lo = tl.maximum(k_lo, i_pos - window + 1)
    minus_inf = r_mask & (k_lo < k_hi) & (l_i == 0)
    if SPLIT:
        # The partial of keys [lo, hi) for combine_kernel: [split, batch * q heads, q_len, ...].
        part = (split * (tl.num_programs(1) * group) + bkv * group + g).to(tl.int64) * q_len + i
        tl.store(part_m + part, m_i, mask=r_mask)
        tl.store(part_l + part, tl.where(minus_inf, -1.0, l_i), mask=r_mask)  # -1: flagged for the merge
        tl.store(part_acc + part[:, None] * v_dim + dv[None, :], acc, mask=r_mask[:, None] & dv_mask[None, :])
    else:
        empty = l_i == 0  # (NaN l: a NaN row, and NaN lse)
        out = acc / tl.where(empty, 1.0, l_i)[:, None]  # a query that sees no key gets zeros
        out = tl.where(minus_inf[:, None], float("nan"), out)
        o_off = b * o_sb + h * o_sh + i.to(tl.int64) * o_ss
        tl.store(o + o_off[:, None] + dv[None, :] * o_sd, to_storage(out, o), mask=r_mask[:, None] & dv_mask[None, :])
        row_lse = tl.where(empty, float("-inf"), m_i + tl.log(tl.where(empty, 1.0, l_i)))
        tl.store(lse + b * l_sb + h * l_sh + i.to(tl.int64) * l_ss, row_lse, mask=r_mask)


@triton.jit
def combine_kernel(o, lse, part_acc, part_m, part_l, o_sb, o_sh, o_ss, o_sd, l_sb, l_sh, l_ss,
                   q_len, q_heads, v_dim, splits, BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr):
    """Merges the SPLITS partials of attention_kernel per (batch, q head, query): M = max m_s,
    L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L, lse = M + log L."""
    tile = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // q_heads
    h = bh % q_heads
    i = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    i_mask = i < q_len
    dv = tl.arange(0, BLOCK_DV)
    dv_mask = dv < v_dim
    stride = tl.num_programs(1).to(tl.int64) * q_len  # from one split's partials to the next's
    row = bh * q_len + i.to(tl.int64)
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    for s in range(0, splits):
        m = tl.maximum(m, tl.load(part_m + s * stride + row, mask=i_mask, other=float("-inf")))
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    l_sum = tl.full((BLOCK_M,), 0.0, tl.float32)
    acc = tl.full((BLOCK_M, BLOCK_DV), 0.0, tl.float32)
    minus_inf = tl.full((BLOCK_M,), 0, tl.int1)
    for s in range(0, splits):
        weight = tl.exp(tl.load(part_m + s * stride + row, mask=i_mask, other=float("-inf")) - m_safe)
        l_s = tl.load(part_l + s * stride + row, mask=i_mask, other=0.0)
        minus_inf = minus_inf | (l_s < 0)  # a split whose visible scores were all -inf (weight 0 here)
        l_sum += weight * l_s
        part = tl.load(part_acc + (s * stride + row)[:, None] * v_dim + dv[None, :],
                       mask=i_mask[:, None] & dv_mask[None, :], other=0.0)
        acc += weight[:, None] * part
    empty = l_sum == 0
    out = acc / tl.where(empty, 1.0, l_sum)[:, None]
    out = tl.where((minus_inf & empty)[:, None], float("nan"), out)
    o_off = b * o_sb + h * o_sh + i.to(tl.int64) * o_ss
    tl.store(o + o_off[:, None] + dv[None, :] * o_sd, to_storage(out, o), mask=i_mask[:, None] & dv_mask[None, :])
    row_lse = tl.where(empty, float("-inf"), m_safe + tl.log(tl.where(empty, 1.0, l_sum)))
    tl.store(lse + b * l_sb + h * l_sh + i.to(tl.int64) * l_ss, row_lse, mask=i_mask)
