"""The drop-in apply functions against Hugging Face's eager expressions, bit for bit: torch's type
promotion for every dtype pair of q and cos/sin (forward and gradient), and the variants
patch_model installs for transformers' other apply functions (Cohere's float32 upcast, OLMo's
round-back, gpt-oss's half-width cos/sin, Gemma 3n's one-tensor form, GPT-J's (tensor, sin, cos)).
"""
import itertools

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary.torch as rt  # noqa: E402
from rotary import _hf_apply_variants  # noqa: E402
from hf_harness import one_torch_thread  # noqa: E402,F401

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]


def rotate(x, style):
    if style == "neox":
        return rt.rotate_half(x)
    pairs = x.unflatten(-1, (-1, 2))  # transformers' rotate_every_two (modeling_gptj)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def hf_expression(x, cos, sin, style, unsqueeze_dim=1):
    """modeling_phi3.apply_rotary_pos_emb for one tensor (partial rotary; LLaMA's when the widths match)."""
    c, s = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    r = c.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    return torch.cat([(x_rot * c) + (rotate(x_rot, style) * s), x_pass], dim=-1)


def tensors(q_dtype, cos_dtype, rotary_dim, seed, sin_dtype=None):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(2, 4, 11, 32, generator=g) * 3).to(q_dtype).transpose(1, 2).contiguous().transpose(1, 2)
    k = (torch.randn(2, 2, 11, 32, generator=g) * 3).to(q_dtype)
    cos = torch.randn(2, 11, rotary_dim, generator=g).to(cos_dtype)
    sin = torch.randn(2, 11, rotary_dim, generator=g).to(sin_dtype or cos_dtype)
    return q.requires_grad_(), k.requires_grad_(), cos.requires_grad_(), sin.requires_grad_()


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("q_dtype, cos_dtype", list(itertools.product(DTYPES, DTYPES)),
                         ids=lambda d: str(d).replace("torch.", ""))
def test_type_promotion_matches_eager_torch_for_every_dtype_pair(q_dtype, cos_dtype, style):
    """rounding="like_torch": the result has torch's promoted dtype (bfloat16 q with float32 cos
    gives float32) and HF's bits; so have the gradients with respect to q, k, cos and sin."""
    for rotary_dim, seed in ((32, 1), (16, 2)):  # whole head, and partial rotary (the rest passes through)
        q, k, cos, sin = tensors(q_dtype, cos_dtype, rotary_dim, seed)
        ours_q, ours_k = rt.apply_rotary_pos_emb(q, k, cos, sin, style=style)
        ref_q, ref_k = hf_expression(q, cos, sin, style), hf_expression(k, cos, sin, style)
        assert ours_q.dtype == ref_q.dtype == torch.promote_types(q_dtype, cos_dtype)
        assert torch.equal(ours_q, ref_q) and torch.equal(ours_k, ref_k)
        g = torch.Generator().manual_seed(seed + 10)
        grad_q = torch.randn(ref_q.shape, generator=g).to(ref_q.dtype)
        grad_k = torch.randn(ref_k.shape, generator=g).to(ref_k.dtype)
        ours = torch.autograd.grad((ours_q, ours_k), (q, k, cos, sin), (grad_q, grad_k))
        ref = torch.autograd.grad((ref_q, ref_k), (q, k, cos, sin), (grad_q, grad_k))
        for name, a, b in zip(("q", "k", "cos", "sin"), ours, ref):
            assert a.dtype == b.dtype, name
            assert torch.equal(a, b), f"grad {name}: max |diff| {(a.double() - b.double()).abs().max().item():.3g}"


def test_cos_and_sin_of_two_dtypes_follow_torch():
    """cos float32 and sin bfloat16: the two products round differently; still HF's bits."""
    q, k, cos, sin = tensors(torch.bfloat16, torch.float32, 32, 3, sin_dtype=torch.bfloat16)
    ours_q, _ = rt.apply_rotary_pos_emb(q, k, cos, sin)
    ref_q = hf_expression(q, cos, sin, "neox")
    assert ours_q.dtype == torch.float32 and torch.equal(ours_q, ref_q)
    grad = torch.randn(ref_q.shape)
    assert torch.equal(torch.autograd.grad(ours_q, q, grad)[0], torch.autograd.grad(ref_q, q, grad)[0])
    # and when q is the widest of the three (float32 q, float32 cos, bfloat16 sin)
    q, k, cos, sin = tensors(torch.float32, torch.float32, 16, 5, sin_dtype=torch.bfloat16)
    ours_q, _ = rt.apply_rotary_pos_emb(q, k, cos, sin)
    ref_q = hf_expression(q, cos, sin, "neox")
    assert torch.equal(ours_q, ref_q)
    grad = grad[..., :32]
    assert torch.equal(torch.autograd.grad(ours_q, q, grad)[0], torch.autograd.grad(ref_q, q, grad)[0])


def test_unsqueeze_dim_2_and_broadcast_batch():
    """q [batch, seq, heads, dim] with cos [1, seq, dim] (position_ids [1, seq]), mixed dtypes."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(3, 7, 4, 16, generator=g).to(torch.bfloat16)
    cos, sin = torch.randn(1, 7, 16, generator=g), torch.randn(1, 7, 16, generator=g)
    ours, _ = rt.apply_rotary_pos_emb(q, q, cos, sin, unsqueeze_dim=2)
    assert torch.equal(ours, hf_expression(q, cos, sin, "neox", unsqueeze_dim=2))


# ---- the variants patch_model installs, against the transformers functions they replace --------------
def spec_of(config_cls, **kwargs):
    import rotary

    config = config_cls(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, **kwargs)
    return rotary.Spec.from_hf_config(config)


VARIANTS = {
    # family: (modeling module, function, the rotary variant patch_model must pick)
    "llama": ("llama", "apply_rotary_pos_emb", "neox pairs, promote"),
    "cohere": ("cohere", "apply_rotary_pos_emb", "gptj pairs, float32"),
    "olmo": ("olmo", "apply_rotary_pos_emb", "neox pairs, cast_back"),
    "modernbert": ("modernbert", "apply_rotary_pos_emb", "neox pairs, float32"),
    "gpt_oss": ("gpt_oss", "apply_rotary_pos_emb", "neox pairs (half-width cos/sin), promote"),
    "phi3": ("phi3", "apply_rotary_pos_emb", "neox pairs, promote"),
    "gemma3n": ("gemma3n", "apply_rotary_pos_emb", "neox pairs, one tensor, promote"),
    "gptj": ("gptj", "apply_rotary_pos_emb", "GPT-J's (tensor, sin, cos)"),
    "deepseek_v3": ("deepseek_v3", "apply_rotary_pos_emb_interleave", "DeepSeek's interleave"),
    "qwen2_vl": ("qwen2_vl", "apply_multimodal_rotary_pos_emb", "M-RoPE, promote"),
}


def variant_specs(family):
    if family == "qwen2_vl":
        return [spec_of(transformers.Qwen2VLTextConfig,
                        rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e6})]
    if family == "gptj":
        return [rotary_spec_gptj()]
    if family == "phi3":  # partial rotary: 12 of 16 dims
        return [spec_of(transformers.Phi3Config, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                                  "partial_rotary_factor": 0.75})]
    return [spec_of(transformers.LlamaConfig)]


def rotary_spec_gptj():
    import rotary

    return rotary.Spec.from_hf_config(transformers.GPTJConfig(n_embd=64, n_head=4, rotary_dim=8))


def transformers_function(module, name):
    import importlib

    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    function = getattr(modeling, name)
    return modeling, getattr(function, "rotary_original", function)  # transformers' own, even if patched


@pytest.mark.parametrize("family", list(VARIANTS))
def test_patch_model_picks_the_variant_of_each_transformers_function(family):
    """_pick_function: the probe identifies which of rotary's variants gives each transformers
    function's bits (float32, bfloat16, float16, and bfloat16 / float16 q with float32 cos/sin,
    both unsqueeze_dims, whole and partial widths), and the function it returns gives them too,
    with the rounding it was asked for."""
    import inspect

    module, name, description = VARIANTS[family]
    modeling, original = transformers_function(module, name)
    specs = variant_specs(family)
    picked, function = _hf_apply_variants._pick_function("Model", modeling, name, original, specs, "like_torch")
    assert picked == description
    probes = _hf_apply_variants._function_probes(name, tuple(inspect.signature(original).parameters), specs)
    answered = 0
    for what, args, kwargs in probes:
        try:
            expected = original(*args, **kwargs)
        except Exception:  # a shape transformers' function does not take
            continue
        answered += 1
        got = function(*args, **kwargs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        assert all(e.dtype == o.dtype and torch.equal(e, o) for e, o in zip(expected, got)), what
    assert answered >= 5  # GPT-J: one width, unsqueeze_dim 2, sin/cos in q's dtype (its own .to(key.dtype))


def test_a_function_no_variant_reproduces_is_refused():
    """GLM's apply_rotary_pos_emb (half of cos repeat-interleaved, then rotate_half) is not a
    rotation rotary implements: refused, naming the function."""
    import rotary

    modeling, original = transformers_function("glm", "apply_rotary_pos_emb")
    with pytest.raises(rotary.RotaryError, match=r"cannot serve GlmModel exactly: "
                                                 r"transformers.models.glm.modeling_glm.apply_rotary_pos_emb computes "
                                                 r"what no rotary variant reproduces bit for bit"):
        _hf_apply_variants._pick_function("GlmModel", modeling, "apply_rotary_pos_emb", original,
                                          [spec_of(transformers.LlamaConfig)], "like_torch")


def test_promotion_under_torch_compile():
    """The fake implementation gives the promoted dtype too: compiled with fullgraph=True, a
    bfloat16 q with float32 cos/sin gives HF's float32 bits, and its gradient HF's bfloat16 bits."""
    q, k, cos, sin = tensors(torch.bfloat16, torch.float32, 16, 6)

    def ours(q, k, cos, sin):
        return rt.apply_rotary_pos_emb(q, k, cos, sin)[0]

    torch._dynamo.reset()
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    got = compiled(q, k, cos, sin)
    ref = hf_expression(q, cos, sin, "neox")
    assert got.dtype == torch.float32 and torch.equal(got, ref)
    grad = torch.randn(ref.shape)
    assert torch.equal(torch.autograd.grad(got, q, grad)[0], torch.autograd.grad(ref, q, grad)[0])


# ---- the like_torch kernel (src/cpu/cos_sin_kernels-inl.h) against eager torch, bit for bit ---------
def _special_values(shape, dtype, rng):
    """Values where a rounding slip shows in `dtype`: few-bit significands (their products land on
    ties of the storage precision), subnormals of the type, values whose products are subnormal or
    underflow, values near the largest finite (sums overflow), signed zeros and ordinary normals."""
    import numpy as np
    finfo = torch.finfo(dtype)
    kind = rng.integers(0, 7, size=shape)
    sign = np.where(rng.integers(0, 2, size=shape) == 1, -1.0, 1.0)
    few_bits = np.ldexp(1.0 + rng.integers(0, 8, size=shape) / 8.0, rng.integers(-3, 4, size=shape))
    digits = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}[dtype]
    mantissa = 1.0 + rng.integers(0, 2 ** digits, size=shape) / 2.0 ** digits
    subnormal = finfo.smallest_normal * rng.integers(1, 1000, size=shape) / 2.0 ** (digits + 1)
    low = -13 if dtype == torch.float16 else -76
    underflowing = np.ldexp(1.0 + rng.integers(0, 64, size=shape) / 64.0, rng.integers(low, low + 6, size=shape))
    huge = finfo.max * rng.uniform(0.5, 1.0, size=shape)
    normal = rng.standard_normal(size=shape) * 3.0
    value = np.choose(kind, [few_bits, mantissa, subnormal, underflowing, huge, np.zeros(shape), normal])
    return torch.from_numpy(sign * value).to(dtype)


def _same_bits(a, b):
    """Equal values (NaN where the other is NaN: infinities in special values may meet)."""
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("seed", range(30))
def test_like_torch_kernel_is_bitwise_eager_torch_on_random_calls(seed):
    """The drop-in with rounding='like_torch' against HF's eager expression: float32, bfloat16 and
    float16; random shapes, partial rotary, both pairings, both unsqueeze_dims; q as a strided view
    (heads and tokens swapped in memory, or a slice of wider heads); cos/sin as [batch, seq, r],
    [1, seq, r] (broadcast), [seq, r], already unsqueezed, or a slice of a wider row; ordinary and
    special values (ties, subnormals, underflow, overflow, signed zeros)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    dtype = [torch.float32, torch.bfloat16, torch.float16][seed % 3]
    style = ["neox", "gptj"][int(rng.integers(2))]
    unsqueeze_dim = int(rng.integers(1, 3))
    b, s, heads = int(rng.integers(1, 4)), int(rng.integers(1, 40)), int(rng.integers(1, 5))
    r = 2 * int(rng.integers(1, 81))
    head = r + 2 * int(rng.integers(0, 6)) * int(rng.integers(0, 2))
    special = seed % 2 == 0

    def values(*shape):
        return _special_values(shape, dtype, rng) if special else \
            torch.from_numpy(rng.standard_normal(shape) * 3).to(dtype)

    shape = (b, heads, s, head) if unsqueeze_dim == 1 else (b, s, heads, head)
    form = int(rng.integers(3))
    if form == 0:
        q = values(*shape)
    elif form == 1:  # heads and tokens swapped in memory
        q = values(*shape).transpose(1, 2).contiguous().transpose(1, 2)
    else:  # a slice of wider heads: the head stride is not head
        q = values(*shape[:-1], head + 6)[..., :head]
    k = values(*shape)
    cos_form = int(rng.integers(5))
    cos_shape = {0: (b, s, r), 1: (1, s, r), 2: (s, r), 3: (b, s, r), 4: (b, s, r + 4)}[cos_form]
    cos, sin = values(*cos_shape), values(*cos_shape)
    if cos_form == 4:  # a slice of a wider row (unit stride along the row still)
        cos, sin = cos[..., :r], sin[..., :r]
    if cos_form == 3:  # already unsqueezed at unsqueeze_dim
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    ours_q, ours_k = rt.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, style=style)
    c, sn = (cos[None], sin[None]) if cos.dim() == 2 else (cos, sin)  # [seq, r] is one sequence's rows
    c, sn = (c, sn) if c.dim() == 4 else (c.unsqueeze(unsqueeze_dim), sn.unsqueeze(unsqueeze_dim))
    for x, ours in ((q, ours_q), (k, ours_k)):
        x_rot, x_pass = x[..., :r], x[..., r:]
        ref = torch.cat([(x_rot * c) + (rotate(x_rot, style) * sn), x_pass], dim=-1)
        assert _same_bits(ours, ref), f"max |diff| {(ours.double() - ref.double()).abs().max().item():.3g}"


def test_like_torch_kernel_on_a_prefill_shape_in_every_dtype():
    """Llama's prefill layout (q [1, 32, 512, 128] from a transpose, cos/sin [1, 512, 128]): the kernel's
    head-by-head blocks over many tokens, bit for bit against eager torch."""
    g = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q = (torch.randn(1, 512, 32, 128, generator=g) * 3).to(dtype).transpose(1, 2).contiguous()
        k = (torch.randn(1, 8, 512, 128, generator=g) * 3).to(dtype)
        cos = torch.randn(1, 512, 128, generator=g).to(dtype)
        sin = torch.randn(1, 512, 128, generator=g).to(dtype)
        ours = rt.apply_rotary_pos_emb(q, k, cos, sin)
        assert torch.equal(ours[0], hf_expression(q, cos, sin, "neox")), dtype
        assert torch.equal(ours[1], hf_expression(k, cos, sin, "neox")), dtype
