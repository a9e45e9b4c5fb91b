#!/usr/bin/env python3
"""rotary.torch against the plain-torch RoPE formulation, on the prefill shape of the kernels
issue: Llama-3-8B, batch 1, 4096 tokens, q 32 heads, k 8 heads, head_dim 128, BSHD.

Rows (medians of --repetitions timed calls after warm-up, one process, same tensors):
  copy              q.copy_(q_src), k.copy_(k_src) into preallocated buffers: bandwidth reference
  torch_hf          Hugging Face's eager form: gather cos/sin by position_ids from a cached
                    [max_pos, 128] float32 table, cast, q*cos + rotate_half(q)*sin, same for k
  rotary            rotary.torch.apply_rotary(q, k, positions, spec) (custom op, out of place)
  rotary_out        the same into preallocated outputs (out=(q_out, k_out)): no page faults
  rotary_inplace    the same with inplace=True
  rotary_drop_in    rotary.torch.apply_rotary_pos_emb(q, k, cos, sin) (explicit cos/sin,
                    rounding like_torch: bit-identical to torch_hf's arithmetic; a plain loop)
GB/s counts q and k read once and written once; ratio_to_copy divides by the copy row's GB/s.

  .venv/bin/python bench/python_bench.py [--threads 1 2] [--dtypes float32 bfloat16] [--json F]
"""
import argparse
import json
import statistics
import time

import torch

import rotary
import rotary.torch as rt

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def median_seconds(fn, repetitions):
    fn()
    fn()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(threads, dtype_name, repetitions, tokens):
    torch.set_num_threads(threads)
    rotary.set_num_threads(threads)
    dtype = DTYPES[dtype_name]
    torch.manual_seed(0)
    q = torch.randn(1, tokens, 32, 128).to(dtype)
    k = torch.randn(1, tokens, 8, 128).to(dtype)
    positions = torch.arange(tokens)[None]
    spec = rotary.Spec.preset("llama-3.1-8b")
    bytes_moved = (q.numel() + k.numel()) * q.element_size() * 2
    # HF's cached table (float32), as LlamaRotaryEmbedding's older cached form.
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, dtype=torch.int64).float() / 128))
    freqs = torch.outer(torch.arange(tokens).float(), inv_freq)
    emb = torch.cat((freqs, freqs), -1)
    cos_cached, sin_cached = emb.cos(), emb.sin()
    q_dst, k_dst = torch.empty_like(q), torch.empty_like(k)
    q_work, k_work = q.clone(), k.clone()
    cos_g = cos_cached[positions].to(dtype)
    sin_g = sin_cached[positions].to(dtype)

    def copy():
        q_dst.copy_(q)
        k_dst.copy_(k)

    def torch_hf():
        cos = cos_cached[positions].to(dtype).unsqueeze(2)
        sin = sin_cached[positions].to(dtype).unsqueeze(2)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    rt.apply_rotary(q, k, positions, spec)  # grows the shared table once, outside the timing
    cases = {
        "copy": copy,
        "torch_hf": torch_hf,
        "rotary": lambda: rt.apply_rotary(q, k, positions, spec),
        "rotary_out": lambda: rt.apply_rotary(q, k, positions, spec, out=(q_dst, k_dst)),
        "rotary_inplace": lambda: rt.apply_rotary(q_work, k_work, positions, spec, inplace=True),
        "rotary_drop_in": lambda: rt.apply_rotary_pos_emb(q, k, cos_g, sin_g, unsqueeze_dim=2),
    }
    rows = []
    for name, fn in cases.items():
        seconds = median_seconds(fn, repetitions)
        rows.append({"case": name, "dtype": dtype_name, "threads": threads, "tokens": tokens,
                     "median_ms": seconds * 1e3, "gb_per_s": bytes_moved / seconds / 1e9})
    copy_rate = rows[0]["gb_per_s"]
    hf_rate = rows[1]["gb_per_s"]
    for row in rows:
        row["ratio_to_copy"] = row["gb_per_s"] / copy_rate
        row["speedup_vs_torch_hf"] = row["gb_per_s"] / hf_rate
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=list(DTYPES))
    parser.add_argument("--repetitions", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    rows = []
    print(f"{'case':16} {'dtype':9} {'thr':>3} {'median ms':>10} {'GB/s':>7} {'/copy':>6} {'x torch_hf':>10}")
    for dtype_name in args.dtypes:
        for threads in args.threads:
            for row in run(threads, dtype_name, args.repetitions, args.tokens):
                rows.append(row)
                print(f"{row['case']:16} {row['dtype']:9} {row['threads']:3d} {row['median_ms']:10.3f} "
                      f"{row['gb_per_s']:7.2f} {row['ratio_to_copy']:6.2f} {row['speedup_vs_torch_hf']:10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
