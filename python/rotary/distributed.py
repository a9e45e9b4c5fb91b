"""rotary.distributed: sequence sharding for context parallelism, and each shard's global positions.

Under context parallelism every rank holds part of a long sequence; RoPE must rotate each token
by its position in the whole sequence, not in the shard. Two splits, for a sequence of length S
over W ranks:

  contiguous: rank r holds tokens [r S/W, (r+1) S/W).
  zigzag:     the load-balanced split TransformerEngine / Megatron use for causal attention: the
              sequence is cut into 2W chunks of S/(2W) tokens and rank r holds chunks r and
              2W-1-r (an early and a late chunk, so every rank does the same causal work).

    pos = rotary.distributed.zigzag_positions(seq_len, world_size, rank)     # [S/W] int64
    q_shard = rotary.distributed.zigzag_shard(q, world_size, rank, seq_dim=1)
    q_out, k_out = rotary.torch.apply_rotary(q_shard, k_shard, pos.expand(batch, -1), spec, layout="bshd")
    full = rotary.distributed.unshard(gathered_shards, "zigzag", seq_dim=1)

Pure torch, no communication (gather the shards with torch.distributed as you like);
examples/context_parallel.py runs it on 2 processes and checks it bit for bit.
"""
from __future__ import annotations

import torch

from ._rotary import RotaryError

__all__ = ["contiguous_positions", "zigzag_positions", "contiguous_shard", "zigzag_shard", "unshard"]


def _check(seq_len: int, world_size: int, rank: int, chunks: int) -> int:
    for name, value in (("seq_len", seq_len), ("world_size", world_size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise RotaryError(f"{name} must be an int (got {value!r})")
    if world_size < 1:
        raise RotaryError(f"world_size must be >= 1 (got {world_size})")
    if not 0 <= rank < world_size:
        raise RotaryError(f"rank must be in [0, {world_size - 1}] (got {rank})")
    if seq_len < 0 or seq_len % chunks:
        raise RotaryError(f"seq_len must be a multiple of {chunks} (got {seq_len})")
    return seq_len // chunks


def contiguous_positions(seq_len: int, world_size: int, rank: int, *, device=None) -> torch.Tensor:
    """Global positions (int64, [seq_len / world_size]) of rank's contiguous shard."""
    size = _check(seq_len, world_size, rank, world_size)
    return torch.arange(rank * size, (rank + 1) * size, dtype=torch.int64, device=device)


def zigzag_positions(seq_len: int, world_size: int, rank: int, *, device=None) -> torch.Tensor:
    """Global positions (int64, [seq_len / world_size]) of rank's zigzag shard: chunks rank and
    2 world_size - 1 - rank of 2 world_size."""
    chunk = _check(seq_len, world_size, rank, 2 * world_size)
    late = 2 * world_size - 1 - rank
    return torch.cat((torch.arange(rank * chunk, (rank + 1) * chunk, dtype=torch.int64, device=device),
                      torch.arange(late * chunk, (late + 1) * chunk, dtype=torch.int64, device=device)))


def contiguous_shard(x: torch.Tensor, world_size: int, rank: int, *, seq_dim: int = 1) -> torch.Tensor:
    """Rank's contiguous shard of x along seq_dim (a view)."""
    size = _check(x.shape[seq_dim], world_size, rank, world_size)
    return x.narrow(seq_dim, rank * size, size)


def zigzag_shard(x: torch.Tensor, world_size: int, rank: int, *, seq_dim: int = 1) -> torch.Tensor:
    """Rank's zigzag shard of x along seq_dim: chunks rank and 2 world_size - 1 - rank, concatenated."""
    chunk = _check(x.shape[seq_dim], world_size, rank, 2 * world_size)
    late = 2 * world_size - 1 - rank
    return torch.cat((x.narrow(seq_dim, rank * chunk, chunk), x.narrow(seq_dim, late * chunk, chunk)), dim=seq_dim)


def unshard(shards, scheme: str, *, seq_dim: int = 1) -> torch.Tensor:
    """The full tensor from every rank's shard (shards[r] from rank r, as all_gather returns them)
    in global sequence order; scheme is "contiguous" or "zigzag"."""
    shards = list(shards)
    if scheme == "contiguous":
        return torch.cat(shards, dim=seq_dim)
    if scheme != "zigzag":
        raise RotaryError(f"scheme must be 'contiguous' or 'zigzag' (got {scheme!r})")
    world_size = len(shards)
    halves = [s.chunk(2, dim=seq_dim) for s in shards]  # (early chunk r, late chunk 2W-1-r)
    ordered = [halves[r][0] for r in range(world_size)] + [halves[r][1] for r in reversed(range(world_size))]
    return torch.cat(ordered, dim=seq_dim)
