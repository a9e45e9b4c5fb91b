#!/usr/bin/env python3
"""rotary.torch against the plain-torch RoPE formulations, on the prefill shape of the kernels
issue: Llama-3-8B, batch 1, 4096 tokens, q 32 heads, k 8 heads, head_dim 128, BSHD.

Rows (medians of --repetitions timed calls after warm-up, one process, same tensors, the rows of a
dtype and thread count interleaved round by round so that they see the same machine load):
  copy              q.copy_(q_src), k.copy_(k_src) into preallocated buffers: bandwidth reference
  torch_hf          Hugging Face's eager form: gather cos/sin by position_ids from a cached
                    [max_pos, 128] float32 table, cast, q*cos + rotate_half(q)*sin, same for k
  torch_hf_compile  the same function under torch.compile (Inductor CPU; compile time excluded,
                    reported as compile_s)
  hf_apply          transformers' apply_rotary_pos_emb (modeling_llama) on gathered cos/sin:
                    the function the drop-in replaces
  rotary            rotary.torch.apply_rotary(q, k, positions, spec) (out of place)
  rotary_out        the same into preallocated outputs (out=(q_out, k_out)): no page faults
  rotary_inplace    the same with inplace=True
  rotary_drop_in    rotary.torch.apply_rotary_pos_emb(q, k, cos, sin): hf_apply's bits
                    (rounding like_torch), fresh outputs as transformers returns them
  drop_in_kernel_out  the drop-in's kernel (rotary._rotary.apply_cos_sin, like_torch) into
                    preallocated outputs: the drop-in without page faults
GB/s counts q and k read once and written once; ratio_to_copy divides by the copy row's GB/s;
speedup_vs_hf_apply divides hf_apply's time by the row's. Times are wall time (median_ms) and
this thread's CPU time (cpu_ms, CLOCK_THREAD_CPUTIME_ID: user + system, so page faults count;
it excludes the time the thread waited for a core, which on a loaded machine is most of the
difference; 1 thread only). The JSON is {"meta": {cpu_model, cpu_flags, load_average, torch,
transformers, thp}, "rows": [...]}.

  .venv/bin/python bench/python_bench.py [--threads 1 2] [--dtypes float32 bfloat16] [--json F]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

import rotary
import rotary.torch as rt
from rotary import _rotary, _torch_cos_sin

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from torch_rope_bench import cpu_description  # noqa: E402  (the peer script's: model and flags)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_apply_rotary_pos_emb():
    """transformers' own function when it is installed, else its two lines."""
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        return apply_rotary_pos_emb
    except ImportError:
        def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
            cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
            return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)
        return apply_rotary_pos_emb


def run(threads, dtype_name, repetitions, tokens, compile_hf):
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
    hf_apply = hf_apply_rotary_pos_emb()

    def copy():
        q_dst.copy_(q)
        k_dst.copy_(k)

    def torch_hf():
        cos = cos_cached[positions].to(dtype).unsqueeze(2)
        sin = sin_cached[positions].to(dtype).unsqueeze(2)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    views = [(_torch_cos_sin._view(x, "q", "bshd"), _torch_cos_sin._view(out, "q_out", "bshd")) for x, out in
             ((q, q_dst), (k, k_dst))]
    cos_view, sin_view = _torch_cos_sin._cos_sin_view(cos_g, "cos", 2), _torch_cos_sin._cos_sin_view(sin_g, "sin", 2)

    def drop_in_kernel_out():
        for x_view, out_view in views:
            _rotary.apply_cos_sin(x_view, out_view, cos_view, sin_view, "neox", "forward", "like_torch", "q")

    reference = hf_apply(q, k, cos_g, sin_g, unsqueeze_dim=2)
    dropped_in = rt.apply_rotary_pos_emb(q, k, cos_g, sin_g, unsqueeze_dim=2)
    assert torch.equal(reference[0], dropped_in[0]) and torch.equal(reference[1], dropped_in[1])
    drop_in_kernel_out()
    assert torch.equal(reference[0], q_dst) and torch.equal(reference[1], k_dst)
    rt.apply_rotary(q, k, positions, spec, layout="bshd")  # grows the shared table once, outside the timing
    cases = {
        "copy": copy,
        "torch_hf": torch_hf,
        "hf_apply": lambda: hf_apply(q, k, cos_g, sin_g, unsqueeze_dim=2),
        "rotary": lambda: rt.apply_rotary(q, k, positions, spec, layout="bshd"),
        "rotary_out": lambda: rt.apply_rotary(q, k, positions, spec, layout="bshd", out=(q_dst, k_dst)),
        "rotary_inplace": lambda: rt.apply_rotary(q_work, k_work, positions, spec, layout="bshd", inplace=True),
        "rotary_drop_in": lambda: rt.apply_rotary_pos_emb(q, k, cos_g, sin_g, unsqueeze_dim=2),
        "drop_in_kernel_out": drop_in_kernel_out,
    }
    extra = {}
    if compile_hf:
        torch._dynamo.reset()
        compiled = torch.compile(torch_hf, dynamic=False)
        start = time.perf_counter()
        try:
            compiled()
            extra["torch_hf_compile"] = {"compile_s": time.perf_counter() - start}
            cases["torch_hf_compile"] = compiled
        except Exception as error:  # Inductor needs a C++ compiler
            print(f"# torch_hf_compile skipped: {type(error).__name__}: {error}"[:300])
    wall = {name: [] for name in cases}
    cpu = {name: [] for name in cases}
    for fn in cases.values():  # warm-up
        fn()
    for _ in range(repetitions):
        for name, fn in cases.items():
            start_cpu, start = time.thread_time(), time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.thread_time() - start_cpu)
    rows = []
    for name in cases:
        seconds = statistics.median(wall[name])
        rows.append(dict({"case": name, "dtype": dtype_name, "threads": threads, "tokens": tokens,
                          "median_ms": seconds * 1e3, "min_ms": min(wall[name]) * 1e3,
                          "cpu_ms": statistics.median(cpu[name]) * 1e3 if threads == 1 else None,
                          "gb_per_s": bytes_moved / seconds / 1e9}, **extra.get(name, {})))
    by_case = {row["case"]: row for row in rows}
    for row in rows:
        row["ratio_to_copy"] = by_case["copy"]["median_ms"] / row["median_ms"]
        row["speedup_vs_hf_apply"] = by_case["hf_apply"]["median_ms"] / row["median_ms"]
        if row["cpu_ms"] is not None:
            row["cpu_ratio_to_copy"] = by_case["copy"]["cpu_ms"] / row["cpu_ms"]
            row["cpu_speedup_vs_hf_apply"] = by_case["hf_apply"]["cpu_ms"] / row["cpu_ms"]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=list(DTYPES))
    parser.add_argument("--repetitions", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--no-compile", action="store_true", help="skip torch_hf_compile")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args()
    model, flags = cpu_description()
    try:
        import transformers
        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    meta = {"cpu_model": model, "cpu_flags": flags, "load_average_start": list(os.getloadavg()),
            "torch": torch.__version__, "transformers": transformers_version, "rotary_target": rotary.current_cpu_target()}
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            meta["thp"] = f.read().strip()
    except OSError:
        pass
    print(f"# {model}; rotary target {meta['rotary_target']}; load average {os.getloadavg()[0]:.2f}")
    rows = []
    print(f"{'case':18} {'dtype':9} {'thr':>3} {'median ms':>10} {'cpu ms':>8} {'GB/s':>7} {'/copy':>6} "
          f"{'x hf_apply':>10} {'cpu /copy':>9} {'cpu x hf':>8}")
    for dtype_name in args.dtypes:
        for threads in args.threads:
            for row in run(threads, dtype_name, args.repetitions, args.tokens, not args.no_compile):
                rows.append(row)
                cpu = "-" if row["cpu_ms"] is None else f"{row['cpu_ms']:.2f}"
                print(f"{row['case']:18} {row['dtype']:9} {row['threads']:3d} {row['median_ms']:10.3f} {cpu:>8} "
                      f"{row['gb_per_s']:7.2f} {row['ratio_to_copy']:6.2f} {row['speedup_vs_hf_apply']:10.2f} "
                      f"{row.get('cpu_ratio_to_copy', float('nan')):9.2f} "
                      f"{row.get('cpu_speedup_vs_hf_apply', float('nan')):8.2f}"
                      + (f"  (compiled in {row['compile_s']:.1f} s, not timed)" if "compile_s" in row else ""))
    meta["load_average_end"] = list(os.getloadavg())
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
