"""The GPU check's measurements (scripts/gpu-check.sh runs it after building the package and the
CUDA tests; docs/gpu.md). Three parts, each recorded in one JSON file even when another fails:

1. dropin: the Hugging Face drop-in on CUDA. A tiny random Llama in float32 and bfloat16, patched
   (precision "hf") against an unpatched copy: logits and greedy tokens bit for bit; rotary's
   RotaryEmbedding cos/sin against transformers' on the device; backend "auto" against "triton".
2. bench: apply_rotary(backend="triton") at Llama-3-8B shapes (32 q / 8 kv heads, head_dim 128),
   timed with triton.testing.do_bench (CUDA events, median), as a ratio to a device-to-device copy
   of the same bytes in the same run, beside what a user would pick instead: transformers'
   apply_rotary_pos_emb eager and under torch.compile, Liger-Kernel's Triton RoPE (when its wheel
   was carried), and rotary's pure-torch backend. The kernel alone (launch without the Python
   checks) is timed too, and a sweep of the launch shape (heads per program, warps).
3. attention: rotary._triton_attention (plain and with fused RoPE) against torch's SDPA (flash
   backend, and its own choice) at Llama-3-8B shapes: prefill 4,096 tokens, decode from a 4,096
   and a 32,768 cache; TFLOP/s and the KV read rate beside a copy of the KV bytes.
4. summary: one line per row, printed last.

--smoke runs every part on tiny shapes on the CPU under TRITON_INTERPRET=1 (timed with a host
clock): a check that the script itself works, before device time is spent on it.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
import traceback


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "gpu-check-out"), help="folder of gpu_check.json")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under TRITON_INTERPRET=1")
    parser.add_argument("--parts", default="dropin,bench,attention", help="comma-separated: dropin, bench, attention")
    return parser.parse_args()


ARGS = parse()
if ARGS.smoke:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402 (after TRITON_INTERPRET)

import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from rotary import _triton_rope  # noqa: E402

DEVICE = "cpu" if ARGS.smoke else "cuda"
RESULTS = {"device": DEVICE, "parts": {}}


def record(part, key, value):
    RESULTS["parts"].setdefault(part, {})[key] = value
    write()


def write():
    os.makedirs(ARGS.out, exist_ok=True)
    path = os.path.join(ARGS.out, "gpu_check.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def environment():
    info = {"python": platform.python_version(), "torch": torch.__version__, "rotary": rotary.__version__,
            "cpu": platform.processor()}
    for name in ("triton", "transformers", "liger_kernel"):
        try:
            module = __import__(name)
            info[name] = getattr(module, "__version__", "?")
        except Exception as error:  # noqa: BLE001 (recorded, not fatal)
            info[name] = f"missing: {error}"
    if DEVICE == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, sms=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1),
                    cuda=torch.version.cuda)
    RESULTS["environment"] = info
    write()


def median_ms(fn):
    """Median milliseconds of fn(): CUDA events on the GPU, a host clock in the smoke run."""
    if DEVICE == "cuda":
        import triton.testing
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    fn()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[1]


# ---- 1. the drop-in on CUDA --------------------------------------------------------------------
def tiny_llama(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         rope_theta=500000.0, attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device=DEVICE, dtype=dtype).eval()


def dropin():
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        try:
            stock = tiny_llama(dtype)
            patched = copy.deepcopy(stock)
            replaced = rt.patch_model(patched, precision="hf")
            ids = torch.randint(0, 512, (2, 48 if ARGS.smoke else 256), device=DEVICE,
                                generator=torch.Generator(DEVICE).manual_seed(1))
            far = torch.arange(ids.shape[1], device=DEVICE).expand(2, -1) + 3000
            with torch.no_grad():
                same = {}
                for label, kwargs in (("positions 0..", {}), ("positions 3000..", {"position_ids": far})):
                    a = stock(ids, **kwargs).logits
                    b = patched(ids, **kwargs).logits
                    same[label] = {"bit_identical": bool(torch.equal(a, b)),
                                   "max_abs_difference": float((a.float() - b.float()).abs().max())}
                gen_a = stock.generate(ids[:, :16], max_new_tokens=12, do_sample=False)
                gen_b = patched.generate(ids[:, :16], max_new_tokens=12, do_sample=False)
                same["greedy tokens identical"] = bool(torch.equal(gen_a, gen_b))
                # The cos/sin rows alone, at positions up to 100,000.
                positions = torch.randint(0, 100_000, (1, 512), device=DEVICE)
                x = torch.ones(1, device=DEVICE, dtype=dtype)
                c_hf, s_hf = stock.model.rotary_emb(x, positions)
                c_rt, s_rt = patched.model.rotary_emb(x, positions)
                same["cos/sin differing elements"] = int((c_hf != c_rt).sum() + (s_hf != s_rt).sum())
                same["cos/sin elements"] = 2 * c_hf.numel()
                # precision "exact" on CUDA: the table's rows (computed on the host) against stock.
                rt.unpatch_model(patched)
                exact = copy.deepcopy(stock)
                rt.patch_model(exact, precision="exact")
                a, b = stock(ids, position_ids=far).logits, exact(ids, position_ids=far).logits
                same["exact: max abs difference from stock at 3000.."] = float((a.float() - b.float()).abs().max())
                rt.unpatch_model(exact)
            record("dropin", name, {"replaced": replaced, **same})
        except Exception:  # noqa: BLE001 (recorded; the other parts still run)
            record("dropin", name, {"error": traceback.format_exc(limit=6)})
    try:  # backend "auto" on CUDA (the pure-torch path) against "triton", exact precision
        spec = rotary.Spec.preset("llama-3.1-8b")
        gen = torch.Generator().manual_seed(2)
        q = torch.randn(2, 64, 8, 128, generator=gen).to(DEVICE)
        k = torch.randn(2, 64, 2, 128, generator=gen).to(DEVICE)
        positions = torch.randint(0, 100_000, (2, 64), generator=gen).to(DEVICE)
        a = rt.apply_rotary(q, k, positions, spec, layout="bshd")
        b = rt.apply_rotary(q, k, positions, spec, layout="bshd", backend="triton")
        c = rt.apply_rotary(q.cpu(), k.cpu(), positions.cpu(), spec, layout="bshd")  # the CPU kernel
        record("dropin", "apply float32", {
            "auto vs triton max abs": float(max((x - y).abs().max() for x, y in zip(a, b))),
            "triton vs cpu kernel max abs": float(max((x.cpu() - y).abs().max() for x, y in zip(b, c))),
            "triton equals cpu kernel": bool(all(torch.equal(x.cpu(), y) for x, y in zip(b, c)))})
    except Exception:  # noqa: BLE001
        record("dropin", "apply float32", {"error": traceback.format_exc(limit=6)})


# ---- 2. timings ----------------------------------------------------------------------------------
def shapes():
    if ARGS.smoke:
        return [("smoke", 1, 8, 4, 2, 32)]
    # (name, batch, seq, q heads, kv heads, head_dim): Llama-3-8B's heads.
    return [("prefill 4096", 1, 4096, 32, 8, 128), ("prefill 8x4096", 8, 4096, 32, 8, 128),
            ("decode batch 32", 32, 1, 32, 8, 128)]


def kernel_only(q, k, spec):
    """The jitted kernel's launch for this call, without apply_rotary's checks (a closure): the
    call's own launch arguments, captured, then prepared once (_triton_rope.prepared_launch)."""
    captured = []
    launch = _triton_rope.launch
    _triton_rope.launch = lambda *args: captured.append(args) or launch(*args)
    try:
        rt.apply_rotary(q, k, None, spec, layout="bshd", backend="triton")
    finally:
        _triton_rope.launch = launch
    return _triton_rope.prepared_launch(*captured[0])


# Plain RoPE (no scaling scheme), so that the baselines' cos/sin below are the same function.
PLAIN = rotary.Spec.preset("llama-2-7b")


def bench_shape(name, batch, seq, heads_q, heads_k, dim, dtype):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    spec = PLAIN.replace(head_dim=dim, rotary_dim=dim)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(batch, seq, heads_q, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    k = torch.randn(batch, seq, heads_k, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    moved = 2 * (q.numel() + k.numel()) * q.element_size()  # read and written once
    rows = {}

    def time_row(label, fn):
        try:
            ms = median_ms(fn)
            rows[label] = {"ms": ms, "GB/s": moved / ms / 1e6}
        except Exception:  # noqa: BLE001 (recorded; the other rows still run)
            rows[label] = {"error": traceback.format_exc(limit=4)}

    time_row("copy (same bytes)", lambda: (q_out.copy_(q), k_out.copy_(k)))
    time_row("rotary triton", lambda: rt.apply_rotary(q, k, None, spec, layout="bshd", backend="triton"))
    time_row("rotary triton out=", lambda: rt.apply_rotary(q, k, None, spec, layout="bshd", backend="triton",
                                                          out=(q_out, k_out)))
    given = torch.arange(seq, device=DEVICE).expand(batch, -1) + 7
    time_row("rotary triton, positions given", lambda: rt.apply_rotary(q, k, given, spec, layout="bshd",
                                                                      backend="triton"))
    time_row("rotary triton inplace", lambda: rt.apply_rotary(q, k, None, spec, layout="bshd", backend="triton",
                                                             inplace=True))
    try:
        time_row("rotary triton kernel only", kernel_only(q, k, spec))
    except Exception:  # noqa: BLE001
        rows["rotary triton kernel only"] = {"error": traceback.format_exc(limit=4)}
    time_row("rotary torch backend", lambda: rt.apply_rotary(q, k, None, spec, layout="bshd", backend="torch"))
    # transformers' layout: [batch, heads, seq, head_dim] views of the projections' [batch, seq, heads, dim].
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    position_ids = torch.arange(seq, device=DEVICE).expand(batch, -1)
    inv_freq = 1.0 / (spec.theta_base ** (torch.arange(0, dim, 2, dtype=torch.float32, device=DEVICE) / dim))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    time_row("transformers eager", lambda: apply_rotary_pos_emb(qt, kt, cos, sin))
    try:
        compiled = torch.compile(apply_rotary_pos_emb, dynamic=False)
        start = time.perf_counter()
        compiled(qt, kt, cos, sin)
        rows["torch.compile cold seconds"] = time.perf_counter() - start
        time_row("transformers torch.compile", lambda: compiled(qt, kt, cos, sin))
    except Exception:  # noqa: BLE001
        rows["transformers torch.compile"] = {"error": traceback.format_exc(limit=4)}
    try:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
        # In place on [batch, seq, heads, dim] storage (Liger rotates the physical layout).
        lq, lk = q.clone().transpose(1, 2), k.clone().transpose(1, 2)
        time_row("liger-kernel (in place)", lambda: liger_rotary_pos_emb(lq, lk, cos, sin))
    except Exception:  # noqa: BLE001
        rows["liger-kernel (in place)"] = {"error": traceback.format_exc(limit=4)}
    # Agreement with transformers (rotary triton, hf rows vs transformers' cos/sin: both float32 math).
    a = rt.apply_rotary(q, k, None, spec, layout="bshd", backend="triton")
    b = apply_rotary_pos_emb(qt, kt, cos, sin)
    rows["max abs vs transformers eager"] = float(max((x.float() - y.transpose(1, 2).float()).abs().max()
                                                      for x, y in zip(a, b)))
    return rows


def sweep(dtype, grid):
    """Launch shapes on the largest prefill: heads per program x warps (kernel only)."""
    name, batch, seq, heads_q, heads_k, dim = shapes()[1 if not ARGS.smoke else 0]
    spec = PLAIN.replace(head_dim=dim, rotary_dim=dim)
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(batch, seq, heads_q, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    k = torch.randn(batch, seq, heads_k, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    moved = 2 * (q.numel() + k.numel()) * q.element_size()
    saved = dict(_triton_rope.LAUNCH)
    out = {}
    try:
        for block_h, warps in grid:
            _triton_rope.LAUNCH.update(block_h=block_h, num_warps=warps)
            try:
                ms = median_ms(kernel_only(q, k, spec))
                out[f"block_h {block_h} warps {warps}"] = {"ms": ms, "GB/s": moved / ms / 1e6}
            except Exception as error:  # noqa: BLE001
                out[f"block_h {block_h} warps {warps}"] = {"error": repr(error)[:300]}
    finally:
        _triton_rope.LAUNCH.clear()
        _triton_rope.LAUNCH.update(saved)
    return out


def record_shapes(part, prefix, shapes_of_part, measure):
    """Records measure(*shape, dtype) for each shape and dtype under "<prefix><name> <dtype>", an
    error's traceback in its place."""
    for dtype in (torch.bfloat16, torch.float32):
        for shape in shapes_of_part:
            key = f"{prefix}{shape[0]} {str(dtype).removeprefix('torch.')}"
            try:
                record(part, key, measure(*shape, dtype))
            except Exception:  # noqa: BLE001
                record(part, key, {"error": traceback.format_exc(limit=6)})


def bench():
    record_shapes("bench", "", shapes(), bench_shape)
    for dtype in (torch.bfloat16, torch.float32):
        grid = [(b, w) for b in (4, 8, 16) for w in (1, 2, 4)]
        record("bench", f"launch sweep {str(dtype).removeprefix('torch.')}", sweep(dtype, grid))


# ---- 3. attention (the Triton kernel against torch's SDPA) -------------------------------------------
def attention_shapes():
    if ARGS.smoke:
        return [("smoke prefill", 1, 4, 2, 32, 32, 32), ("smoke decode", 1, 4, 2, 1, 48, 32)]
    # (name, batch, q heads, kv heads, q_len, kv_len, head_dim): Llama-3-8B's heads.
    return [("prefill 4096", 1, 32, 8, 4096, 4096, 128), ("decode from 4096", 1, 32, 8, 1, 4096, 128),
            ("decode from 32768", 1, 32, 8, 1, 32768, 128)]


# The attention kernel's variants: the dot precision (rotary._triton_attention.DOT) and the launch
# (block_m, block_n, num_warps, num_stages); splits None is the kernel's own choice.
PREFILL_LAUNCHES = [(128, 64, 8, 3), (128, 64, 4, 3), (64, 64, 4, 3), (128, 32, 4, 3), (64, 32, 4, 2)]
DECODE_LAUNCHES = [(16, 64, 4, 3, None), (16, 128, 4, 3, None), (16, 64, 4, 3, 16), (16, 64, 4, 3, 64),
                   (16, 32, 2, 3, None)]


def attention_variant(dot, launch, splits=None):
    """Sets the kernel's dot precision (every dtype) and launch; returns the previous settings."""
    from rotary import _triton_attention as ta
    saved = (dict(ta.DOT), dict(ta.LAUNCH), dict(ta.INTERPRETER_LAUNCH))
    for dtype in ta.DOT:
        ta.DOT[dtype] = dot
    if DEVICE == "cuda":
        ta.LAUNCH.update(block_m=launch[0], block_n=launch[1], num_warps=launch[2], num_stages=launch[3],
                         splits=splits)
    else:
        ta.INTERPRETER_LAUNCH.update(splits=splits)
    return saved


def restore_attention(saved):
    from rotary import _triton_attention as ta
    for target, values in zip((ta.DOT, ta.LAUNCH, ta.INTERPRETER_LAUNCH), saved):
        target.clear()
        target.update(values)


def bench_attention(name, batch, heads, kv_heads, q_len, kv_len, dim, dtype):
    from rotary import _triton_attention
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(batch, heads, q_len, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    k = torch.randn(batch, kv_heads, kv_len, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    v = torch.randn(batch, kv_heads, kv_len, dim, generator=gen).to(device=DEVICE, dtype=dtype)
    offset = kv_len - q_len
    spec = PLAIN.replace(head_dim=dim, rotary_dim=dim)
    kv_bytes = 2 * k.numel() * k.element_size()
    pairs = q_len * kv_len - (q_len * (q_len - 1) // 2 if q_len == kv_len else 0)  # causal (query, key) pairs
    flops = 4 * batch * heads * pairs * dim
    rows = {}

    def time_row(label, fn):
        try:
            ms = median_ms(fn)
            rows[label] = {"ms": ms, "TFLOP/s": flops / ms / 1e9, "KV GB/s": kv_bytes / ms / 1e6}
        except Exception:  # noqa: BLE001
            rows[label] = {"error": traceback.format_exc(limit=4)}
        print(f"{name} {dtype} {label}: {rows[label]}", flush=True)

    def run(rope=False):
        return _triton_attention.attention(q, k, v, causal=True, query_offset=offset,
                                           rope=rotary.FusedRope(spec) if rope else None)

    time_row("copy of the KV bytes", lambda: (k.clone(), v.clone()))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal = q_len == kv_len  # SDPA's is_causal is top-left: exact at prefill; one query sees every key
    if dtype != torch.float32:  # the flash backend has no float32
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            time_row("torch SDPA (flash)", lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=True))
    time_row("torch SDPA (auto)", lambda: sdpa(q, k, v, is_causal=causal, enable_gqa=True))
    want = sdpa(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
    decode = q_len < 16
    modes = ("storage", "tf32x3") if dtype != torch.float32 else ("tf32x3",)
    launches = [launch + (None,) for launch in PREFILL_LAUNCHES] if not decode else DECODE_LAUNCHES
    if ARGS.smoke:
        launches = launches[:1] + [launch for launch in launches if launch[4] is not None][:1]
    best = {}
    for mode in modes:
        for launch in launches:
            saved = attention_variant(mode, launch[:4], launch[4])
            try:
                label = f"rotary {mode} {launch}"
                time_row(label, run)
                if "ms" in rows[label]:
                    rows[label]["max abs vs SDPA float32"] = float((run().float() - want).abs().max())
                    if mode not in best or rows[label]["ms"] < rows[best[mode]]["ms"]:
                        best[mode] = label
            finally:
                restore_attention(saved)
    for mode, label in best.items():  # fused RoPE at each precision's best launch
        launch = eval(label.split(" ", 2)[2])  # noqa: S307 (our own tuple's text)
        saved = attention_variant(mode, launch[:4], launch[4])
        try:
            time_row(f"rotary {mode} {launch} fused RoPE", lambda: run(rope=True))
        finally:
            restore_attention(saved)
    if dtype != torch.float32 and not decode:  # the exact products once, at the default launch
        saved = attention_variant("ieee", PREFILL_LAUNCHES[2], None)
        try:
            time_row(f"rotary ieee {PREFILL_LAUNCHES[2]}", run)
        finally:
            restore_attention(saved)
    time_row("rotary default", run)
    return rows


def attention_part():
    record_shapes("attention", "attention ", attention_shapes(), bench_attention)


def summary():
    lines = []
    env = RESULTS.get("environment", {})
    lines.append(f"gpu {env.get('gpu', DEVICE)}; torch {env.get('torch')}; triton {env.get('triton')}; "
                 f"transformers {env.get('transformers')}; liger {env.get('liger_kernel')}")
    for part, entries in RESULTS["parts"].items():
        for key, value in entries.items():
            if part == "attention" and isinstance(value, dict):
                for label, row in value.items():
                    if isinstance(row, dict) and "ms" in row:
                        lines.append(f"{key:36s} {label:44s} {row['ms'] * 1e3:10.1f} us {row['TFLOP/s']:7.1f} TFLOP/s "
                                     f"{row['KV GB/s']:8.1f} KV GB/s")
                    else:
                        lines.append(f"{key:36s} {label:44s} {str(row)[-200:]}")
                continue
            if part == "bench" and isinstance(value, dict) and "copy (same bytes)" in value:
                copy_ms = value["copy (same bytes)"].get("ms")
                for label, row in value.items():
                    if isinstance(row, dict) and "ms" in row:
                        ratio = f"{copy_ms / row['ms']:.3f}x copy" if copy_ms else ""
                        lines.append(f"{key:28s} {label:32s} {row['ms'] * 1e3:10.1f} us {row['GB/s']:8.1f} GB/s {ratio}")
                    elif isinstance(row, dict):
                        lines.append(f"{key:28s} {label:32s} ERROR {row.get('error', '')[-200:]}")
                    else:
                        lines.append(f"{key:28s} {label:32s} {row}")
            elif part == "bench":
                best = sorted((row["ms"], label) for label, row in value.items() if "ms" in row)
                lines.append(f"{key}: best {best[:3]}")
            else:
                lines.append(f"{part} {key}: {json.dumps(value, default=str)[:600]}")
    text = "\n".join(lines)
    with open(os.path.join(ARGS.out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    print(text)


def main():
    environment()
    parts = ARGS.parts.split(",")
    if "dropin" in parts:
        dropin()
    if "bench" in parts:
        bench()
    if "attention" in parts:
        attention_part()
    summary()


if __name__ == "__main__":
    sys.exit(main())
