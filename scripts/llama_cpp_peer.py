"""llama.cpp on SmolLM2-135M's own weights, beside transformers and rotary: logits at position 0 and
far out, and the float32 GGUF both this and scripts/bench_real_model.py run.

    make peers                                       # builds llama-cpp-python from its sdist
    .venv/bin/python scripts/llama_cpp_peer.py [--far 100000] [--tokens 32] [--out FILE.json]

Same weights: the Q4_1 GGUF file is dequantized to float32 by the gguf package, as transformers'
loader does (rotary.models.smollm2), and written as a float32 GGUF (f32_gguf), so llama.cpp's
matmuls see the values transformers' do, without the 8-bit activations llama.cpp's Q4_1 dot
products use. llama.cpp runs with a float32 KV cache and without flash attention, so that its
float32 arithmetic differs from transformers' only in summation order and in its RoPE.

The tokens (the first --tokens of Debian's GPL-3 text) are decoded at positions 0.. and at
FAR.. (llama.cpp through its batch positions on an empty cache; transformers and rotary through
position_ids). Compared, as max |logit difference| over every token and vocabulary entry:
  transformers (stock, float32 angles), rotary exact (patch_model precision="exact"),
  rotary ggml (transformers with cos/sin from rotary's table in llama.cpp's numerics:
  `rotary table --precision ggml`), and a float64 truth (the model in float64, float64 angles).
At position 0 every angle is exact and the differences are float32's summation floor. Far out
each RoPE's angle error shows: llama.cpp's float32 chain theta = p * base^(-2i/d) by repeated
multiplication against transformers' p * inv_freq rounded to float32.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import torch

import rotary.models
import rotary.torch as rt
from rotary import RotaryError

REAL_TEXT = pathlib.Path("/usr/share/common-licenses/GPL-3")
PIP_PIN = "llama-cpp-python==0.3.36"
# In the float32 file's name: a change to what f32_gguf writes bumps it, so no older file is reused.
F32_FORMAT = 1


def llama_cpp():
    """The llama_cpp module, or an error naming how to build it."""
    try:
        import llama_cpp as module
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"llama.cpp's Python binding is not installed: `make peers` builds {PIP_PIN} "
                                  "from its source distribution (minutes)", name="llama_cpp") from error
    return module


def f32_gguf(loaded=None) -> pathlib.Path:
    """A float32 GGUF of SmolLM2-135M (every tensor dequantized from the Q4_1 file, metadata
    copied, file type ALL_F32), written once beside the converted Hugging Face folder in rotary's
    cache, keyed by the source's sha256; written to a temporary file and renamed."""
    import gguf
    loaded = loaded or rotary.models.smollm2()
    out = loaded.folder.parent / f"smollm2-135m-instruct-f32-v{F32_FORMAT}-{loaded.gguf_sha256[:16]}.gguf"
    if out.is_file():
        return out
    reader = gguf.GGUFReader(loaded.gguf_file)
    architecture = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    temporary = out.with_name(out.name + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(temporary, architecture)
    try:
        for field in reader.fields.values():
            if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
                continue
            value_type = field.types[0]
            sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
            value = field.contents()
            if field.name == gguf.Keys.General.FILE_TYPE:
                value = int(gguf.LlamaFileType.ALL_F32)
            writer.add_key_value(field.name, value, value_type, sub_type=sub_type)
        for tensor in reader.tensors:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
            # The reader gives the tensor in numpy order (reversed ggml dims); the writer takes it so.
            writer.add_tensor(tensor.name, values, raw_dtype=gguf.GGMLQuantizationType.F32)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        temporary.replace(out)
    finally:
        temporary.unlink(missing_ok=True)
    return out


def load(path, *, n_ctx, n_batch=512, threads=None, float32_cache=False):
    """A llama_cpp.Llama on `path`: `threads` for both decode and batch (default torch's),
    quiet; float32_cache: float32 K and V instead of llama.cpp's default float16."""
    module = llama_cpp()
    threads = threads or torch.get_num_threads()
    kwargs = dict(type_k=module.GGML_TYPE_F32, type_v=module.GGML_TYPE_F32) if float32_cache else {}
    return module.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_threads=threads,
                        n_threads_batch=threads, flash_attn=False, verbose=False, **kwargs)


def llama_cpp_logits(llm, tokens, start):
    """Logits of every token, the tokens at positions start, start + 1, ... of one sequence on an
    empty cache (llama.cpp's low-level batch: the position of each token is ours to give)."""
    module = llama_cpp()
    ctx = llm.ctx
    module.llama_memory_clear(module.llama_get_memory(ctx), True)
    batch = module.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = start + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = True
        batch.n_tokens = len(tokens)
        status = module.llama_decode(ctx, batch)
        if status != 0:
            raise RotaryError(f"llama_decode returned {status} for {len(tokens)} tokens at positions {start}...")
        vocab = module.llama_vocab_n_tokens(module.llama_model_get_vocab(llm.model))
        pointer = module.llama_get_logits(ctx)
        return np.ctypeslib.as_array(pointer, shape=(len(tokens), vocab)).astype(np.float64)
    finally:
        module.llama_batch_free(batch)


class TableRotaryEmbedding(torch.nn.Module):
    """transformers' rotary_emb with cos/sin read from `rotary table` (one precision, fixed
    positions): the model then runs transformers' RoPE on rotary's rows."""

    def __init__(self, config_path, positions, precision):
        super().__init__()
        first, last = int(positions[0]), int(positions[-1]) + 1
        command = [str(pathlib.Path(sys.executable).parent / "rotary"), "table", "--config", str(config_path),
                   "--positions", f"{first}:{last}", "--precision", precision, "--json"]
        table = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        self.first = first
        self.cos = torch.tensor(table["cos"], dtype=torch.float32)
        self.sin = torch.tensor(table["sin"], dtype=torch.float32)

    def forward(self, x, position_ids):
        rows = position_ids - self.first
        return self.cos[rows].to(x.dtype), self.sin[rows].to(x.dtype)


def write_json(path, results) -> None:
    """results as JSON at path, written to a temporary file beside it and renamed (no partial file)."""
    out = pathlib.Path(path)
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text(json.dumps(results, indent=1) + "\n")
    temporary.replace(out)


@torch.inference_mode()
def hf_logits(model, ids, start):
    positions = start + torch.arange(ids.shape[1])[None]
    return model(input_ids=ids, position_ids=positions, use_cache=False).logits[0].double().numpy()


@contextlib.contextmanager
def rotary_emb(model, module):
    saved = model.model.rotary_emb
    model.model.rotary_emb = module
    try:
        yield model
    finally:
        model.model.rotary_emb = saved


def compare(tokens_count, far, threads):
    loaded = rotary.models.smollm2(attn_implementation="eager")
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = tokenizer(REAL_TEXT.read_text(), return_tensors="pt").input_ids[:, :tokens_count]
    truth_model = rotary.models.float64_truth(model)
    llm = load(f32_gguf(loaded), n_ctx=max(256, tokens_count), n_batch=max(256, tokens_count), threads=threads,
               float32_cache=True)
    rows = {}
    for start in (0, far):
        positions = np.arange(start, start + ids.shape[1])
        logits = {"llama.cpp": llama_cpp_logits(llm, ids[0].tolist(), start),
                  "transformers": hf_logits(model, ids, start),
                  "float64 truth": hf_logits(truth_model, ids, start)}
        with rt.patched(model, precision="exact"):
            logits["rotary exact"] = hf_logits(model, ids, start)
        with rotary_emb(model, TableRotaryEmbedding(loaded.folder / "config.json", positions, "ggml")):
            logits["rotary ggml"] = hf_logits(model, ids, start)
        names = list(logits)
        rows[start] = {f"{a} vs {b}": float(np.abs(logits[a] - logits[b]).max())
                       for i, a in enumerate(names) for b in names[i + 1:]}
        rows[start]["greedy tokens equal (llama.cpp, transformers)"] = bool(
            (logits["llama.cpp"].argmax(-1) == logits["transformers"].argmax(-1)).all())
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--far", type=int, default=100_000, help="the far start position (default 100000)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens of real text (default 32)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.far < 0 or args.tokens < 1:
        parser.error(f"--far must be >= 0 and --tokens >= 1 (got {args.far}, {args.tokens})")
    started = time.perf_counter()
    rows = compare(args.tokens, args.far, args.threads)
    module = llama_cpp()
    results = dict(far=args.far, tokens=args.tokens, llama_cpp_python=module.__version__,
                   max_abs_logit_difference={str(k): v for k, v in rows.items()},
                   seconds=time.perf_counter() - started)
    if args.out:
        write_json(args.out, results)
    for start, pairs in rows.items():
        print(f"positions {start}..{start + args.tokens - 1}:")
        for pair, value in pairs.items():
            print(f"  {pair:52s} {value:.3g}" if isinstance(value, float) else f"  {pair:52s} {value}")
    return results


if __name__ == "__main__":
    main()
