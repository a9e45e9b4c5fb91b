#!/usr/bin/env python3
"""Regenerates the golden RoPE vectors (tests/golden/*.json, format "rotary-golden/1") from the
installed Hugging Face transformers.

    python scripts/golden/regenerate.py --out DIR [--cases NAME ...]
    python scripts/golden/regenerate.py --check tests/golden [--cases NAME ...]

The case definitions live in scripts/golden/cases.py; nothing is read from the old outputs.

- hf_f32: transformers' own code, unmodified: the config class (LlamaConfig, GPTNeoXConfig,
  PhiConfig, Phi3Config, DeepseekV3Config) built from the case's config dict, the model's
  rotary-embedding class and its forward on position_ids [1, n] (float32, CPU, one torch thread),
  the modeling module's apply_rotary_pos_emb (and DeepSeek-V3's apply_rotary_pos_emb_interleave
  and yarn_apply_mscale). ROPE_INIT_FUNCTIONS are reached through the rotary class, as in a model.
- exact_f64: the same formulas (transformers' modeling_rope_utils.py) in mpmath at 60 digits,
  rounded once to float64.
- errors: as tests/golden/README.md "Errors and tolerances" defines them.
- negative cases: transformers' config validation and rope-init function on invalid configs.

--check DIR regenerates in memory and compares with the files in DIR: exact_f64 must be
bit-identical, hf_f32 within the README's tolerances (inv_freq and q/k embeds of a rotation
HF-bit-exact given the same cos/sin; cos/sin within 2 float32 ulps). Exit status 1 otherwise.
Files are written to a temporary file in the output directory and renamed (never a partial file).
No network, no weights. Dependencies: numpy, torch, transformers, mpmath.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import logging
import math
import os
import sys
import tempfile

import mpmath
import numpy as np
import torch
import transformers
from transformers import modeling_rope_utils
from transformers.utils import logging as hf_logging

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import BY_NAME, CASES  # noqa: E402

FORMAT = "rotary-golden/1"
DPS = 60
mp = mpmath.mp

LAYOUT_NOTE = (
    "Tensors are {dtype, shape, data} with data flattened row-major. cos/sin: [n_positions, rotary_dim], "
    "HF layout cat(freqs, freqs): column j and j + rotary_dim/2 both hold frequency j; attention_scaling "
    "already multiplied in. q/k/*_embed: [n_positions, heads, head_dim]; dims >= rotary_dim pass through "
    "unchanged. hf_f32.*: HF's float32 path, half-split (rotate_half / NeoX) convention. exact_f64.*: exact "
    "values rounded once to float64; *_half_split pairs (j, j + rotary_dim/2), *_interleaved pairs (2j, 2j+1) "
    "(Meta/GPT-J complex form), both rotated by frequency j."
)
RNG_NOTE = "numpy.random.default_rng(seed).standard_normal -> float32; q drawn first, then k"

# Tolerances of --check for hf_f32 (tests/golden/README.md, "The hf_f32 numerics"): cos/sin may
# differ by float32 ulps of libm/SIMD cos and sin between torch versions; everything else is
# exact float32 arithmetic or float32 pow. q/k embeds are compared in ulps too: they inherit the
# cos/sin difference (one ulp of cos times |q| can move the rounded sum by a few ulps of a small
# result), so their bound is stated separately below.
TOL_ULP = {"inv_freq": 0, "cos": 2, "sin": 2}
TOL_EMBED_ABS = 1e-6  # |Δ| of a q/k embed value; |q| ≤ ~5, so 2 ulps of cos/sin give ≤ ~1.2e-6


# ----------------------------------------------------------------------------------------------
# JSON output
# ----------------------------------------------------------------------------------------------
class F64(float):
    """A float64 scalar: written with %.17g."""


class Tensor:
    def __init__(self, dtype: str, array):
        self.dtype = dtype
        self.array = np.asarray(array, dtype=np.float32 if dtype == "float32" else np.float64)


class Raw:
    """A config-like value copied as given (standard JSON numbers, shortest round-trip)."""

    def __init__(self, value):
        self.value = value


def fmt_f64(x: float) -> str:
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x!r} in a golden file")
    s = "%.17g" % x
    if not any(c in s for c in ".en"):
        s += ".0"
    return s


def fmt_f32(x) -> str:
    x = float(np.float32(x))
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x!r} in a golden file")
    return repr(x)


def _scalar(v) -> str:
    if isinstance(v, F64):
        return fmt_f64(v)
    if isinstance(v, float):
        return fmt_f64(v)
    return json.dumps(v)


def _raw(v, ind: str) -> str:
    """Config dicts: nested dicts expanded, lists inline, numbers as json.dumps writes them."""
    if isinstance(v, dict):
        if not v:
            return "{}"
        inner = ind + "  "
        items = [f"{inner}{json.dumps(k)}: {_raw(x, inner)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + ind + "}"
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("non-finite value in a config")
    return json.dumps(v)


def dump(v, ind: str = "") -> str:
    inner = ind + "  "
    if isinstance(v, Raw):
        return _raw(v.value, ind)
    if isinstance(v, Tensor):
        fmt = fmt_f32 if v.dtype == "float32" else fmt_f64
        a = v.array
        shape = list(a.shape)
        row = shape[-1] if shape else 1
        flat = [fmt(x) for x in a.reshape(-1).tolist()]
        rows = [", ".join(flat[i : i + row]) for i in range(0, len(flat), row)] if flat else []
        data = "[\n" + ",\n".join(inner + "  " + r for r in rows) + "\n" + inner + "]" if rows else "[]"
        return (
            "{\n"
            f'{inner}"dtype": "{v.dtype}",\n'
            f'{inner}"shape": [{", ".join(str(s) for s in shape)}],\n'
            f'{inner}"data": {data}\n' + ind + "}"
        )
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {dump(x, inner)}" for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + ind + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        if any(isinstance(x, (dict, list, Tensor, Raw)) for x in v):
            return "[\n" + ",\n".join(inner + dump(x, inner) for x in v) + "\n" + ind + "]"
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return _scalar(v)


def write_atomic(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ----------------------------------------------------------------------------------------------
# transformers' log messages
# ----------------------------------------------------------------------------------------------
class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append({"level": record.levelname, "message": record.getMessage()})


class capture_hf_logs:
    """Collects what transformers logs (warning_once's cache is cleared first, so a message logged
    by an earlier case is logged again) without printing it."""

    def __enter__(self):
        hf_logging.warning_once.cache_clear()
        if hasattr(hf_logging, "info_once"):
            hf_logging.info_once.cache_clear()
        self.logger = logging.getLogger("transformers")
        self.handler = _Capture()
        self.logger.addHandler(self.handler)
        hf_logging.disable_default_handler()
        return self.handler.records

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        hf_logging.enable_default_handler()
        return False


# ----------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------
def transformers_commit() -> str:
    try:
        from importlib.metadata import distribution

        text = distribution("transformers").read_text("direct_url.json")
        if text:
            info = json.loads(text).get("vcs_info", {})
            if info.get("commit_id"):
                return info["commit_id"]
    except Exception:
        pass
    return "unknown (installed package)"


def source_base() -> dict:
    return {
        "transformers_commit": transformers_commit(),
        "transformers_version": transformers.__version__,
        "torch": f"{torch.__version__} (CPU)",
    }


def modeling_attr(dotted: str):
    """'modeling_llama.LlamaRotaryEmbedding' -> the object in transformers.models.llama.modeling_llama."""
    module_name, name = dotted.split(" ")[0].split(".")
    family = module_name[len("modeling_") :]
    module = importlib.import_module(f"transformers.models.{family}.{module_name}")
    return getattr(module, name)


def exception_record(e: BaseException) -> dict:
    # str(KeyError) is the repr of its argument; the message is the argument itself
    message = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return {"type": type(e).__name__, "message": message}


# ----------------------------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------------------------
def make_inputs(case: dict, head_dim: int):
    n = len(case["positions"])
    rng = np.random.default_rng(case["seed"])
    q = rng.standard_normal((n, case["n_q_heads"], head_dim)).astype(np.float32)
    k = rng.standard_normal((n, case["n_kv_heads"], head_dim)).astype(np.float32)
    return q, k


# ----------------------------------------------------------------------------------------------
# hf_f32: transformers' real code
# ----------------------------------------------------------------------------------------------
def build_config(case: dict):
    cls = getattr(transformers, case["config_class"])
    return cls(**copy.deepcopy(case["config"]))


def geometry(cfg) -> tuple[int, int]:
    head_dim = getattr(cfg, "qk_rope_head_dim", None) or getattr(cfg, "head_dim", None)
    head_dim = head_dim or cfg.hidden_size // cfg.num_attention_heads
    prf = cfg.rope_parameters.get("partial_rotary_factor", 1.0) or 1.0
    return head_dim, int(head_dim * prf)


def seq_len_in_use(case: dict, rp: dict, mpe: int):
    """The seq_len argument the rope-init function received for the inv_freq in use
    (dynamic_rope_update in modeling_rope_utils.py: dynamic_frequency_update and
    longrope_frequency_update)."""
    calls = [c["positions"] for c in case.get("prior_forward_calls", [])] + [case["positions"]]
    rope_type = rp["rope_type"]
    if rope_type == "dynamic":
        cached, in_use = mpe, None
        for positions in calls:
            s = max(positions) + 1
            before = cached
            if s > before:  # growth
                in_use, cached = s, s
            if s < mpe and before > mpe:  # reset
                in_use, cached = None, mpe
        return in_use
    if rope_type == "longrope":
        orig = rp["original_max_position_embeddings"]
        return orig + 1 if max(case["positions"]) + 1 > orig else None
    return None


def run_hf_positive(case: dict, q: np.ndarray, k: np.ndarray) -> dict:
    with capture_hf_logs() as logs:
        cfg = build_config(case)
        rotary_cls = modeling_attr(case["rotary_class"])
        rot = rotary_cls(config=cfg)
    x = torch.from_numpy(q)
    for call in case.get("prior_forward_calls", []):
        rot(x, torch.tensor([call["positions"]], dtype=torch.int64))
    position_ids = torch.tensor([case["positions"]], dtype=torch.int64)
    cos, sin = rot(x, position_ids)  # [1, n, rotary_dim]
    inv_freq = rot.inv_freq.detach().clone()
    apply = modeling_attr(case["apply_function"])
    qt = torch.from_numpy(q).permute(1, 0, 2)[None]  # [1, heads, n, head_dim]
    kt = torch.from_numpy(k).permute(1, 0, 2)[None]
    q_embed, k_embed = apply(qt, kt, cos, sin)
    out = {
        "cfg": cfg,
        "logs": logs,
        "inv_freq": inv_freq.numpy(),
        "attention_scaling": float(rot.attention_scaling),
        "cos": cos[0].numpy(),
        "sin": sin[0].numpy(),
        "q_embed": q_embed[0].permute(1, 0, 2).contiguous().numpy(),
        "k_embed": k_embed[0].permute(1, 0, 2).contiguous().numpy(),
    }
    if "deepseek_interleave_note" in case:
        inter = modeling_attr("modeling_deepseek_v3.apply_rotary_pos_emb_interleave")
        qi, ki = inter(qt, kt, cos, sin)
        out["deepseek_interleave_q_embed"] = qi[0].permute(1, 0, 2).contiguous().numpy()
        out["deepseek_interleave_k_embed"] = ki[0].permute(1, 0, 2).contiguous().numpy()
        yarn_apply_mscale = modeling_attr("modeling_deepseek_v3.yarn_apply_mscale")
        # DeepseekV3Attention.__init__: self.scaling = yarn_apply_mscale(config.rope_parameters, qk_head_dim ** -0.5)
        qk_head_dim = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        out["deepseek_softmax_scale"] = float(yarn_apply_mscale(cfg.rope_parameters, qk_head_dim ** (-0.5)))
    return out


# ----------------------------------------------------------------------------------------------
# exact_f64: the same formulas in mpmath (60 digits)
# ----------------------------------------------------------------------------------------------
def M(x) -> mpmath.mpf:
    """A config number as the binary64 value of its JSON number (ints exactly)."""
    return mp.mpf(x) if isinstance(x, int) else mp.mpf(float(x))


def exact_inv_freq(rp: dict, cfg, head_dim: int, rotary_dim: int, seq_len):
    """Exact inv_freq and attention scaling, formula by formula as in transformers'
    modeling_rope_utils.py (function named per branch) and the models' compute_default_rope_parameters."""
    d = rotary_dim
    h = d // 2
    base = M(rp["rope_theta"])
    mpe = cfg.max_position_embeddings
    rope_type = rp["rope_type"]
    j2 = [mp.mpf(2 * j) / d for j in range(h)]  # arange(0, d, 2) / d
    scaling = mp.mpf(1)

    def default(b):
        # LlamaRotaryEmbedding.compute_default_rope_parameters: 1 / base ** (arange(0, dim, 2) / dim)
        return [1 / b**e for e in j2]

    if rope_type == "default":
        inv = default(base)
    elif rope_type == "linear":
        # _compute_linear_scaling_rope_parameters: default inv_freq / factor
        inv = [x / M(rp["factor"]) for x in default(base)]
    elif rope_type == "dynamic":
        # _compute_dynamic_ntk_parameters: seq_len = max(seq_len or mpe, mpe);
        # base * ((factor * seq_len / mpe) - (factor - 1)) ** (dim / (dim - 2))
        factor = M(rp["factor"])
        s = mp.mpf(max(seq_len if seq_len is not None else mpe, mpe))
        b = base * ((factor * s / mpe) - (factor - 1)) ** (mp.mpf(d) / (d - 2))
        inv = default(b)
    elif rope_type == "yarn":
        # _compute_yarn_parameters
        factor = rp.get("factor")
        orig = M(rp["original_max_position_embeddings"])
        factor = mp.mpf(mpe) / orig if factor is None else M(factor)

        def get_mscale(scale, m=1):  # get_mscale
            return mp.mpf(1) if scale <= 1 else mp.mpf("0.1") * M(m) * mp.log(scale) + 1

        af = rp.get("attention_factor")
        if af is None:
            ms, msa = rp.get("mscale"), rp.get("mscale_all_dim")
            scaling = get_mscale(factor, ms) / get_mscale(factor, msa) if (ms and msa) else get_mscale(factor)
        else:
            scaling = M(af)
        beta_fast = M(rp.get("beta_fast") or 32)
        beta_slow = M(rp.get("beta_slow") or 1)

        def find_correction_dim(num_rot):  # find_correction_dim
            return (d * mp.log(orig / (num_rot * 2 * mp.pi))) / (2 * mp.log(base))

        low, high = find_correction_dim(beta_fast), find_correction_dim(beta_slow)
        if rp.get("truncate", True):  # find_correction_range: floor/ceil unless truncate is false
            low, high = mp.floor(low), mp.ceil(high)
        low, high = max(low, mp.mpf(0)), min(high, mp.mpf(d - 1))
        if low == high:  # linear_ramp_factor: prevent singularity
            high += M(0.001)
        pos = [base**e for e in j2]
        inv = []
        for j in range(h):
            ramp = min(max((j - low) / (high - low), mp.mpf(0)), mp.mpf(1))
            extrap_factor = 1 - ramp
            interp, extrap = 1 / (factor * pos[j]), 1 / pos[j]
            inv.append(interp * (1 - extrap_factor) + extrap * extrap_factor)
    elif rope_type == "longrope":
        # _compute_longrope_parameters
        orig = rp["original_max_position_embeddings"]
        factor = rp.get("factor")
        factor = mp.mpf(mpe) / orig if factor is None else M(factor)
        af = rp.get("attention_factor")
        if af is None:
            scaling = mp.mpf(1) if factor <= 1 else mp.sqrt(1 + mp.log(factor) / mp.log(orig))
        else:
            scaling = M(af)
        ext = rp["long_factor"] if (seq_len and seq_len > orig) else rp["short_factor"]
        inv = [1 / (M(ext[j]) * base**j2[j]) for j in range(h)]
    elif rope_type == "llama3":
        # _compute_llama3_parameters
        inv0 = default(base)
        factor, lo, hi = M(rp["factor"]), M(rp["low_freq_factor"]), M(rp["high_freq_factor"])
        old = M(rp["original_max_position_embeddings"])
        low_wl, high_wl = old / lo, old / hi
        inv = []
        for x in inv0:
            wl = 2 * mp.pi / x
            llama = x / factor if wl > low_wl else x
            if not (wl < high_wl) and not (wl > low_wl):
                smooth = (old / wl - lo) / (hi - lo)
                llama = (1 - smooth) * llama / factor + smooth * llama
            inv.append(llama)
    else:
        raise ValueError(f"no exact formula for rope_type {rope_type!r}")
    return inv, scaling


def f64(x) -> float:
    return float(x)  # mpmath rounds to nearest binary64 (one rounding)


def f32_correct(x) -> np.float32:
    """Correctly rounded float32 of an mpf (normal range)."""
    with mp.workprec(24):
        return np.float32(float(+x))


def run_exact(q, k, positions, inv, scaling, head_dim, rotary_dim):
    h = rotary_dim // 2
    n = len(positions)
    cos = [[scaling * mp.cos(p * inv[j]) for j in range(h)] for p in positions]
    sin = [[scaling * mp.sin(p * inv[j]) for j in range(h)] for p in positions]

    def rotate(x, interleaved):
        out = np.empty(x.shape, dtype=np.float64)
        for i in range(n):
            for hd in range(x.shape[1]):
                v = [mp.mpf(float(t)) for t in x[i, hd]]
                o = list(v)
                for j in range(h):
                    a, b = (2 * j, 2 * j + 1) if interleaved else (j, j + h)
                    c, s = cos[i][j], sin[i][j]
                    o[a] = v[a] * c - v[b] * s
                    o[b] = v[b] * c + v[a] * s
                out[i, hd] = [f64(t) for t in o]
        return out

    return {
        "cos_mp": cos,
        "sin_mp": sin,
        "cos": np.array([[f64(c) for c in row + row] for row in cos]),
        "sin": np.array([[f64(c) for c in row + row] for row in sin]),
        "q_embed_half_split": rotate(q, False),
        "k_embed_half_split": rotate(k, False),
        "q_embed_interleaved": rotate(q, True),
        "k_embed_interleaved": rotate(k, True),
    }


# ----------------------------------------------------------------------------------------------
# errors
# ----------------------------------------------------------------------------------------------
def f32_ordinal(x) -> np.ndarray:
    i = np.asarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp32(a, b) -> int:
    return int(np.max(np.abs(f32_ordinal(a) - f32_ordinal(b)))) if np.size(a) else 0


def compute_errors(positions, hf, ex, inv_mp, scaling_mp, inv_f64, scaling_f64, rotary_dim):
    h = rotary_dim // 2
    inv32 = hf["inv_freq"]
    per_position = []
    exact_cos, exact_sin = ex["cos"], ex["sin"]  # the rounded float64 values, as in the files
    for i, p in enumerate(positions):
        # Differences are measured in float64 against exact_f64 (as the carried files were).
        cos_err = float(np.max(np.abs(hf["cos"][i].astype(np.float64) - exact_cos[i])))
        sin_err = float(np.max(np.abs(hf["sin"][i].astype(np.float64) - exact_sin[i])))
        # HF's float32 angle: fl32(inv_freq_f32 * fl32(p)) (a matmul with inner dimension 1),
        # against the exact angle p * inv_freq (60 digits), the difference rounded once
        angles = np.float32(p) * inv32
        angle_err = max(abs(mp.mpf(float(angles[j])) - p * inv_mp[j]) for j in range(h))
        # a plain float64 implementation: cos(fl64(p * inv_freq_f64)) * scaling with libm
        a = [float(p) * x for x in inv_f64]
        plain_c = np.array([math.cos(t) * scaling_f64 for t in a])  # libm (numpy's own cos differs)
        plain_s = np.array([math.sin(t) * scaling_f64 for t in a])
        plain = max(float(np.max(np.abs(plain_c - exact_cos[i, :h]))), float(np.max(np.abs(plain_s - exact_sin[i, :h]))))
        per_position.append(
            {
                "position": p,
                "cos_max_abs_err": F64(cos_err),
                "sin_max_abs_err": F64(sin_err),
                "angle_max_abs_err_rad": F64(f64(angle_err)),
                "plain_f64_cos_sin_max_abs_err": F64(plain),
            }
        )
    inv_f64_arr = np.asarray(inv_f64)
    rel = float(np.max(np.abs(inv32.astype(np.float64) - inv_f64_arr) / inv_f64_arr))
    correctly_rounded = np.array([f32_correct(x) for x in inv_mp], dtype=np.float32)
    # torch's float32 cos/sin at HF's own float32 angles vs the correctly rounded values
    pos32 = torch.tensor(positions, dtype=torch.float32)
    freqs = (torch.from_numpy(inv32)[:, None] @ pos32[None, :]).T  # as the rotary forward does
    emb = torch.cat((freqs, freqs), dim=-1)
    tc, ts = torch.cos(emb).numpy(), torch.sin(emb).numpy()
    emb_np = emb.numpy()
    rc = np.array([[f32_correct(mp.cos(mp.mpf(float(a)))) for a in row] for row in emb_np], dtype=np.float32)
    rs = np.array([[f32_correct(mp.sin(mp.mpf(float(a)))) for a in row] for row in emb_np], dtype=np.float32)
    qerr = np.max(np.abs(hf["q_embed"].astype(np.float64) - ex["q_embed_half_split"]))
    kerr = np.max(np.abs(hf["k_embed"].astype(np.float64) - ex["k_embed_half_split"]))
    return {
        "per_position": per_position,
        "inv_freq_f32_max_rel_err_vs_exact": F64(rel),
        "inv_freq_f32_max_ulp_vs_correctly_rounded_exact": ulp32(inv32, correctly_rounded),
        "torch_f32_cos_max_ulp_vs_correctly_rounded_at_hf_angle": ulp32(tc, rc),
        "torch_f32_sin_max_ulp_vs_correctly_rounded_at_hf_angle": ulp32(ts, rs),
        "q_embed_max_abs_err_hf_vs_exact_half_split": F64(qerr),
        "k_embed_max_abs_err_hf_vs_exact_half_split": F64(kerr),
    }


# ----------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------
def positive_case(case: dict) -> dict:
    mp.dps = DPS
    # geometry from a config built without capturing (the capture is in run_hf_positive)
    with capture_hf_logs():
        cfg0 = build_config(case)
    head_dim, rotary_dim = geometry(cfg0)
    q, k = make_inputs(case, head_dim)
    hf = run_hf_positive(case, q, k)
    cfg = hf["cfg"]
    rp = cfg.rope_parameters
    rope_type = rp["rope_type"]
    mpe = cfg.max_position_embeddings
    if 2 * len(hf["inv_freq"]) != rotary_dim:
        raise RuntimeError(f"{case['name']}: HF inv_freq has {len(hf['inv_freq'])} entries, rotary_dim {rotary_dim}")
    seq_len = seq_len_in_use(case, rp, mpe)
    inv_mp, scaling_mp = exact_inv_freq(rp, cfg, head_dim, rotary_dim, seq_len)
    ex = run_exact(q, k, case["positions"], inv_mp, scaling_mp, head_dim, rotary_dim)
    inv_f64 = [f64(x) for x in inv_mp]
    scaling_f64 = f64(scaling_mp)
    errors = compute_errors(case["positions"], hf, ex, inv_mp, scaling_mp, inv_f64, scaling_f64, rotary_dim)

    rotary_class = case["rotary_class"]
    if rope_type == "default":
        rope_init = f"compute_default_rope_parameters of {rotary_class}"
    else:
        rope_init = f"modeling_rope_utils.ROPE_INIT_FUNCTIONS['{rope_type}']"
    doc = {"format": FORMAT, "case": case["name"], "kind": "positive", "description": case["description"]}
    doc["model_reference"] = case["model_reference"]
    doc["layout_note"] = LAYOUT_NOTE
    if "data_source" in case:
        doc["data_source"] = case["data_source"]
    doc["source"] = {
        **source_base(),
        "device": "cpu",
        "hf_rotary_class": rotary_class,
        "hf_apply_function": case["apply_function"],
        "hf_rope_init": rope_init,
    }
    doc["config"] = Raw(case["config"])
    doc["hf_rope_parameters"] = Raw(dict(rp))
    doc["hf_log_messages"] = hf["logs"]
    doc.update(
        rope_type=rope_type,
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        max_position_embeddings=mpe,
        seq_len=seq_len,
        seq_len_note=case["seq_len_note"],
    )
    if "prior_forward_calls" in case:
        doc["prior_forward_calls"] = case["prior_forward_calls"]
    doc["n_positions"] = len(case["positions"])
    doc["positions"] = case["positions"]
    doc["inputs"] = {"rng": RNG_NOTE, "seed": case["seed"], "q": Tensor("float32", q), "k": Tensor("float32", k)}
    hf_doc = {
        "precision_notes": case["precision_notes"],
        "inv_freq": Tensor("float32", hf["inv_freq"]),
        "attention_scaling": F64(hf["attention_scaling"]),
        "cos": Tensor("float32", hf["cos"]),
        "sin": Tensor("float32", hf["sin"]),
        "q_embed": Tensor("float32", hf["q_embed"]),
        "k_embed": Tensor("float32", hf["k_embed"]),
    }
    if "deepseek_interleave_note" in case:
        hf_doc["deepseek_interleave_q_embed"] = Tensor("float32", hf["deepseek_interleave_q_embed"])
        hf_doc["deepseek_interleave_k_embed"] = Tensor("float32", hf["deepseek_interleave_k_embed"])
        hf_doc["deepseek_interleave_note"] = case["deepseek_interleave_note"]
        hf_doc["deepseek_softmax_scale"] = F64(hf["deepseek_softmax_scale"])
        hf_doc["deepseek_softmax_scale_note"] = case["deepseek_softmax_scale_note"]
    doc["hf_f32"] = hf_doc
    doc["exact_f64"] = {
        "inv_freq": Tensor("float64", inv_f64),
        "attention_scaling": F64(scaling_f64),
        "cos": Tensor("float64", ex["cos"]),
        "sin": Tensor("float64", ex["sin"]),
        **{key: Tensor("float64", ex[key]) for key in (
            "q_embed_half_split", "k_embed_half_split", "q_embed_interleaved", "k_embed_interleaved")},
    }
    doc["errors"] = errors
    return doc


class _GenericMixinValidation:
    """Validation through RotaryEmbeddingConfigMixin.validate_rope instead of the class's override."""

    def validate_rope(self):
        return modeling_rope_utils.RotaryEmbeddingConfigMixin.validate_rope(self)


def _validate(cls, config: dict, validator: str, explicit_validation: bool = False):
    """Builds the config the way the config class does (its __init__/__post_init__ runs
    validate_rope). Returns (config or None, hf_validation record)."""
    with capture_hf_logs() as logs:
        try:
            cfg, exc = cls(**copy.deepcopy(config)), None
            if explicit_validation:
                # huggingface_hub's @strict registers class validators per decorated class, so a
                # subclass does not run them: call the generic mixin's validation directly
                cfg.validate_rope()
        except Exception as e:  # noqa: BLE001 - we record what HF raises
            cfg, exc = None, e
    rec = {"exception": None, "log_messages": logs, "validator": validator}
    if exc is not None:
        # huggingface_hub's @strict wraps a class validator's exception; record the original one
        inner = exc.__cause__ if type(exc).__name__ == "StrictDataclassClassValidationError" and exc.__cause__ else exc
        rec["exception"] = exception_record(inner)
        if inner is not exc:
            rec["raised_as"] = type(exc).__name__
    return cfg, rec


def negative_case(case: dict) -> dict:
    cls = getattr(transformers, case["config_class"])
    generic_cls = type("Generic" + cls.__name__, (_GenericMixinValidation, cls), {})
    if case["config_class"] == "LlamaConfig":
        cfg, validation = _validate(cls, case["config"], "RotaryEmbeddingConfigMixin")
        generic = None
    else:
        cfg, validation = _validate(cls, case["config"], f"{cls.__name__} (validate_rope override)")
        generic = None
        if case.get("also_generic_mixin"):
            gcfg, generic = _validate(generic_cls, case["config"], "RotaryEmbeddingConfigMixin", True)
            cfg = cfg or gcfg
    doc = {"format": FORMAT, "case": case["name"], "kind": "negative", "description": case["description"]}
    doc["source"] = source_base()
    doc["config"] = Raw(case["config"])
    doc["hf_validation"] = validation
    if generic is not None:
        doc["hf_validation_generic_mixin"] = generic
    if cfg is None:
        doc["hf_compute"] = {"exception": None, "skipped": "config construction raised; nothing to compute"}
    else:
        doc["hf_rope_parameters"] = Raw(dict(cfg.rope_parameters))
        rope_type = cfg.rope_parameters["rope_type"]
        fn = modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type]
        with capture_hf_logs() as logs:
            try:
                inv, scaling = fn(cfg, None)
                exc = None
            except Exception as e:  # noqa: BLE001
                exc = e
        if exc is not None:
            doc["hf_compute"] = {"exception": exception_record(exc), "log_messages": logs, "rope_type": rope_type}
        else:
            inv = inv.numpy()
            doc["hf_compute"] = {
                "exception": None,
                "finite": bool(np.all(np.isfinite(inv)) and math.isfinite(scaling)),
                "attention_scaling": F64(scaling),
                "inv_freq": Tensor("float32", inv),
                "log_messages": logs,
                "rope_type": rope_type,
            }
    raised = validation["exception"] is not None or doc["hf_compute"].get("exception") is not None
    warned = bool(validation["log_messages"]) or bool((generic or {}).get("log_messages"))
    doc["hf_outcome"] = "exception" if raised else ("warning" if warned else "accepted")
    # keep the field order of the format: hf_rope_parameters after the validations
    order = ["format", "case", "kind", "description", "source", "config", "hf_validation",
             "hf_validation_generic_mixin", "hf_rope_parameters", "hf_compute", "hf_outcome"]
    return {key: doc[key] for key in order if key in doc}


def generate(name: str) -> dict:
    torch.set_num_threads(1)
    case = BY_NAME[name]
    with torch.no_grad():
        return positive_case(case) if case["kind"] == "positive" else negative_case(case)


def render(doc: dict) -> str:
    return dump(doc) + "\n"


# ----------------------------------------------------------------------------------------------
# --check
# ----------------------------------------------------------------------------------------------
def _arr(t: dict) -> np.ndarray:
    dt = np.float32 if t["dtype"] == "float32" else np.float64
    return np.array(t["data"], dtype=np.float64).astype(dt).reshape(t["shape"])


def recipe_embed(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """tests/golden/README.md "The hf_f32 numerics", step 4, in numpy float32 (x: [n, heads, d])."""
    r = cos.shape[-1]
    h = r // 2
    c, s = cos[:, None, :], sin[:, None, :]
    xr = x[..., :r]
    rot = np.concatenate([-xr[..., h:], xr[..., :h]], axis=-1)
    out = x.copy()
    out[..., :r] = (xr * c).astype(np.float32) + (rot * s).astype(np.float32)
    return out


def compare(new: dict, old: dict) -> tuple[bool, list[str]]:
    """Compares a regenerated case with a carried one. Returns (ok, report lines)."""
    ok, lines = True, []

    def bad(msg):
        nonlocal ok
        ok = False
        lines.append("  FAIL " + msg)

    if new["kind"] == "negative":
        for key in ("hf_outcome",):
            if new[key] != old[key]:
                bad(f"{key}: {old[key]!r} -> {new[key]!r}")
        for key in ("hf_validation", "hf_validation_generic_mixin"):
            if key in old or key in new:
                a, b = old.get(key, {}), new.get(key, {})
                if a.get("exception") != b.get("exception"):
                    bad(f"{key}.exception: {a.get('exception')} -> {b.get('exception')}")
                if a.get("log_messages") != b.get("log_messages"):
                    lines.append(f"  note {key}.log_messages differ: {a.get('log_messages')} -> {b.get('log_messages')}")
                if "raised_as" in b:
                    lines.append(f"  note {key}: raised as {b['raised_as']} wrapping {b['exception']['type']}")
        a, b = old["hf_compute"], new["hf_compute"]
        if (a.get("exception") or {}).get("type") != (b.get("exception") or {}).get("type"):
            bad(f"hf_compute.exception: {a.get('exception')} -> {b.get('exception')}")
        if "inv_freq" in a or "inv_freq" in b:
            if "inv_freq" not in a or "inv_freq" not in b:
                bad("hf_compute.inv_freq present in one only")
            else:
                u = ulp32(_arr(a["inv_freq"]), _arr(b["inv_freq"]))
                lines.append(f"  hf_compute.inv_freq max ulp {u}; attention_scaling "
                             f"{'identical' if a['attention_scaling'] == b['attention_scaling'] else 'DIFFERS'}")
                if u > 0 or a["attention_scaling"] != b["attention_scaling"]:
                    bad("hf_compute differs")
        if old.get("hf_rope_parameters") != new.get("hf_rope_parameters"):
            lines.append(f"  note hf_rope_parameters differ: keys {sorted(old.get('hf_rope_parameters', {}))} -> "
                         f"{sorted(new.get('hf_rope_parameters', {}))}")
        return ok, lines

    # exact_f64: bit-identical
    ex_new, ex_old = new["exact_f64"], old["exact_f64"]
    diff = []
    for key in ex_old:
        if key == "attention_scaling":
            same = ex_new[key] == ex_old[key]
            n_diff = 0 if same else 1
        else:
            a, b = _arr(ex_old[key]), _arr(ex_new[key])
            same = a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))
            n_diff = int(np.sum(a.view(np.int64) != b.view(np.int64))) if a.shape == b.shape else -1
        if not same:
            diff.append(f"{key} ({n_diff} values)")
    if diff:
        bad("exact_f64 differs: " + ", ".join(diff))
    else:
        lines.append("  exact_f64: identical (all fields, bit for bit)")
    # inputs: identical
    for key in ("q", "k"):
        if not np.array_equal(_arr(new["inputs"][key]), _arr(old["inputs"][key])):
            bad(f"inputs.{key} differ")
    for key in ("seq_len", "head_dim", "rotary_dim", "rope_type", "positions"):
        if new[key] != old[key]:
            bad(f"{key}: {old[key]!r} -> {new[key]!r}")
    # hf_f32
    hn, ho = new["hf_f32"], old["hf_f32"]
    parts = []
    for key in ho:
        if isinstance(ho[key], dict) and "dtype" in ho[key]:
            a, b = _arr(ho[key]), _arr(hn[key])
            u = ulp32(a, b)
            mad = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            nd = int(np.sum(a != b))
            parts.append(f"{key} {u} ulp" + (f" ({nd}/{a.size} differ, max |d| {mad:.2g})" if nd else ""))
            if key in TOL_ULP:
                if u > TOL_ULP[key]:
                    bad(f"hf_f32.{key}: {u} ulp > {TOL_ULP[key]}")
            elif mad > TOL_EMBED_ABS:
                bad(f"hf_f32.{key}: max |d| {mad:.3g} > {TOL_EMBED_ABS}")
        elif isinstance(ho[key], float):
            if ho[key] != hn[key]:
                bad(f"hf_f32.{key}: {ho[key]!r} -> {hn[key]!r}")
    lines.append("  hf_f32: " + "; ".join(parts))
    # HF's rotation is float32 arithmetic: recompute q/k embeds from the new cos/sin with the
    # README's recipe (fl32(fl32(x*cos) + fl32(rotate_half(x)*sin)), tail copied): bit-exact?
    cos, sin = _arr(hn["cos"]), _arr(hn["sin"])
    for key, inp in (("q_embed", "q"), ("k_embed", "k")):
        if not np.array_equal(recipe_embed(_arr(new["inputs"][inp]), cos, sin), _arr(hn[key])):
            bad(f"hf_f32.{key} is not the float32 recipe applied to hf_f32.cos/sin")
    lines.append("  hf_f32 q/k embeds: bit-identical to the float32 recipe on the new cos/sin")
    if old["hf_rope_parameters"] != new["hf_rope_parameters"]:
        lines.append("  note hf_rope_parameters differ")
    if old["hf_log_messages"] != new["hf_log_messages"]:
        lines.append(f"  note hf_log_messages differ: {old['hf_log_messages']} -> {new['hf_log_messages']}")
    eo, en = old["errors"], new["errors"]
    changed = [k for k in eo if k != "per_position" and eo[k] != en[k]]
    per_key = {}
    for a, b in zip(eo["per_position"], en["per_position"]):
        for key in a:
            if key != "position" and a[key] != b[key]:
                n, worst = per_key.get(key, (0, 0.0))
                rel = abs(b[key] - a[key]) / max(abs(a[key]), 1e-300)
                per_key[key] = (n + 1, max(worst, rel))
    summary = ", ".join(f"{k} {n} rows (max rel change {w:.2g})" for k, (n, w) in per_key.items())
    lines.append(f"  errors: scalar fields changed: {changed if changed else 'none'}; "
                 f"per_position of {len(eo['per_position'])} rows: {summary if summary else 'identical'}")
    for key in ("torch_f32_cos_max_ulp_vs_correctly_rounded_at_hf_angle", "torch_f32_sin_max_ulp_vs_correctly_rounded_at_hf_angle"):
        if eo[key] != en[key]:
            lines.append(f"  note errors.{key}: {eo[key]} -> {en[key]}")
    return ok, lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the case files into this directory")
    ap.add_argument("--check", metavar="DIR", help="regenerate in memory and compare with DIR's files")
    ap.add_argument("--cases", nargs="+", metavar="NAME", help="only these cases (default: all)")
    args = ap.parse_args(argv)
    if not args.out and not args.check:
        ap.error("give --out DIR and/or --check DIR")
    names = args.cases or [c["name"] for c in CASES]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    print(f"transformers {transformers.__version__} ({transformers_commit()}), torch {torch.__version__}, "
          f"mpmath {mpmath.__version__} at {DPS} digits")
    failed = []
    for name in names:
        doc = generate(name)
        text = render(doc)
        json.loads(text)  # the output is JSON
        if args.out:
            write_atomic(os.path.join(args.out, name + ".json"), text)
        if args.check:
            path = os.path.join(args.check, name + ".json")
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            ok, lines = compare(json.loads(text), old)
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
            for line in lines:
                print(line)
            if not ok:
                failed.append(name)
        else:
            print(f"wrote {name}")
        sys.stdout.flush()
    if args.check:
        print(f"{len(names) - len(failed)}/{len(names)} cases within tolerance"
              + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
