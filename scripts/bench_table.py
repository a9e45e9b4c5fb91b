#!/usr/bin/env python3
"""Markdown tables from `rotary bench --json` output, for docs/performance.md.

usage: scripts/bench_table.py RESULTS.json

Prints the streams, then one row per case and dtype with out-of-place and in-place figures for
1 and 2 threads (ms / GB/s / ratio to the stream timed alongside), then the PyTorch rows of the
prefill and decode shapes next to ours, then attention's decode rows (attn_decode, attn_decode_32k)
against the read stream, the copy floor and PyTorch's SDPA. Only the JSON's own numbers; nothing
is recomputed but the speed-ups over PyTorch (their median time / ours).
"""
import json
import sys


def main(path):
    rows = json.load(open(path))
    by = {}
    for r in rows:
        by[(r["case"], r["workload"], r["dtype"], r["threads"], r["in_place"])] = r
    dtypes = [d for d in ("float32", "bfloat16", "float16") if any(k[2] == d for k in by)]
    threads = sorted({k[3] for k in by})
    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

    print("| stream (GB/s) | " + " | ".join(f"{short[d]}, {t} thr" for d in dtypes for t in threads) + " |")
    print("|---|" + "---|" * (len(dtypes) * len(threads)))
    for name in ("copy", "copy_inplace", "memcpy"):
        cells = []
        for d in dtypes:
            for t in threads:
                r = by.get((name, "prefill", d, t, name == "copy_inplace"))
                cells.append(f"{r['gb_per_s']:.1f}" if r else "")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()

    def cell(r):
        if r is None:
            return ""
        ratio = r.get("ratio_to_copy")
        ratio_text = f"{ratio:.2f}" if ratio is not None else "-"
        ms = r["median_ms"]
        time_text = f"{ms * 1000:.1f} us" if ms < 1 else f"{ms:.2f} ms"
        return f"{time_text} / {r['gb_per_s']:.1f} / {ratio_text}"

    print("| case | dtype | threads | out of place: time / GB/s / ratio | in place: time / GB/s / ratio | base (out / in) | core GHz (out / in) |")
    print("|---|---|---|---|---|---|---|")
    for case in ("prefill", "prefill_long", "decode", "varlen"):
        for d in dtypes:
            for t in threads:
                out = by.get((case, case, d, t, False))
                inp = by.get((case, case, d, t, True))
                if out is None and inp is None:
                    continue
                base = " / ".join(f"{r['baseline']} {r['baseline_gb_per_s']:.1f}" for r in (out, inp) if r)
                clock = " / ".join(f"{r['core_ghz']:.2f}" if r.get("core_ghz") is not None else "-"
                                   for r in (out, inp) if r)
                print(f"| {case} | {short[d]} | {t} | {cell(out)} | {cell(inp)} | {base} | {clock} |")
    print()

    print("| shape | dtype | threads | ours out / in (ms) | torch_hf | hf_noalloc | torch_meta | torch_copy | vs torch_hf (out / in) | vs hf_noalloc (out / in) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in ("prefill", "decode"):
        for d in dtypes:
            for t in threads:
                out = by.get((case, case, d, t, False))
                inp = by.get((case, case, d, t, True))
                hf = by.get(("torch_hf", case, d, t, False))
                if out is None or inp is None or hf is None:
                    continue
                noalloc = by.get(("torch_hf_noalloc", case, d, t, False))
                meta = by.get(("torch_meta", case, d, t, False))
                copy = by.get(("torch_copy", case, d, t, False))

                def ms(r):
                    return f"{r['median_ms']:.4g}" if r else ""

                def speedup(r):
                    return f"{r['median_ms'] / out['median_ms']:.1f}x / {r['median_ms'] / inp['median_ms']:.1f}x" if r else ""

                print(f"| {case} | {short[d]} | {t} | {ms(out)} / {ms(inp)} | {ms(hf)} | {ms(noalloc)} | {ms(meta)} | "
                      f"{ms(copy)} | {speedup(hf)} | {speedup(noalloc)} |")

    decode_rows = [(case, d, t) for case in ("attn_decode", "attn_decode_32k") for d in dtypes for t in threads
                   if (case, case, d, t, False) in by]
    if decode_rows:
        print()
        print("| decode | dtype | threads | rotary | GB/s | x read stream (GB/s) | x copy floor (GB/s) | torch SDPA | rotary vs torch |")
        print("|---|---|---|---|---|---|---|---|---|")
        for case, d, t in decode_rows:
            r = by[(case, case, d, t, False)]
            torch = by.get(("torch_sdpa", case, d, t, False))
            read = (f"{r['ratio_to_read']:.2f} ({r['read_gb_per_s']:.1f})"
                    if r.get("ratio_to_read") is not None else "-")
            copy_ratio = (f"{r['ratio_to_copy']:.2f} ({r['baseline_gb_per_s']:.1f})"
                          if r.get("ratio_to_copy") is not None else "-")
            torch_text = f"{torch['median_ms']:.3g} ms" if torch else ""
            speed = f"{torch['median_ms'] / r['median_ms']:.1f}x" if torch else ""
            mark = " !" if r.get("unreliable") else ""
            print(f"| {case} | {short[d]} | {t} | {r['median_ms']:.3g} ms{mark} | {r['gb_per_s']:.1f} | {read} | "
                  f"{copy_ratio} | {torch_text} | {speed} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
