#!/usr/bin/env python3
"""bench/peers/torch_attention_bench.py: the PyTorch peer of rotary's attention (`rotary bench`'s
attn_* cases, src/cli/bench_attention.hpp; bench/attention_bench.cpp). Llama-3-8B shapes: 32 q
heads, 8 kv heads, head_dim 128, BHSD, batch 1, rope theta 500000.

  --case prefill  Hugging Face's eager RoPE (rotate_half, cos/sin precomputed and cast to the
                  dtype) on q and k, then scaled_dot_product_attention(is_causal=True,
                  enable_gqa=True): causal self-attention over --tokens tokens (method "sdpa").
  --case decode   one query at position tokens-1: RoPE of q, then scaled_dot_product_attention(
                  enable_gqa=True) over a cache of --tokens rotated keys and values (no mask: the
                  one query sees every key; is_causal would align it top-left and show it key 0).

Installed with the `rotary` command beside torch_rope_bench.py and run by `rotary bench`, which
reads the JSON (--json PATH) back: results[].{method, dtype, threads, layout, median_ms, min_ms,
reps} and meta.{torch_version, cpu_capability}. Keep those names when changing this file. Each
row: --warmup untimed calls, then --reps calls timed one by one with time.perf_counter; median
and minimum. Without --json it prints one line per row (with the process CPU time per call).

  .venv/bin/python bench/peers/torch_attention_bench.py                      # prefill 1,024 and 4,096
  .venv/bin/python bench/peers/torch_attention_bench.py --case decode --tokens 4096 32768

Needs torch and the Python standard library only.
"""
import argparse
import json
import platform
import statistics
import time

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def rotate_half(x):
    """Hugging Face's rotate_half."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, cos, sin):
    """Hugging Face's apply_rotary_pos_emb for one tensor: x * cos + rotate_half(x) * sin."""
    return x * cos + rotate_half(x) * sin


def cos_sin(positions, head_dim, theta, dtype):
    """HF's table: cos / sin of cat(freqs, freqs), float32, cast to the activation dtype."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def make_step(case, tokens, heads_q, heads_kv, head_dim, theta, dtype):
    torch.manual_seed(0)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if case == "prefill":
        q = torch.randn(1, heads_q, tokens, head_dim, dtype=dtype) * 0.3
        k = torch.randn(1, heads_kv, tokens, head_dim, dtype=dtype) * 0.3
        v = torch.randn(1, heads_kv, tokens, head_dim, dtype=dtype)
        cos, sin = cos_sin(torch.arange(tokens), head_dim, theta, dtype)

        def step():
            return sdpa(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True, enable_gqa=True)

        return step
    q = torch.randn(1, heads_q, 1, head_dim, dtype=dtype) * 0.3
    k = torch.randn(1, heads_kv, tokens, head_dim, dtype=dtype) * 0.3  # the cache: rotated keys
    v = torch.randn(1, heads_kv, tokens, head_dim, dtype=dtype)
    cos, sin = cos_sin(torch.tensor([tokens - 1]), head_dim, theta, dtype)

    def step():
        return sdpa(rope(q, cos, sin), k, v, enable_gqa=True)

    return step


def time_step(step, warmup, reps):
    for _ in range(warmup):
        step()
    times = []
    cpu_start = time.process_time()
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    cpu_ms = (time.process_time() - cpu_start) / reps * 1e3
    return statistics.median(times), min(times), cpu_ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=("prefill", "decode"), default="prefill")
    parser.add_argument("--tokens", type=int, nargs="+", default=None,
                        help="sequence (prefill) or cache (decode) lengths; default 1024 4096 / 4096")
    parser.add_argument("--heads-q", type=int, default=32)
    parser.add_argument("--heads-kv", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--theta", type=float, default=500000.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(DTYPES))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = parser.parse_args()
    tokens_list = args.tokens or ([1024, 4096] if args.case == "prefill" else [4096])

    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for dtype_name in args.dtypes:
            for tokens in tokens_list:
                step = make_step(args.case, tokens, args.heads_q, args.heads_kv, args.head_dim, args.theta,
                                 DTYPES[dtype_name])
                median_ms, min_ms, cpu_ms = time_step(step, args.warmup, args.reps)
                results.append({"method": "sdpa", "case": args.case, "tokens": tokens, "dtype": dtype_name,
                                "threads": threads, "layout": "bhsd", "median_ms": median_ms, "min_ms": min_ms,
                                "cpu_ms_per_call": cpu_ms, "reps": args.reps})
                if not args.json:
                    print(f"torch {torch.__version__} {args.case} threads {threads} {dtype_name} tokens {tokens}: "
                          f"median {median_ms:.2f} ms, best {min_ms:.2f} ms wall, {cpu_ms:.2f} ms CPU per call",
                          flush=True)
    if args.json:
        meta = {"torch_version": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "machine": platform.machine(), "python": platform.python_version()}
        with open(args.json, "w") as out:
            json.dump({"meta": meta, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
