#!/usr/bin/env python3
"""bench/peers/torch_attention_bench.py: the PyTorch peer of bench/attention_bench.cpp's causal
prefill. Times torch eager RoPE (Hugging Face's rotate_half form, cos/sin precomputed) followed by
scaled_dot_product_attention(is_causal=True, enable_gqa=True) on Llama-3-8B shapes (32 q heads,
8 kv heads, head_dim 128, BHSD, batch 1), float32 and bfloat16, 1 and 2 threads, 1,024 and 4,096
tokens. Prints the best wall time and the process CPU time per call (all threads).

  .venv/bin/python bench/peers/torch_attention_bench.py
"""
import time

import torch


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


def main():
    torch.manual_seed(0)
    inv_freq = 1.0 / (500000 ** (torch.arange(0, 128, 2).float() / 128))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            for n in (1024, 4096):
                q = torch.randn(1, 32, n, 128, dtype=dtype) * 0.3
                k = torch.randn(1, 8, n, 128, dtype=dtype) * 0.3
                v = torch.randn(1, 8, n, 128, dtype=dtype)
                angles = torch.arange(n).float()[:, None] * inv_freq[None]
                emb = torch.cat((angles, angles), -1)
                cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)

                def step():
                    return torch.nn.functional.scaled_dot_product_attention(
                        rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True, enable_gqa=True)

                step()  # warm-up
                reps = 3 if n == 4096 else 5
                best = float("inf")
                cpu_start = time.process_time()
                for _ in range(reps):
                    start = time.perf_counter()
                    step()
                    best = min(best, time.perf_counter() - start)
                cpu = (time.process_time() - cpu_start) / reps
                print(f"torch {torch.__version__} threads {threads} {dtype} tokens {n}: "
                      f"best {best * 1e3:.1f} ms wall, {cpu * 1e3:.1f} ms CPU per call", flush=True)


if __name__ == "__main__":
    main()
