#!/usr/bin/env python3
"""Reference vectors from llama.cpp's own CPU rope, for rotary's Precision::Ggml.

Made once and committed (tests/data/engines/ggml_rope_reference.json); the test that reads them is
tests/core/engine_numerics_test.cpp. What this does, step by step:

  1. takes the llama.cpp sources from the PyPI source distribution of llama-cpp-python (pinned
     below; `pip download --no-binary :all: --no-deps`), or --sdist PATH;
  2. builds ggml's static libraries from it (ggml-base, ggml-cpu; no native tuning, no OpenMP) in a
     temporary directory, and the small driver ggml_rope_driver.c beside this script;
  3. for each case, derives the parameters llama.cpp would run with from the model's config.json
     (rotary's preset text), the way llama.cpp's converter and llama_context do, independently of
     rotary's C++ code:
       - Llama 3: the rope_freqs tensor of conversion/llama.py generate_extra_tensors (float32
         frequencies from torch, the bands in Python floats, stored as float32);
       - LongRoPE: rope_factors_short / rope_factors_long (float32) and the attention factor of
         conversion/phi.py (sqrt(1 + ln(s) / ln(L0)));
       - YaRN: freq_scale = 1 / factor, ext_factor 1, n_ctx_orig, beta_fast / beta_slow, and
         llama_context's attention factor (computed in the driver with logf);
       - linear: freq_scale = 1 / factor;
  4. runs ggml_rope_ext (mode 0) on unit pairs, which returns the cos / sin ggml applies, bit for bit;
  5. writes the cases, the positions and the float32 bit patterns as JSON.

Usage: python scripts/engines/ggml_rope_reference.py [--sdist llama_cpp_python-0.3.36.tar.gz]
           [--out tests/data/engines/ggml_rope_reference.json]
Needs cmake, ninja, a C/C++ compiler, torch and the rotary package (for the presets' config text).
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys
import tarfile
import tempfile

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # vendors llama.cpp with ggml 0.25.3 (commit 0c1e570)
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent

POSITIONS = [0, 1, 2, 3, 7, 100, 1000, 4095, 4096, 8191, 32767, 65535, 100000, 131071, 1 << 20, 16777217,
             100000000, 2147483647]


def hex_float(v: float) -> str:
    return float(v).hex()


def config_of(preset: str) -> dict:
    import rotary._rotary as native
    return json.loads(native.preset_config_json(preset))


def rope_params(config: dict) -> dict:
    params = config.get("rope_scaling") or config.get("rope_parameters") or {}
    return params


def llama3_factors(config: dict) -> list[float]:
    """conversion/llama.py LlamaModel.generate_extra_tensors, as written there."""
    import torch
    rope = rope_params(config)
    base = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope.get("factor", 8.0)
    low_freq_factor = rope.get("low_freq_factor", 1.0)
    high_freq_factor = rope.get("high_freq_factor", 4.0)
    old_context_len = rope.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return [float(v) for v in torch.tensor(factors, dtype=torch.float32).tolist()]


def f32(v: float) -> float:
    import numpy as np
    return float(np.float32(v))


def cases() -> list[dict]:
    out = []
    # default RoPE
    c = config_of("llama-2-7b")
    out.append({"name": "llama-2-7b default", "preset": "llama-2-7b", "seq_len": 0, "n_dims": 128,
                "n_ctx_orig": 4096, "base": 10000.0, "freq_scale": 1.0, "ext_factor": 0.0, "attn_factor": 1.0,
                "beta_fast": 32.0, "beta_slow": 1.0, "factors": []})
    # Llama 3.1: rope_freqs
    c = config_of("llama-3.1-8b")
    out.append({"name": "llama-3.1-8b rope_freqs", "preset": "llama-3.1-8b", "seq_len": 0, "n_dims": 128,
                "n_ctx_orig": 8192, "base": f32(rope_params(c).get("rope_theta", c.get("rope_theta"))),
                "freq_scale": 1.0, "ext_factor": 0.0, "attn_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0,
                "factors": [f32(v) for v in llama3_factors(c)]})
    # YaRN x4 (Qwen2.5): llama_context's attention factor (driver, -1)
    c = config_of("qwen2.5-7b-yarn")
    rope = rope_params(c)
    out.append({"name": "qwen2.5-7b-yarn", "preset": "qwen2.5-7b-yarn", "seq_len": 0, "n_dims": 128,
                "n_ctx_orig": int(rope["original_max_position_embeddings"]), "base": f32(c["rope_theta"]),
                "freq_scale": f32(1.0 / f32(rope["factor"])), "ext_factor": 1.0, "attn_factor": -1.0,
                "beta_fast": 32.0, "beta_slow": 1.0, "factors": []})
    # LongRoPE (Phi-3): short and long factor tensors, conversion/phi.py's attention factor
    c = config_of("phi-3-mini-128k")
    rope = rope_params(c)
    orig = c["original_max_position_embeddings"]
    scale = c["max_position_embeddings"] / orig
    attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0
    for which, seq_len in (("short", 0), ("long", 131072)):
        out.append({"name": f"phi-3-mini-128k {which}", "preset": "phi-3-mini-128k", "seq_len": seq_len,
                    "n_dims": 96, "n_ctx_orig": orig, "base": f32(c.get("rope_theta", 10000.0)), "freq_scale": 1.0,
                    "ext_factor": 0.0, "attn_factor": f32(attn), "beta_fast": 32.0, "beta_slow": 1.0,
                    "factors": [f32(v) for v in rope[f"{which}_factor"]]})
    # linear x8 (Gemma 3's global layers): freq_scale 1/8
    c = config_of("gemma-3-27b")
    out.append({"name": "gemma-3-27b linear", "preset": "gemma-3-27b", "seq_len": 0, "n_dims": 128,
                "n_ctx_orig": 131072, "base": 1e6, "freq_scale": f32(1.0 / 8.0), "ext_factor": 0.0,
                "attn_factor": 1.0, "beta_fast": 32.0, "beta_slow": 1.0, "factors": []})
    return out


def build_ggml(sdist: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    ggml = next(work.glob("llama_cpp_python-*/vendor/llama.cpp/ggml"))
    (ggml / "ggml.pc.in").touch()  # the sdist leaves it out; ggml's CMakeLists configures it
    build = work / "ggml-build"
    subprocess.run(["cmake", "-S", str(ggml), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_BUILD_TESTS=OFF",
                    "-DGGML_BUILD_EXAMPLES=OFF"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(build), "--target", "ggml", "ggml-cpu", "ggml-base"], check=True,
                   stdout=subprocess.DEVNULL)
    driver = work / "ggml_rope_driver"
    libs = [str(build / "src" / f"lib{name}.a") for name in ("ggml", "ggml-cpu", "ggml-base")]
    subprocess.run(["cc", "-O2", "-I", str(ggml / "include"), str(HERE / "ggml_rope_driver.c"), *libs,
                    "-lstdc++", "-lm", "-lpthread", "-o", str(driver)], check=True)
    return driver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=pathlib.Path, help="llama_cpp_python-*.tar.gz (default: pip download)")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "tests/data/engines/ggml_rope_reference.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        sdist = args.sdist
        if sdist is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
                            "--no-build-isolation", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(work)],
                           check=True)
            sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        driver = build_ggml(sdist, work)
        all_cases = cases()
        lines = []
        for case in all_cases:
            lines.append(" ".join([str(case["n_dims"]), str(case["n_ctx_orig"]), hex_float(case["base"]),
                                   hex_float(case["freq_scale"]), hex_float(case["ext_factor"]),
                                   hex_float(case["attn_factor"]), hex_float(case["beta_fast"]),
                                   hex_float(case["beta_slow"]), str(len(case["factors"]))] +
                                  [hex_float(v) for v in case["factors"]] + [str(len(POSITIONS))] +
                                  [str(p) for p in POSITIONS]))
        result = subprocess.run([str(driver)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        values = [tuple(int(h, 16) for h in line.split()) for line in result.stdout.splitlines()]
        at = 0
        for case in all_cases:
            pairs = case["n_dims"] // 2
            rows = []
            for _ in POSITIONS:
                rows.append([list(values[at + i]) for i in range(pairs)])
                at += pairs
            case["cos_sin_bits"] = rows
            case["positions"] = POSITIONS
        assert at == len(values), (at, len(values))
    document = {
        "source": f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist (PyPI): vendor/llama.cpp, ggml 0.25.3 "
                  "(commit 0c1e570), ggml-cpu ops.cpp ggml_rope_cache_init / rope_yarn via ggml_rope_ext mode 0",
        "made_by": "scripts/engines/ggml_rope_reference.py",
        "layout": "cos_sin_bits[position][pair] = [float32 bits of cos, float32 bits of sin], attention factor included",
        "cases": all_cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}: {len(all_cases)} cases x {len(POSITIONS)} positions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
