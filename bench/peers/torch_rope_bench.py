#!/usr/bin/env python3
"""bench/peers/torch_rope_bench.py: rotary's PyTorch peer. Times the eager-mode PyTorch
formulations of RoPE that rotary's kernels are compared with, on q and k together (GQA head
counts), with the same byte count as `rotary bench`.

Installed with the `rotary` command (share/rotary/peers/) and run by `rotary bench`, which passes
one shape per run and reads the JSON (--json PATH) back: src/cli/bench_peer.cpp reads
results[].{method, dtype, threads, layout, median_ms, min_ms, reps} and meta.{torch_version,
cpu_capability}. Keep those names when changing this file. It also runs on its own:

  .venv/bin/python bench/peers/torch_rope_bench.py --threads 1 2 --json out.json

Formulations (method), each timed per call on q and k:
  copy        q_dst.copy_(q), k_dst.copy_(k) into preallocated tensors: torch's own bandwidth on
              the same bytes, same dtype and threads (layout "-").
  hf          Hugging Face's LlamaRotaryEmbedding path: cos / sin gathered by position_ids from a
              cached [max_pos, head_dim] float32 table (cat(freqs, freqs)), cast to the activation
              dtype, then x * cos + rotate_half(x) * sin for q and for k. Layouts bshd
              [B, S, H, D] and bhsd [B, H, S, D]. Also reports the largest difference from the
              same arithmetic in float64 on the first 64 tokens (max_abs_err_vs_f64).
  hf_apply    the same with cos / sin gathered beforehand: only the two rotations.
  hf_noalloc  the same arithmetic written into preallocated outputs (out=): no temporaries. Eager
              hf and hf_apply allocate about seven tensors the size of q per call, each a fresh
              mmap that page-faults on first touch, which can dominate their time (try
              GLIBC_TUNABLES=glibc.malloc.hugetlb=1). Checked bit for bit against hf_apply
              (bitwise_equal_to_hf).
  hf_compile  the hf path (the same function) under torch.compile (Inductor's CPU code
              generation, dynamic=False, one graph per shape, dtype and layout). The first call
              compiles; its time is excluded from the timing and reported as compile_s. Checked
              bit for bit against eager hf (bitwise_equal_to_hf); --no-compile skips it, and a
              compile that fails (no C compiler, say) is left out, with why in meta.compile_errors.
  meta        Meta's LLaMA reference: view_as_complex(x.float()) * freqs_cis, view_as_real,
              flatten, type_as(x). bshd, float32 only.

Bytes per call = (q + k elements) x element size x 2: every element read once and written once,
the least any RoPE (in or out of place) moves; the temporaries eager PyTorch makes are not
counted. ratio = GB/s / the copy GB/s of the same dtype and threads. Each method: --warmup untimed
calls, then --reps calls timed one by one with time.perf_counter; median and minimum.

With --table-positions > 0 it also times building the cos/sin table (Hugging Face's float32 form,
and the head_dim / 2 distinct frequencies alone) on one thread.

Needs torch and the Python standard library only.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# How every GB/s here counts bytes (the rule of `rotary bench`).
BYTES_RULE = "(q+k elements) * element size * 2"


# ---- the formulations ---------------------------------------------------------------------------
# Each mirrors the arithmetic of the public code it names, operation for operation, so that its
# time is what that code costs.

def inv_freq_hf(head_dim, theta):
    """HF: 1 / (base ** (arange(0, dim, 2).float() / dim)), float32."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (theta ** exponents)


def angles(positions, head_dim, theta):
    """float32 angle of every (position, frequency): outer(positions, inv_freq)."""
    inv_freq = inv_freq_hf(head_dim, theta)
    t = torch.arange(positions, dtype=torch.int64).type_as(inv_freq)
    return torch.outer(t, inv_freq)


def cos_sin_table_hf(positions, head_dim, theta):
    """HF's cached table: cos and sin of cat(freqs, freqs), each [positions, head_dim]."""
    freqs = angles(positions, head_dim, theta)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def cos_sin_table_half(positions, head_dim, theta):
    """The same angles without the duplication: [positions, head_dim / 2]."""
    freqs = angles(positions, head_dim, theta)
    return freqs.cos(), freqs.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def gather_cos_sin(cos_table, sin_table, position_ids, dtype, head_axis):
    """HF: table[position_ids].to(dtype).unsqueeze(head axis), for cos and sin."""
    cos = cos_table[position_ids].to(dtype).unsqueeze(head_axis)
    sin = sin_table[position_ids].to(dtype).unsqueeze(head_axis)
    return cos, sin


def rotate_hf(q, k, cos, sin):
    """HF's apply_rotary_pos_emb with cos / sin given."""
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def rope_hf(q, k, cos_table, sin_table, position_ids, head_axis):
    """HF's whole path: gather, cast, rotate."""
    cos, sin = gather_cos_sin(cos_table, sin_table, position_ids, q.dtype, head_axis)
    return rotate_hf(q, k, cos, sin)


def rotate_hf_into(x, cos, sin, out, scratch):
    """out = x * cos + rotate_half(x) * sin with no allocation (scratch: shaped like x).
    rotate_half(x) * sin, by halves: [-x2 * sin1, x1 * sin2]."""
    half = x.shape[-1] // 2
    torch.mul(x, cos, out=out)
    torch.mul(x[..., half:], sin[..., :half], out=scratch[..., :half])
    scratch[..., :half].neg_()
    torch.mul(x[..., :half], sin[..., half:], out=scratch[..., half:])
    out.add_(scratch)
    return out


def freqs_cis_meta(head_dim, positions, theta):
    """Meta's precompute_freqs_cis: polar(1, outer(t, freqs)), complex64 [positions, head_dim / 2]."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: (head_dim // 2)].float() / head_dim))
    t = torch.arange(positions, device=freqs.device, dtype=torch.float32)
    freqs = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def rope_meta(xq, xk, freqs_cis):
    """Meta's apply_rotary_emb on bshd q and k; freqs_cis [S, D / 2]."""
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    # reshape_for_broadcast: keep the sequence and pair axes, 1 elsewhere
    shape = [d if axis in (1, xq_.ndim - 1) else 1 for axis, d in enumerate(xq_.shape)]
    rotation = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * rotation).flatten(3)
    xk_out = torch.view_as_real(xk_ * rotation).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def max_error_vs_float64(q, k, cos_table, sin_table, position_ids, head_axis, seq_axis):
    """Largest |hf - float64 hf| over the first 64 tokens: the timed path computes what it should."""
    tokens = slice(0, 64)
    q64 = q.narrow(seq_axis, 0, min(64, q.shape[seq_axis]))
    k64 = k.narrow(seq_axis, 0, min(64, k.shape[seq_axis]))
    ids = position_ids[:, tokens]
    q_out, k_out = rope_hf(q64, k64, cos_table, sin_table, ids, head_axis)
    cos, sin = gather_cos_sin(cos_table.double(), sin_table.double(), ids, torch.float64, head_axis)
    q_ref, k_ref = rotate_hf(q64.double(), k64.double(), cos, sin)
    return max((q_out.double() - q_ref).abs().max().item(), (k_out.double() - k_ref).abs().max().item())


# ---- timing -------------------------------------------------------------------------------------

def time_calls(call, reps, warmup):
    """Seconds per call: `warmup` untimed calls, then `reps` calls timed one by one."""
    for _ in range(warmup):
        call()
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds


def summary(seconds, bytes_per_call):
    median = statistics.median(seconds)
    fastest = min(seconds)
    return {
        "median_ms": median * 1e3,
        "min_ms": fastest * 1e3,
        "max_ms": max(seconds) * 1e3,
        "gbps_median": bytes_per_call / median / 1e9 if bytes_per_call else None,
        "gbps_best": bytes_per_call / fastest / 1e9 if bytes_per_call else None,
        "reps": len(seconds),
    }


# ---- one run ------------------------------------------------------------------------------------

def run_methods(args, dtype_name, threads, tables, position_ids):
    """Every method for one dtype and thread count; returns their results (copy first)."""
    B, S, HQ, HK, D = args.batch, args.tokens, args.heads_q, args.heads_kv, args.head_dim
    dtype = DTYPES[dtype_name]
    element_bytes = torch.empty((), dtype=dtype).element_size()
    bytes_per_call = B * S * (HQ + HK) * D * element_bytes * 2
    cos_table, sin_table, freqs_cis = tables
    q_bshd = torch.randn(B, S, HQ, D).to(dtype)
    k_bshd = torch.randn(B, S, HK, D).to(dtype)
    results = []

    def record(method, layout, seconds, **extra):  # ratio: against copy_gbps, set by the first call
        result = dict(summary(seconds, bytes_per_call), method=method, layout=layout, dtype=dtype_name,
                      threads=threads)
        result["ratio"] = 1.0 if method == "copy" else result["gbps_median"] / copy_gbps
        result.update(extra)
        results.append(result)
        return result

    q_copy, k_copy = torch.empty_like(q_bshd), torch.empty_like(k_bshd)

    def copy():
        q_copy.copy_(q_bshd)
        k_copy.copy_(k_bshd)

    copy_gbps = record("copy", "-", time_calls(copy, args.reps, args.warmup))["gbps_median"]
    del q_copy, k_copy

    for layout in args.layouts:
        if layout == "bshd":
            q, k, head_axis, seq_axis = q_bshd, k_bshd, 2, 1
        else:
            q, k, head_axis, seq_axis = q_bshd.transpose(1, 2).contiguous(), k_bshd.transpose(1, 2).contiguous(), 1, 2
        error = max_error_vs_float64(q, k, cos_table, sin_table, position_ids, head_axis, seq_axis)
        record("hf", layout,
               time_calls(lambda: rope_hf(q, k, cos_table, sin_table, position_ids, head_axis), args.reps, args.warmup),
               max_abs_err_vs_f64=error)

        if not args.no_compile:
            record_compiled(record, layout, q, k, cos_table, sin_table, position_ids, head_axis, args)

        cos, sin = gather_cos_sin(cos_table, sin_table, position_ids, dtype, head_axis)
        record("hf_apply", layout, time_calls(lambda: rotate_hf(q, k, cos, sin), args.reps, args.warmup))

        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        q_scratch, k_scratch = torch.empty_like(q), torch.empty_like(k)

        def noalloc():
            rotate_hf_into(q, cos, sin, q_out, q_scratch)
            rotate_hf_into(k, cos, sin, k_out, k_scratch)

        noalloc()
        q_hf, k_hf = rotate_hf(q, k, cos, sin)
        same = bool(torch.equal(q_hf, q_out) and torch.equal(k_hf, k_out))
        record("hf_noalloc", layout, time_calls(noalloc, args.reps, args.warmup), bitwise_equal_to_hf=same)
        del q, k, cos, sin, q_out, k_out, q_scratch, k_scratch, q_hf, k_hf

    if not args.no_meta and dtype_name == "float32":
        rotation = freqs_cis[:S]
        record("meta", "bshd", time_calls(lambda: rope_meta(q_bshd, k_bshd, rotation), args.reps, args.warmup))
    return results


COMPILE_ERRORS = []  # why hf_compile rows are missing, for meta


def record_compiled(record, layout, q, k, cos_table, sin_table, position_ids, head_axis, args):
    """hf_compile: rope_hf under torch.compile; the compiling first call timed apart."""
    torch._dynamo.reset()  # one fresh graph per (dtype, layout, threads): no recompile limit reached
    compiled = torch.compile(rope_hf, dynamic=False)
    start = time.perf_counter()
    try:
        q_out, k_out = compiled(q, k, cos_table, sin_table, position_ids, head_axis)
    except Exception as error:  # Inductor needs a working C++ compiler; say why, keep the other rows
        COMPILE_ERRORS.append(f"{layout} {q.dtype}: {type(error).__name__}: {error}"[:300])
        return
    compile_s = time.perf_counter() - start
    q_hf, k_hf = rope_hf(q, k, cos_table, sin_table, position_ids, head_axis)
    same = bool(torch.equal(q_hf, q_out) and torch.equal(k_hf, k_out))
    record("hf_compile", layout,
           time_calls(lambda: compiled(q, k, cos_table, sin_table, position_ids, head_axis), args.reps, args.warmup),
           compile_s=compile_s, bitwise_equal_to_hf=same)


def cpu_description():
    """The CPU model and its flags (/proc/cpuinfo on Linux; platform's answer elsewhere)."""
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.processor() or platform.machine()):
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = value.split()
    except OSError:
        pass
    return model, flags


def time_table_builds(args):
    """The cos/sin table build on one thread, float32."""
    torch.set_num_threads(1)
    P, D = args.table_positions, args.head_dim
    builds = [
        ("hf_cat_cos_sin_f32", lambda: cos_sin_table_hf(P, D, args.theta), f"{P}x{D} (cat(freqs,freqs))"),
        ("half_cos_sin_f32", lambda: cos_sin_table_half(P, D, args.theta), f"{P}x{D // 2}"),
    ]
    rows = []
    for method, build, shape in builds:
        result = summary(time_calls(build, args.table_reps, 1), 0)
        del result["gbps_median"], result["gbps_best"]
        rows.append(dict(result, method=method, shape=shape, threads=1))
    return rows


def describe_machine(args):
    cpu_model, cpu_flags = cpu_description()
    meta = {
        "torch_version": torch.__version__,
        "cpu_model": cpu_model,
        "cpu_flags": cpu_flags,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "shape": {"batch": args.batch, "tokens": args.tokens, "heads_q": args.heads_q, "heads_kv": args.heads_kv,
                  "head_dim": args.head_dim},
        "theta": args.theta,
        "bytes_rule": BYTES_RULE,
        "env": {name: os.environ[name] for name in ("GLIBC_TUNABLES", "OMP_NUM_THREADS", "LD_PRELOAD")
                if name in os.environ},
    }
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            meta["thp"] = f.read().strip()
    except OSError:
        pass
    try:
        meta["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:  # older torch: no such query
        pass
    return meta


def print_text(args, meta, results, table_builds):
    print(f"# {meta['cpu_model']}; load average {meta['load_average']}")
    print(f"# torch {meta['torch_version']}  shape B={args.batch} S={args.tokens} Hq={args.heads_q}"
          f" Hkv={args.heads_kv} D={args.head_dim}  theta={args.theta:g}"
          f"  cpu_capability={meta.get('cpu_capability', '?')}")
    elements = args.batch * args.tokens * (args.heads_q + args.heads_kv) * args.head_dim
    print(f"# bytes per call = {elements} elems x esize x 2;  median of {args.reps} after {args.warmup} warmup;"
          f"  ratio = GB/s / copy GB/s (same dtype, threads);  THP {meta.get('thp', '?')}"
          f"  env {meta['env'] or '-'}")
    header = (f"{'method':<10} {'layout':<6} {'dtype':<9} {'thr':>3} {'median ms':>10} {'min ms':>9} {'max ms':>9}"
              f" {'GB/s':>7} {'ratio':>6}  note")
    print(header)
    print("-" * len(header))
    for r in results:
        note = ""
        if "max_abs_err_vs_f64" in r:
            note = f"max|err| vs f64 {r['max_abs_err_vs_f64']:.2e}"
        if "bitwise_equal_to_hf" in r:
            note = "bitwise == hf" if r["bitwise_equal_to_hf"] else "DIFFERS from hf"
        if "compile_s" in r:
            note += f"; compiled in {r['compile_s']:.1f} s (not timed)"

        print(f"{r['method']:<10} {r['layout']:<6} {r['dtype']:<9} {r['threads']:>3} {r['median_ms']:>10.3f}"
              f" {r['min_ms']:>9.3f} {r['max_ms']:>9.3f} {r['gbps_median']:>7.2f} {r['ratio']:>6.3f}  {note}")
    if table_builds:
        print()
        print(f"# cos/sin table build, float32, 1 thread, median of {args.table_reps}")
        for r in table_builds:
            print(f"{r['method']:<20} {r['shape']:<28} median {r['median_ms']:9.3f} ms"
                  f"  min {r['min_ms']:9.3f}  max {r['max_ms']:9.3f}")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Time PyTorch eager RoPE formulations (Hugging Face rotate_half, Meta complex) on q and k,"
                    " and the cos/sin table build; report ms, GB/s and the ratio to torch's copy.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=4096, help="sequence length S")
    parser.add_argument("--heads-q", type=int, default=32)
    parser.add_argument("--heads-kv", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--theta", type=float, default=500000.0, help="RoPE base")
    parser.add_argument("--max-pos", type=int, default=8192, help="rows of the cached cos/sin table")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(DTYPES))
    parser.add_argument("--layouts", nargs="+", default=["bshd", "bhsd"], choices=["bshd", "bhsd"])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--no-meta", action="store_true", help="skip Meta's complex formulation")
    parser.add_argument("--no-compile", action="store_true", help="skip hf under torch.compile (hf_compile)")
    parser.add_argument("--table-positions", type=int, default=131072,
                        help="positions for the cos/sin table-build timing (0 to skip)")
    parser.add_argument("--table-reps", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write every result as JSON to PATH ('-' = stdout)")
    args = parser.parse_args(argv)
    if args.head_dim % 2:
        parser.error("--head-dim must be even")
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(0)
    table_positions = max(args.max_pos, args.tokens)
    cos_table, sin_table = cos_sin_table_hf(table_positions, args.head_dim, args.theta)
    freqs_cis = freqs_cis_meta(args.head_dim, table_positions, args.theta)
    position_ids = torch.arange(args.tokens, dtype=torch.int64).unsqueeze(0).expand(args.batch, args.tokens)
    meta = describe_machine(args)

    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for dtype_name in args.dtypes:
            results += run_methods(args, dtype_name, threads, (cos_table, sin_table, freqs_cis), position_ids)
    table_builds = time_table_builds(args) if args.table_positions > 0 else []
    if COMPILE_ERRORS:
        meta["compile_errors"] = COMPILE_ERRORS
        for error in COMPILE_ERRORS:
            print(f"# hf_compile skipped: {error}", file=sys.stderr)

    print_text(args, meta, results, table_builds)
    if args.json:
        document = {"meta": meta, "results": results, "table_build": table_builds}
        if args.json == "-":
            json.dump(document, sys.stdout, indent=1)
            print()
        else:
            with open(args.json, "w") as f:
                json.dump(document, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
