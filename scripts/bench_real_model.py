"""Speed per token on a real model: SmolLM2-135M-Instruct (rotary.models.smollm2) in one process.

    .venv/bin/python scripts/bench_real_model.py [--quick] [--out FILE.json] [--llama-cpp]

For float32 and bfloat16, and for each attention path a user of transformers would pick:
  eager    transformers' eager attention (matmul, softmax, matmul) and its RoPE;
  sdpa     torch.nn.functional.scaled_dot_product_attention and transformers' RoPE;
  rotary   rotary's attention backend (attn_implementation="rotary") and transformers' RoPE;
  fused    rotary.torch.fuse_rope: rotary's attention rotates q and k inside its kernel;
it times
  prefill  one forward over the first PREFILL tokens of real text (logits of the last token only,
           as generate's prefill asks), best of REPEATS;
  decode   single-token steps after a cache of CONTEXT tokens, median of STEPS; and how much of a
           step the attention calls and the RoPE calls take (wall time inside them, summed).
The real text is Debian's license texts (rotary.experiments.long_context.real_text_ids). The cache
of the unfused paths is filled once per dtype (by the "rotary" path, the fastest prefill) and
cropped back to CONTEXT before each path's steps; the fused path keeps un-rotated keys, so it
fills its own. With --llama-cpp (the llama_cpp package installed: `make peers`), llama.cpp's
tokens per second on the same weights (the float32 GGUF scripts/llama_cpp_peer.py writes) and on
the Q4_1 file itself are measured beside them, with as many threads as torch uses.
Results: JSON (--out) and a Markdown table on stdout. docs/performance.md, "A real model".
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import pathlib
import platform
import statistics
import sys
import time

import torch
from transformers import AttentionInterface
from transformers.models.llama import modeling_llama

import rotary.models
import rotary.torch as rt
from rotary.experiments.long_context import real_text_ids

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import llama_cpp_peer  # noqa: E402  (beside this script; imports llama_cpp only when it runs llama.cpp)

PATHS = ("eager", "sdpa", "rotary", "fused")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FULL = dict(prefill=2048, contexts=(2048, 8192), steps=16, repeats=2)
QUICK = dict(prefill=128, contexts=(128, 256), steps=3, repeats=1)


class PartTimer:
    """Wall time spent inside the attention calls and the RoPE calls of a forward, summed.
    Installed around transformers' lookups (modeling_llama's module globals, the attention
    interface's entries and the model's rotary_emb), so the model code runs unchanged."""

    def __init__(self):
        self.seconds = {"attention": 0.0, "rope": 0.0}

    def wrap(self, function, part):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
        return timed

    def reset(self):
        self.seconds = dict.fromkeys(self.seconds, 0.0)

    @contextlib.contextmanager
    def installed(self, model):
        interface = AttentionInterface()
        names = [name for name in ("sdpa", "rotary", "rotary_fused") if name in interface]
        saved = {name: AttentionInterface._global_mapping[name] for name in names}
        saved_eager, saved_apply = modeling_llama.eager_attention_forward, modeling_llama.apply_rotary_pos_emb
        embedding = model.model.rotary_emb
        try:
            for name in names:
                AttentionInterface._global_mapping[name] = self.wrap(saved[name], "attention")
            modeling_llama.eager_attention_forward = self.wrap(saved_eager, "attention")
            modeling_llama.apply_rotary_pos_emb = self.wrap(saved_apply, "rope")
            embedding.forward = self.wrap(type(embedding).forward.__get__(embedding), "rope")
            yield self
        finally:
            AttentionInterface._global_mapping.update(saved)
            modeling_llama.eager_attention_forward, modeling_llama.apply_rotary_pos_emb = saved_eager, saved_apply
            del embedding.forward


def use_path(model, path):
    """Switch an unfused model to `path`'s attention (the fused model is built by fused_copy)."""
    model.set_attn_implementation(path)
    assert model.config._attn_implementation == path, (path, model.config._attn_implementation)


def fused_copy(model):
    fused = copy.deepcopy(model)
    fused.set_attn_implementation("sdpa")
    rt.fuse_rope(fused, precision="hf")
    return fused


@torch.inference_mode()
def prefill_seconds(model, ids, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(input_ids=ids, use_cache=True, logits_to_keep=1)
        times.append(time.perf_counter() - start)
    return min(times)


@torch.inference_mode()
def fill_cache(model, ids):
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    return out.past_key_values, out.logits[:, -1:].argmax(-1)


@torch.inference_mode()
def decode_steps(model, cache, context, first_token, steps, timer):
    """Median seconds of `steps` greedy steps after `context` cached tokens (one warm-up step
    first), and the mean attention and RoPE seconds per step."""
    excess = cache.get_seq_length() - context
    if excess > 0:
        cache.crop(-excess)
    token = first_token
    out = model(input_ids=token, past_key_values=cache, use_cache=True)
    token = out.logits[:, -1:].argmax(-1)
    times = []
    with timer.installed(model):
        timer.reset()
        for _ in range(steps):
            start = time.perf_counter()
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - start)
    parts = {part: seconds / steps for part, seconds in timer.seconds.items()}
    return statistics.median(times), parts


def measure_dtype(dtype_name, settings, ids, log):
    loaded = rotary.models.smollm2(dtype=DTYPES[dtype_name], attn_implementation="sdpa")
    model = loaded.model
    rt.register_attention()
    fused = fused_copy(model)
    try:
        return measure_paths(model, fused, dtype_name, settings, ids, log)
    finally:
        # fuse_rope wraps the modeling module's apply_rotary_pos_emb for the process: put it back.
        rt.unfuse_rope(fused)


def measure_paths(model, fused, dtype_name, settings, ids, log):
    timer = PartTimer()
    rows = []
    for path in PATHS:
        target = fused if path == "fused" else model
        if path != "fused":
            use_path(model, path)
        seconds = prefill_seconds(target, ids[:, :settings["prefill"]], settings["repeats"])
        rows.append(dict(dtype=dtype_name, path=path, case=f"prefill {settings['prefill']}", seconds=seconds,
                         tokens_per_s=settings["prefill"] / seconds))
        log(f"{dtype_name} {path} prefill {settings['prefill']}: {seconds:.3f} s")
    for context in settings["contexts"]:
        use_path(model, "rotary")
        shared_cache, first = fill_cache(model, ids[:, :context])
        fused_cache, fused_first = fill_cache(fused, ids[:, :context])
        assert torch.equal(first, fused_first), "the fused and unfused prefills disagree on the next token"
        for path in PATHS:
            if path == "fused":
                seconds, parts = decode_steps(fused, fused_cache, context, fused_first, settings["steps"], timer)
            else:
                use_path(model, path)
                seconds, parts = decode_steps(model, shared_cache, context, first, settings["steps"], timer)
            rows.append(dict(dtype=dtype_name, path=path, case=f"decode at {context}", seconds=seconds,
                             tokens_per_s=1.0 / seconds, attention_share=parts["attention"] / seconds,
                             rope_share=parts["rope"] / seconds))
            log(f"{dtype_name} {path} decode at {context}: {1e3 * seconds:.2f} ms/token, attention "
                f"{parts['attention'] / seconds:.0%}, RoPE {parts['rope'] / seconds:.0%}")
    return rows


def llama_cpp_rows(settings, ids, threads, log):
    rows = []
    for weights, path in (("float32 GGUF", llama_cpp_peer.f32_gguf()), ("Q4_1 GGUF", rotary.models.smollm2_gguf_file())):
        tokens = ids[0].tolist()
        llm = llama_cpp_peer.load(path, n_ctx=max(settings["contexts"]) + settings["steps"] + 8,
                                  n_batch=max(settings["prefill"], 512), threads=threads)
        best = float("inf")
        for _ in range(settings["repeats"]):
            llm.reset()
            start = time.perf_counter()
            llm.eval(tokens[:settings["prefill"]])
            best = min(best, time.perf_counter() - start)
        rows.append(dict(dtype=weights, path="llama.cpp", case=f"prefill {settings['prefill']}", seconds=best,
                         tokens_per_s=settings["prefill"] / best))
        log(f"llama.cpp {weights} prefill {settings['prefill']}: {best:.3f} s")
        for context in settings["contexts"]:
            llm.reset()
            llm.eval(tokens[:context])
            times = []
            for step in range(settings["steps"] + 1):
                start = time.perf_counter()
                llm.eval([tokens[context + step]])
                times.append(time.perf_counter() - start)
            seconds = statistics.median(times[1:])
            rows.append(dict(dtype=weights, path="llama.cpp", case=f"decode at {context}", seconds=seconds,
                             tokens_per_s=1.0 / seconds))
            log(f"llama.cpp {weights} decode at {context}: {1e3 * seconds:.2f} ms/token")
        del llm
    return rows


def markdown(rows):
    lines = ["| case | weights | path | ms | tokens/s | attention | RoPE |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        share = lambda key: f"{row[key]:.0%}" if key in row else ""
        lines.append(f"| {row['case']} | {row['dtype']} | {row['path']} | {1e3 * row['seconds']:.1f} | "
                     f"{row['tokens_per_s']:.1f} | {share('attention_share')} | {share('rope_share')} |")
    return "\n".join(lines)


def environment(threads):
    model_name = platform.processor()
    flags = []
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model_name in ("", "x86_64"):
                model_name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = sorted(flag for flag in line.split(":", 1)[1].split()
                               if flag.startswith(("avx", "amx", "fma")))
                break
    return dict(cpu=model_name, flags=flags, torch_threads=threads, torch=torch.__version__,
                python=platform.python_version(), load_average=os.getloadavg())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script runs")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--llama-cpp", action="store_true", help="also time llama.cpp (needs `make peers`)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, from float32,bfloat16")
    args = parser.parse_args(argv)
    dtypes = args.dtypes.split(",")
    unknown = [name for name in dtypes if name not in DTYPES]
    if unknown:
        parser.error(f"--dtypes: unknown {unknown}; choose from {list(DTYPES)}")
    settings = QUICK if args.quick else FULL
    log = lambda text: print(text, file=sys.stderr, flush=True)
    tokenizer = rotary.models.smollm2().tokenizer
    ids = real_text_ids(tokenizer, max(settings["contexts"]) + settings["steps"] + 2)
    started = time.perf_counter()
    rows = []
    for name in dtypes:
        rows += measure_dtype(name, settings, ids, log)
    if args.llama_cpp:
        rows += llama_cpp_rows(settings, ids, torch.get_num_threads(), log)
    results = dict(settings={k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
                   environment=environment(torch.get_num_threads()), rows=rows,
                   seconds=time.perf_counter() - started)
    if args.out:
        llama_cpp_peer.write_json(args.out, results)
    print(markdown(rows))
    return results


if __name__ == "__main__":
    main()
