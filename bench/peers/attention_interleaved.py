#!/usr/bin/env python3
"""bench/peers/attention_interleaved.py: rotary's CPU attention and torch's
scaled_dot_product_attention on the same tensors, timed in alternation within one process.

`rotary bench` runs torch in its own process after rotary's rows; on a VM whose clock moves
within minutes (1.5-2.5 GHz was seen on one Xeon within a run) the two sides then see different
machines. Here each round times one rotary call and one torch call back to back, so both see the
same clock; the medians over the rounds and their ratio are printed.

Llama-3-8B heads (32 q, 8 kv, head_dim 128), BHSD, batch 1, causal self-attention over --tokens
tokens. rotary: rotary.torch.attention(q, k, v, causal=True), with --fused RoPE fused from
llama-3.1-8b's table (positions 0..tokens-1); torch: scaled_dot_product_attention(is_causal=True,
enable_gqa=True) on the same q, k, v (with --fused, Hugging Face's eager rotate_half RoPE first,
as `rotary bench`'s torch row does). Also prints the largest difference between the two outputs.

  .venv/bin/python bench/peers/attention_interleaved.py --tokens 4096 --threads 1
  .venv/bin/python bench/peers/attention_interleaved.py --tokens 1024 --dtype float32 --fused

Needs torch and the rotary package (make python).
"""
import argparse
import statistics
import time

import torch

import rotary
import rotary.torch as rt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fused", action="store_true", help="RoPE fused into rotary's call; eager RoPE before SDPA")
    args = parser.parse_args()
    if args.tokens < 1 or args.rounds < 1 or args.threads < 1:
        parser.error("--tokens, --rounds and --threads must be positive")
    torch.set_num_threads(args.threads)
    rotary.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    n = args.tokens
    q = (torch.randn(1, 32, n, 128, generator=generator) * 0.5).to(dtype)
    k = (torch.randn(1, 8, n, 128, generator=generator) * 0.5).to(dtype)
    v = torch.randn(1, 8, n, 128, generator=generator).to(dtype)
    positions = torch.arange(n)
    table = rotary.Table(rotary.Spec.preset("llama-3.1-8b")) if args.fused else None
    if args.fused:  # Hugging Face's cos / sin ([tokens, head_dim], cat(f, f)) in the activation dtype
        cos, sin = (torch.from_numpy(x).to(dtype) for x in table.cos_sin(positions.numpy()))

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def rotary_call() -> torch.Tensor:
        if args.fused:
            return rt.attention(q, k, v, causal=True, rope=rt.FusedRope(table, q_positions=positions, k_positions=positions))
        return rt.attention(q, k, v, causal=True)

    def torch_call() -> torch.Tensor:
        qq, kk = q, k
        if args.fused:
            qq, kk = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        return torch.nn.functional.scaled_dot_product_attention(qq, kk, v, is_causal=True, enable_gqa=True)

    rotary_call(), torch_call()  # warm-up
    times_rotary, times_torch = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        rotary_call()
        times_rotary.append(time.perf_counter() - start)
        start = time.perf_counter()
        torch_call()
        times_torch.append(time.perf_counter() - start)
    r, t = statistics.median(times_rotary), statistics.median(times_torch)
    difference = (rotary_call().float() - torch_call().float()).abs().max().item()
    print(f"tokens {n} threads {args.threads} {args.dtype}{' fused RoPE' if args.fused else ''}: "
          f"rotary {r * 1e3:.1f} ms, torch {t * 1e3:.1f} ms (medians of {args.rounds}, alternated); "
          f"rotary at {t / r:.2f}x torch's speed; max |rotary - torch| {difference:.3g}; torch {torch.__version__}")


if __name__ == "__main__":
    main()
