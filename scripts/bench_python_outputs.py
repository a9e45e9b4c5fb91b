"""What a fresh output costs from Python: rotary.apply (NumPy) and rotary.torch.apply_rotary
(torch CPU tensors) out of place, into preallocated (warm) outputs and in place, against the
library's own fresh allocation + copy of the same arrays (np.empty_like + assignment, q.copy();
torch.empty_like + copy_, clone) and a copy into warm buffers. Llama-3-8B prefill heads by
default: q [1, 4096, 32, 128], k [1, 4096, 8, 128], layout bshd (64 + 16 MiB in float32).

Every repetition runs each case once, in a shuffled order (alternation: a load spike hits every
case alike); the figure is the median wall time of --repetitions, with the minor page faults the
case took per call (getrusage) and its ratio to the fresh copy of its library and to the call
into warm buffers. Prints the CPU's model name and its SIMD flags first.

    .venv/bin/python scripts/bench_python_outputs.py [--repetitions 15] [--threads 1]
        [--dtypes float32,bfloat16] [--seq 4096] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import statistics
import time

import numpy as np

import rotary

SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_fp16", "amx_bf16")


def cpu_description() -> dict:
    """The CPU's model name and the SIMD flags that pick rotary's kernels (Linux /proc/cpuinfo)."""
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    thp = "unknown"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="utf-8") as f:
            thp = f.read().strip()
    except OSError:
        pass
    return {"cpu_model": model, "cpu_flags": [f for f in SIMD_FLAGS if f in flags], "transparent_hugepage": thp}


def numpy_cases(q, k, spec) -> dict:
    # Warm outputs: rotary's own fresh ones (on a 64-byte boundary), and np.empty's (16 bytes past
    # a page, where the kernels' 64-byte stores straddle cache lines), each written once here.
    q_out, k_out = rotary.apply(q, k, None, spec, layout="bshd")
    q_empty, k_empty = np.empty_like(q), np.empty_like(k)
    q_empty[...] = q
    k_empty[...] = k
    q_in, k_in = q.copy(), k.copy()

    def fresh_copy():
        a, b = np.empty_like(q), np.empty_like(k)
        a[...] = q
        b[...] = k
        return a, b

    return {
        "rotary.apply fresh": lambda: rotary.apply(q, k, None, spec, layout="bshd"),
        # what the fresh path was before its outputs were placed and faulted in first
        "rotary.apply out=np.empty": lambda: rotary.apply(q, k, None, spec, layout="bshd",
                                                          out=(np.empty_like(q), np.empty_like(k))),
        "rotary.apply out= warm": lambda: rotary.apply(q, k, None, spec, layout="bshd", out=(q_out, k_out)),
        "rotary.apply out= warm np.empty": lambda: rotary.apply(q, k, None, spec, layout="bshd",
                                                                out=(q_empty, k_empty)),
        "rotary.apply inplace": lambda: rotary.apply(q_in, k_in, None, spec, layout="bshd", inplace=True),
        "numpy empty_like + assign": fresh_copy,
        "numpy q.copy()": lambda: (q.copy(), k.copy()),
        "numpy copyto warm": lambda: (np.copyto(q_out, q), np.copyto(k_out, k)),
    }


def torch_cases(q, k, spec) -> dict:
    import torch

    import rotary.torch as rt

    q_out, k_out = torch.empty_like(q).copy_(q), torch.empty_like(k).copy_(k)
    q_in, k_in = q.clone(), k.clone()
    return {
        "apply_rotary fresh": lambda: rt.apply_rotary(q, k, None, spec, layout="bshd"),
        "apply_rotary out= warm": lambda: rt.apply_rotary(q, k, None, spec, layout="bshd", out=(q_out, k_out)),
        "apply_rotary inplace": lambda: rt.apply_rotary(q_in, k_in, None, spec, layout="bshd", inplace=True),
        "torch empty_like + copy_": lambda: (torch.empty_like(q).copy_(q), torch.empty_like(k).copy_(k)),
        "torch clone": lambda: (q.clone(), k.clone()),
        "torch copy_ warm": lambda: (q_out.copy_(q), k_out.copy_(k)),
    }


def run(cases: dict, repetitions: int) -> dict:
    times = {name: [] for name in cases}
    faults = {name: [] for name in cases}
    for fn in cases.values():  # one untimed call each: tables, imports, first-call work
        fn()
    names = list(cases)
    for _ in range(repetitions):
        random.shuffle(names)
        for name in names:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            result = cases[name]()
            elapsed = time.perf_counter() - start
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
            times[name].append(elapsed)
            del result  # the fresh outputs go back before the next case, as in a model's loop
    return {name: {"median_ms": statistics.median(times[name]) * 1e3, "min_ms": min(times[name]) * 1e3,
                   "faults": statistics.median(faults[name])} for name in cases}


def print_table(title: str, rows: dict, fresh_copy: str, warm: str) -> None:
    print(f"\n{title}")
    print(f"| case | median ms | min ms | page faults / call | × {fresh_copy} | × {warm} |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['median_ms']:.2f} | {row['min_ms']:.2f} | {row['faults']:.0f} | "
              f"{row['median_ms'] / rows[fresh_copy]['median_ms']:.2f} | "
              f"{row['median_ms'] / rows[warm]['median_ms']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()

    cpu = cpu_description()
    print(f"CPU: {cpu['cpu_model']}; flags: {' '.join(cpu['cpu_flags'])}; THP: {cpu['transparent_hugepage']}")
    rotary.set_num_threads(args.threads)
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(args.threads)
            print(f"numpy {np.__version__}, torch {torch.__version__}, threads {args.threads}")
        except ImportError:
            print("torch not installed: NumPy rows only")
    spec = rotary.Spec.preset("llama-3.1-8b")
    rng = np.random.default_rng(0)
    results = {"cpu": cpu, "threads": args.threads, "seq": args.seq, "rows": {}}
    for dtype_name in args.dtypes.split(","):
        q32 = rng.standard_normal((1, args.seq, 32, 128), dtype=np.float32)
        k32 = rng.standard_normal((1, args.seq, 8, 128), dtype=np.float32)
        if dtype_name == "bfloat16":
            import ml_dtypes
            q, k = q32.astype(ml_dtypes.bfloat16), k32.astype(ml_dtypes.bfloat16)
        else:
            q, k = q32.astype(dtype_name), k32.astype(dtype_name)
        mib = (q.nbytes + k.nbytes) / 2**20
        rows = run(numpy_cases(q, k, spec), args.repetitions)
        print_table(f"NumPy {dtype_name}, q + k {mib:.0f} MiB, {args.repetitions} repetitions", rows,
                    "numpy empty_like + assign", "rotary.apply out= warm")
        results["rows"][f"numpy {dtype_name}"] = rows
        if torch is not None:
            tq = torch.from_numpy(q32).to(getattr(torch, dtype_name))
            tk = torch.from_numpy(k32).to(getattr(torch, dtype_name))
            rows = run(torch_cases(tq, tk, spec), args.repetitions)
            print_table(f"torch {dtype_name}, q + k {mib:.0f} MiB, {args.repetitions} repetitions", rows,
                        "torch empty_like + copy_", "apply_rotary out= warm")
            results["rows"][f"torch {dtype_name}"] = rows
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
