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
def rotate_head(x, o, x_sd, o_sd, c, s, p, p_mask, rotary_offset, head_dim, pairs, NEOX: tl.constexpr,
                COPY_REST: tl.constexpr, BLOCK_D: tl.constexpr):
    # One head of one token: the pairs (i, i + pairs) for NeoX, (2i, 2i + 1) for GPT-J.
    if NEOX:
        first = rotary_offset + p
        second = first + pairs
    else:
        first = rotary_offset + 2 * p
        second = first + 1
    a = tl.load(x + first * x_sd, mask=p_mask, other=0.0).to(tl.float32)
    b = tl.load(x + second * x_sd, mask=p_mask, other=0.0).to(tl.float32)
    if COPY_REST:  # out of place: the elements outside the rotated block, bit for bit
        d = tl.arange(0, BLOCK_D)
        d_mask = (d < head_dim) & ((d < rotary_offset) | (d >= rotary_offset + 2 * pairs))
        tl.store(o + d * o_sd, tl.load(x + d * x_sd, mask=d_mask), mask=d_mask)
    tl.store(o + first * o_sd, to_storage(a * c - b * s, o), mask=p_mask)
    tl.store(o + second * o_sd, to_storage(b * c + a * s, o), mask=p_mask)


@triton.jit
def rope_kernel(q, k, q_out, k_out, rows, cos, sin,
                q_sb, q_ss, q_sh, q_sd, k_sb, k_ss, k_sh, k_sd,
                qo_sb, qo_ss, qo_sh, qo_sd, ko_sb, ko_ss, ko_sh, ko_sd,
                seq, heads_q, dim_q, dim_k, rotary_offset, pairs,
                NEOX: tl.constexpr, BACKWARD: tl.constexpr, COPY_REST: tl.constexpr, BLOCK_P: tl.constexpr,
                BLOCK_D: tl.constexpr):
    # A program per (token, head): heads [0, heads_q) of q, then k's heads (GQA: fewer). Offsets
    # in int64: a large tensor's element offsets pass 2^31.
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    bi = token // seq
    si = token % seq
    row = tl.load(rows + token)  # the table row of this token's position
    p = tl.arange(0, BLOCK_P)
    p_mask = p < pairs
    c = tl.load(cos + row * pairs + p, mask=p_mask, other=0.0)
    s = tl.load(sin + row * pairs + p, mask=p_mask, other=0.0)
    if BACKWARD:  # the transposed rotation: by -angle
        s = -s
    if head < heads_q:
        rotate_head(q + bi * q_sb + si * q_ss + head * q_sh, q_out + bi * qo_sb + si * qo_ss + head * qo_sh,
                    q_sd, qo_sd, c, s, p, p_mask, rotary_offset, dim_q, pairs, NEOX, COPY_REST, BLOCK_D)
    else:
        hk = head - heads_q
        rotate_head(k + bi * k_sb + si * k_ss + hk * k_sh, k_out + bi * ko_sb + si * ko_ss + hk * ko_sh,
                    k_sd, ko_sd, c, s, p, p_mask, rotary_offset, dim_k, pairs, NEOX, COPY_REST, BLOCK_D)
