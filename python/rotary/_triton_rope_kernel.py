"""The Triton kernel of rotary.torch's backend="triton" (python/rotary/_triton_rope.py launches it;
docs/gpu.md). Importing this module imports triton: only _triton_rope._kernel does, on the first
launch. triton.jit reads TRITON_INTERPRET here, when the kernel is defined: with it set, the
kernel runs on CPU tensors in Triton's interpreter (NumPy float32 arithmetic).

Math as rotary's CPU kernels (docs/numerics.md, "The SIMD kernels"): each pair (a, b) loaded
exactly into float32, then a*C - b*S and b*C + a*S in float32 with the table's float32 C and S,
rounded once to the storage type on store.
"""
import os

import triton
import triton.language as tl

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@triton.jit
def to_storage(x, o):
    """float32 x rounded to nearest (ties to even) in o's element type."""
    if o.dtype.element_ty == tl.bfloat16:
        # By the bits, on every device: Triton 3.9's interpreter converts float32 to bfloat16 by
        # truncation (its cast passes no rounding mode), so .to() would round differently on the
        # CPU than on a GPU. RNE on the top 16 bits; a NaN keeps a quiet NaN's bits (the carry
        # would otherwise run into the sign).
        bits = x.to(tl.uint32, bitcast=True)
        rounded = bits + 0x7FFF + ((bits >> 16) & 1)
        bits = tl.where(x != x, bits | 0x400000, rounded)
        return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(o.dtype.element_ty)


@triton.jit
def rotate_heads(x, o, x_sh, x_sd, o_sh, o_sd, h, h_mask, c, s, p, p_mask, rotary_offset, head_dim, pairs,
                 NEOX: tl.constexpr, COPY_REST: tl.constexpr, BLOCK_D: tl.constexpr):
    # A block of heads of one token, [BLOCK_H, BLOCK_P] at a time: the pairs (i, i + pairs) for
    # NeoX, (2i, 2i + 1) for GPT-J. c, s: [BLOCK_P], the same for every head of the token.
    if NEOX:
        first = rotary_offset + p
        second = first + pairs
    else:
        first = rotary_offset + 2 * p
        second = first + 1
    mask = h_mask[:, None] & p_mask[None, :]
    xh = x + h[:, None] * x_sh
    oh = o + h[:, None] * o_sh
    a = tl.load(xh + first[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(xh + second[None, :] * x_sd, mask=mask, other=0.0).to(tl.float32)
    if COPY_REST:  # out of place: the elements outside the rotated block, bit for bit
        d = tl.arange(0, BLOCK_D)
        d_keep = (d < head_dim) & ((d < rotary_offset) | (d >= rotary_offset + 2 * pairs))
        d_mask = h_mask[:, None] & d_keep[None, :]
        tl.store(oh + d[None, :] * o_sd, tl.load(xh + d[None, :] * x_sd, mask=d_mask), mask=d_mask)
    cc = c[None, :]
    ss = s[None, :]
    tl.store(oh + first[None, :] * o_sd, to_storage(a * cc - b * ss, o), mask=mask)
    tl.store(oh + second[None, :] * o_sd, to_storage(b * cc + a * ss, o), mask=mask)


@triton.jit
def rope_kernel(q, k, q_out, k_out, rows, cos, sin,
                q_sb, q_ss, q_sh, q_sd, k_sb, k_ss, k_sh, k_sd,
                qo_sb, qo_ss, qo_sh, qo_sd, ko_sb, ko_ss, ko_sh, ko_sd,
                seq, heads_q, heads_k, dim_q, dim_k, rotary_offset, pairs,
                NEOX: tl.constexpr, BACKWARD: tl.constexpr, COPY_REST: tl.constexpr, BLOCK_P: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr, ARANGE: tl.constexpr):
    # A program per (token, block of BLOCK_H heads): q's head blocks first, then k's (GQA: k may
    # have fewer heads). The token's cos/sin row is loaded once for all of its heads. Offsets in
    # int64: a large tensor's element offsets pass 2^31.
    token = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    bi = token // seq
    si = token % seq
    if ARANGE:  # positions 0, 1, ..., seq - 1 in every sequence: rows is not read
        row = si
    else:
        row = tl.load(rows + token)  # the table row of this token's position
    p = tl.arange(0, BLOCK_P)
    p_mask = p < pairs
    c = tl.load(cos + row * pairs + p, mask=p_mask, other=0.0)
    s = tl.load(sin + row * pairs + p, mask=p_mask, other=0.0)
    if BACKWARD:  # the transposed rotation: by -angle
        s = -s
    blocks_q = (heads_q + BLOCK_H - 1) // BLOCK_H
    if block < blocks_q:
        h = (block * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.int64)
        rotate_heads(q + bi * q_sb + si * q_ss, q_out + bi * qo_sb + si * qo_ss, q_sh, q_sd, qo_sh, qo_sd,
                     h, h < heads_q, c, s, p, p_mask, rotary_offset, dim_q, pairs, NEOX, COPY_REST, BLOCK_D)
    else:
        h = ((block - blocks_q) * BLOCK_H + tl.arange(0, BLOCK_H)).to(tl.int64)
        rotate_heads(k + bi * k_sb + si * k_ss, k_out + bi * ko_sb + si * ko_ss, k_sh, k_sd, ko_sh, ko_sd,
                     h, h < heads_k, c, s, p, p_mask, rotary_offset, dim_k, pairs, NEOX, COPY_REST, BLOCK_D)
