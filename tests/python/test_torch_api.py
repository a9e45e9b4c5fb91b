"""The PyTorch API: the rotary::apply_rotary custom op (autograd, torch.compile, every dtype and
layout), its pure-torch twin for other devices, and the Hugging Face drop-in pieces.

Tolerances: u = 2^-24; as in test_numpy_api.py, |kernel - exact| <= 2u M + one unit of the
storage format at |exact| (float32: u |exact|), M <= 2 s max|x|, s = max(1, attention_scaling).
"""
import numpy as np
import pytest

import torch  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
import rotary._torch_ops as torch_ops  # noqa: E402

U = 2.0**-24
UNIT = {torch.float32: U, torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float64: 2.0**-53}


def assert_kernel_close(got, exact, x, scaling=1.0):
    m = 2.0 * max(1.0, scaling) * x.double().abs().max().item()
    exact = exact.double()
    bound = 2 * U * m + UNIT[got.dtype] * exact.abs() + 2.0**-133
    err = (got.double() - exact).abs()
    assert bool((err <= bound).all()), f"worst error / bound = {(err / bound).max().item():.3g}"


def plain_torch_rope(x, cos, sin, unsqueeze_dim=1):
    """Hugging Face's formulation: x * cos + rotate_half(x) * sin, in float64."""
    x = x.double()
    cos, sin = cos.double().unsqueeze(unsqueeze_dim), sin.double().unsqueeze(unsqueeze_dim)
    return x * cos + rt.rotate_half(x) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_equals_plain_torch_rotate_half_formulation(dtype):
    torch.manual_seed(1)
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = torch.randn(2, 32, 40, 128).to(dtype)  # bhsd, as in HF's attention
    k = torch.randn(2, 8, 40, 128).to(dtype)
    positions = torch.randint(0, 100000, (2, 40))
    cos, sin = rotary.table(spec, positions.numpy())
    cos, sin = torch.from_numpy(cos), torch.from_numpy(sin)
    q_out, k_out = rt.apply_rotary(q, k, positions, spec, layout="bhsd")
    assert q_out.dtype == dtype and q_out.shape == q.shape
    assert_kernel_close(q_out, plain_torch_rope(q, cos, sin), q)
    assert_kernel_close(k_out, plain_torch_rope(k, cos, sin), k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rotary_dim", [64, 16])
def test_drop_in_apply_rotary_pos_emb_is_bit_identical_to_hf_expression(dtype, rotary_dim):
    """rounding='like_torch' reproduces eager torch in q's dtype, forward and backward."""
    torch.manual_seed(2)
    q = torch.randn(2, 4, 17, 64).to(dtype).requires_grad_()
    k = torch.randn(2, 2, 17, 64).to(dtype).requires_grad_()
    cos = torch.randn(2, 17, rotary_dim).to(dtype)
    sin = torch.randn(2, 17, rotary_dim).to(dtype)

    def hf(x):  # modeling_phi3.apply_rotary_pos_emb for one tensor (partial rotary)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
        return torch.cat([(x_rot * c) + (rt.rotate_half(x_rot) * s), x_pass], dim=-1)

    ours_q, ours_k = rt.apply_rotary_pos_emb(q, k, cos, sin)
    assert torch.equal(ours_q, hf(q)) and torch.equal(ours_k, hf(k))
    grad = torch.randn_like(ours_q)
    (g_ours,) = torch.autograd.grad(ours_q, q, grad)
    (g_hf,) = torch.autograd.grad(hf(q), q, grad)
    assert torch.equal(g_ours, g_hf)


def _wide_range(shape, dtype, generator):
    """Magnitudes from 1e-22 (1e-9 for float16) to 1e6, plus inf and NaN: products and sums that
    land on subnormals, overflow to infinity and carry NaN exercise every branch of the roundings."""
    low = -9.0 if dtype == torch.float16 else -22.0
    magnitude = torch.pow(10.0, torch.empty(shape).uniform_(low, 6, generator=generator))
    x = (torch.randn(shape, generator=generator) * magnitude).to(dtype)
    flat = x.view(-1)
    flat[::97] = float("inf")
    flat[5::101] = float("nan")
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_drop_in_bit_identical_on_extreme_values_strided_and_both_styles(dtype, style):
    """like_torch equals torch's eager expression bit for bit (NaN where torch has NaN) on values
    that reach subnormals, infinity and NaN, for rotate_half and GPT-J's rotate_every_two, with
    q a non-contiguous view (HF's q.view(b, s, h, d).transpose(1, 2)), forward and backward."""
    g = torch.Generator().manual_seed(11)
    q = _wide_range((2, 37, 6, 64), dtype, g).transpose(1, 2).requires_grad_()  # [b, h, s, d], strided
    k = _wide_range((2, 2, 37, 64), dtype, g).requires_grad_()
    cos = _wide_range((2, 37, 64), dtype, g)
    sin = _wide_range((2, 37, 64), dtype, g)

    def rotate(x):
        if style == "neox":
            return rt.rotate_half(x)
        pairs = x.unflatten(-1, (-1, 2))  # transformers' rotate_every_two (modeling_gptj)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)

    def hf(x):
        return (x * cos.unsqueeze(1)) + (rotate(x) * sin.unsqueeze(1))

    def same(a, b):
        return torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)) and \
            torch.equal(a.isnan(), b.isnan())

    ours_q, ours_k = rt.apply_rotary_pos_emb(q, k, cos, sin, style=style)
    assert same(ours_q, hf(q)) and same(ours_k, hf(k))
    grad = _wide_range(tuple(ours_q.shape), dtype, g)
    (g_ours,) = torch.autograd.grad(ours_q, q, grad)
    (g_hf,) = torch.autograd.grad(hf(q), q, grad)
    assert same(g_ours, g_hf)


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_gradcheck_float64(style, layout):
    torch.manual_seed(3)
    # YaRN: attention_scaling != 1, so the transpose is not the inverse; head_dim 16 keeps the
    # numerical Jacobian small.
    spec = rotary.Spec.preset("qwen2.5-7b-yarn").replace(style=style, head_dim=16, rotary_dim=16)
    for trial in range(3):
        b, s, hq, hk = 1 + trial % 2, 3 + trial, 2, 1
        shape = (b, s, hq, spec.head_dim) if layout == "bshd" else (b, hq, s, spec.head_dim)
        kshape = (b, s, hk, spec.head_dim) if layout == "bshd" else (b, hk, s, spec.head_dim)
        q = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        k = torch.randn(kshape, dtype=torch.float64, requires_grad=True)
        positions = torch.randint(0, 50000, (b, s))
        assert torch.autograd.gradcheck(lambda a, c: rt.apply_rotary(a, c, positions, spec, layout=layout),
                                        (q, k), eps=1e-6, atol=1e-7)


def test_gradient_is_the_transposed_rotation_in_float32():
    torch.manual_seed(4)
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = torch.randn(1, 16, 4, 128, requires_grad=True)
    k = torch.randn(1, 16, 2, 128, requires_grad=True)
    q_out, k_out = rt.apply_rotary(q, k, None, spec, layout="bshd")
    gq, gk = torch.randn_like(q_out), torch.randn_like(k_out)
    (q_out * gq).sum().add((k_out * gk).sum()).backward()
    expect_q, expect_k = rt.apply_rotary(gq, gk, None, spec, direction="backward", layout="bshd")
    assert torch.equal(q.grad, expect_q) and torch.equal(k.grad, expect_k)


CASES = [
    dict(layout="bshd"),
    dict(layout="bhsd", positions=True),
    dict(layout="sbhd", offsets=True),
    dict(layout="thd", cu_seqlens=True),
    dict(layout="thd", cu_seqlens=True, offsets=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}" for k in c.values() if k is not True) +
                         "".join(f"-{k}" for k, v in c.items() if v is True))
@pytest.mark.parametrize("preset", ["llama-3.1-8b", "gpt-j-6b", "gpt-neox-20b"])
def test_pure_torch_backend_matches_the_kernel(case, preset):
    torch.manual_seed(5)
    spec = rotary.Spec.preset(preset)
    layout = case["layout"]
    b, s = (1, 23) if layout == "thd" else (2, 11)
    dims = {"bshd": lambda h: (b, s, h, spec.head_dim), "bhsd": lambda h: (b, h, s, spec.head_dim),
            "sbhd": lambda h: (s, b, h, spec.head_dim), "thd": lambda h: (s, h, spec.head_dim)}[layout]
    q, k = torch.randn(dims(4)), torch.randn(dims(2))
    kwargs = {"layout": layout}
    if case.get("cu_seqlens"):
        kwargs["cu_seqlens"] = torch.tensor([0, 5, 5, 23])
    if case.get("offsets"):
        kwargs["offsets"] = torch.randint(0, 10000, (3 if layout == "thd" else b,))
    positions = torch.randint(0, 70000, (b, s)) if case.get("positions") else None
    kernel = rt.apply_rotary(q, k, positions, spec, **kwargs)
    pure = rt.apply_rotary(q, k, positions, spec, backend="torch", **kwargs)
    # Both use the table's float32 C, S; the kernel may fuse one multiply-add: 2u M apart at most.
    for a, b_, x in zip(kernel, pure, (q, k)):
        m = 2.0 * x.abs().max().item()
        assert (a.double() - b_.double()).abs().max().item() <= 2 * U * m


def test_non_contiguous_inputs_and_in_place():
    torch.manual_seed(6)
    spec = rotary.Spec.preset("llama-3.1-8b")
    qkv = torch.randn(2, 9, 32 + 8 + 8, 128)  # a fused qkv projection, bshd
    q, k = qkv[:, :, :32], qkv[:, :, 32:40]
    assert not q.is_contiguous()
    expect_q, expect_k = rt.apply_rotary(q.contiguous(), k.contiguous(), None, spec, layout="bshd")
    got_q, got_k = rt.apply_rotary(q, k, None, spec, layout="bshd")
    assert torch.equal(got_q, expect_q) and torch.equal(got_k, expect_k)
    v_before = qkv[:, :, 40:].clone()
    out_q, out_k = rt.apply_rotary(q, k, None, spec, inplace=True, layout="bshd")
    assert out_q is q and torch.equal(q, expect_q) and torch.equal(k, expect_k)
    assert torch.equal(qkv[:, :, 40:], v_before)  # v untouched


def test_torch_compile_fullgraph():
    torch.manual_seed(7)
    spec = rotary.Spec.preset("llama-3.1-8b")

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 4 * 128 + 2 * 128)

        def forward(self, x, positions):
            qk = self.proj(x)
            q = qk[..., : 4 * 128].unflatten(-1, (4, 128))
            k = qk[..., 4 * 128:].unflatten(-1, (2, 128))
            q, k = rt.apply_rotary(q, k, positions, spec, layout="bshd")
            return (q.sum(-2) * k.sum(-2)).sum()

    model = Attention()
    x = torch.randn(2, 8, 64)
    positions = torch.arange(8).repeat(2, 1) + 100
    eager = model(x, positions)
    eager.backward()
    eager_grad = model.proj.weight.grad.clone()
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)  # inductor, the default backend
    out = compiled(x, positions)
    out.backward()
    # Inductor may reorder the sums around the op: float32 sums of ~10^3 terms, relative 1e-5.
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.proj.weight.grad, eager_grad, rtol=1e-5, atol=1e-5)
    # The op's own output is the kernel's, bit for bit, inside the compiled graph.
    q = torch.randn(2, 8, 4, 128)
    k = torch.randn(2, 8, 2, 128)
    compiled_op = torch.compile(lambda a, b: rt.apply_rotary(a, b, positions, spec, layout="bshd"), fullgraph=True)
    got, expect = compiled_op(q, k), rt.apply_rotary(q, k, positions, spec, layout="bshd")
    assert torch.equal(got[0], expect[0]) and torch.equal(got[1], expect[1])


def test_inplace_refuses_tensors_that_need_gradients():
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = torch.randn(1, 2, 2, 128, requires_grad=True)
    k = torch.randn(1, 2, 2, 128)
    with pytest.raises(rotary.RotaryError, match="inplace=True does not record gradients"):
        rt.apply_rotary(q, k, None, spec, inplace=True, layout="bshd")


def test_rotary_embedding_matches_hf_dynamic_growth_and_reset():
    import transformers  # required: a missing dependency fails, never skips
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=64,
                                      rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    hf, ours = LlamaRotaryEmbedding(config), rt.RotaryEmbedding(config)
    x = torch.randn(1, 4, 256)
    for length in (16, 200, 300, 16, 500):  # below, growth, growth, reset, growth
        position_ids = torch.arange(length)[None]
        expect, got = hf(x, position_ids), ours(x, position_ids)
        assert torch.equal(expect[0], got[0]) and torch.equal(expect[1], got[1]), length
    exact = rt.RotaryEmbedding(config, precision="exact")
    cos, _ = exact(x, torch.arange(500)[None])
    ref, _ = hf(x, torch.arange(500)[None])
    # HF's float32 angle p * inv_freq is off by up to ~p * 2^-23 rad: 500 * 1.2e-7 = 6e-5 here.
    assert (cos - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("mode", ["inplace", "out"])
def test_eager_writes_bump_the_version_so_autograd_refuses_a_changed_saved_tensor(mode):
    """Eager CPU calls without gradients skip the custom op (its dispatch costs more than a decode
    step's work); the tensors they write must still have their version bumped, so that a tensor
    another op saved for backward and rotary then changed is an autograd error, not a silently
    wrong gradient."""
    spec = rotary.Spec.preset("llama-3.1-8b")
    weight = torch.randn(1, 4, 3, 128, requires_grad=True)
    q = torch.randn(1, 4, 3, 128)
    k = torch.randn(1, 2, 3, 128)
    product = weight * q  # saves q for the gradient of weight
    before = q._version
    if mode == "inplace":
        rt.apply_rotary(q, k, None, spec, inplace=True)
    else:
        rt.apply_rotary(torch.randn(1, 4, 3, 128), k, None, spec, out=(q, torch.empty_like(k)))
    assert q._version > before
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        product.sum().backward()


def test_eager_fast_path_gives_the_custom_ops_bits():
    """The same call through the custom op (forced by a dispatch mode that changes nothing) and
    through the eager path: identical outputs, fresh, out= and in place."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    spec = rotary.Spec.preset("qwen3-8b")
    q = torch.randn(2, 4, 5, 128, dtype=torch.bfloat16)
    k = torch.randn(2, 2, 5, 128, dtype=torch.bfloat16)
    positions = torch.tensor([[3, 9, 27, 81, 243]]).expand(2, 5)
    eager = rt.apply_rotary(q, k, positions, spec)
    with Passthrough():
        through_op = rt.apply_rotary(q, k, positions, spec)
    assert torch.equal(eager[0], through_op[0]) and torch.equal(eager[1], through_op[1])
    assert not torch.equal(eager[0], q)  # it rotated


# ---- the eager call in one binding call (bind_torch_eager.cpp, torch_apply_eager) -------------------
def _through_op(fn):
    """fn() with a dispatch mode that changes nothing: apply_rotary then takes its custom op."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        return fn()


def _shape(layout, batch, seq, heads, dim=64):
    return {"bshd": (batch, seq, heads, dim), "bhsd": (batch, heads, seq, dim), "sbhd": (seq, batch, heads, dim)}[layout]


@pytest.mark.parametrize("seed", range(16))
def test_eager_binding_gives_the_custom_ops_bits_on_random_calls(seed):
    """Random dtypes, layouts, position forms ([batch, seq], [1, seq], [seq], None), strides
    (transposed views), k absent, Spec or Table, forward / backward, rotary_offset, fresh / out= /
    in place: the eager binding and the custom op write the same bits."""
    g = np.random.default_rng(seed)
    dtype = [torch.float32, torch.bfloat16, torch.float16, torch.float64][seed % 4]
    layout = ["bshd", "bhsd", "sbhd"][int(g.integers(3))]
    batch, seq = int(g.integers(1, 4)), int(g.integers(1, 6))
    spec = rotary.Spec.preset(["llama-3.1-8b", "phi-2", "gpt-j-6b", "deepseek-v2-lite"][int(g.integers(4))])
    dim = spec.head_dim
    source = rotary.Table(spec) if g.integers(3) == 0 else spec
    q = torch.randn(_shape(layout, batch, seq, 4, dim)).to(dtype)
    k = None if g.integers(4) == 0 else torch.randn(_shape(layout, batch, seq, 2, dim)).to(dtype)
    if g.integers(2):  # a strided q: the head axis and the token axis swapped in memory
        q = q.transpose(0, 1).contiguous().transpose(0, 1)
    form = int(g.integers(4))
    positions = [torch.from_numpy(g.integers(1, 3000, size=(batch, seq))),
                 torch.from_numpy(g.integers(1, 3000, size=(1, seq))),
                 torch.from_numpy(g.integers(1, 3000, size=(seq,))), None][form]
    kwargs = {"layout": layout, "direction": "backward" if g.integers(2) else "forward"}
    if g.integers(2) and spec.rotary_dim < dim:
        kwargs["rotary_offset"] = dim - spec.rotary_dim
    native = torch_ops._eager_table(source, None, None)
    assert rotary._rotary.torch_apply_eager(q, k, positions, native, layout, kwargs["direction"], False, None,
                                            kwargs.get("rotary_offset", 0), 0, None) is not None  # taken
    for mode in ("fresh", "out", "inplace"):
        def call():
            qq = q.clone()
            kk = None if k is None else k.clone()
            if mode == "out":
                out = (torch.full_like(q, 7.0), None if k is None else torch.full_like(k, 7.0))
                return rt.apply_rotary(q, k, positions, source, out=out, **kwargs)
            if mode == "inplace":
                return rt.apply_rotary(qq, kk, positions, source, inplace=True, **kwargs)
            return rt.apply_rotary(q, k, positions, source, **kwargs)
        eager, op = call(), _through_op(call)
        assert torch.equal(eager[0], op[0]), mode
        assert (eager[1] is None and op[1] is None) or torch.equal(eager[1], op[1]), mode
        assert not torch.equal(eager[0], q), mode  # it rotated
        if mode == "fresh":
            assert eager[0].is_contiguous()  # as the op's torch.empty(q.shape)


def test_eager_binding_declines_what_the_full_path_must_decide():
    """torch_apply_eager returns None (the full path runs) for every call it does not serve
    exactly: gradients to record, other position dtypes / shapes / strides, subclasses, THD,
    ints of other types, out= mismatches. Each case is first checked to be served when valid."""
    spec = rotary.Spec.preset("llama-3.1-8b")
    native = torch_ops._eager_table(spec, None, None)
    q, k = torch.randn(2, 4, 3, 128), torch.randn(2, 2, 3, 128)
    pos = torch.tensor([[1, 2, 3], [4, 5, 6]])

    def eager(q=q, k=k, pos=pos, layout="bhsd", direction="forward", inplace=False, out=None, offset=0, seq_len=None):
        return rotary._rotary.torch_apply_eager(q, k, pos, native, layout, direction, inplace, out, offset, 0, seq_len)

    assert eager() is not None and eager(out=(torch.empty_like(q), torch.empty_like(k))) is not None
    declined = {
        "requires_grad": dict(q=q.clone().requires_grad_()),
        "int32 positions": dict(pos=pos.int()),
        "strided positions": dict(pos=torch.tensor([[1, 4], [2, 5], [3, 6]]).t()),
        "transposed positions": dict(pos=pos.t().contiguous()),
        "subclass": dict(q=torch.nn.Parameter(q, requires_grad=False)),
        "thd": dict(layout="thd"),
        "unknown layout": dict(layout="BSHD"),
        "unknown direction": dict(direction="reverse"),
        "bool offset": dict(offset=True),
        "negative offset": dict(offset=-1),
        "numpy offset": dict(offset=np.int64(0)),
        "out and inplace": dict(out=(torch.empty_like(q), torch.empty_like(k)), inplace=True),
        "out of another dtype": dict(out=(torch.empty_like(q).double(), torch.empty_like(k))),
        "out of another shape": dict(out=(torch.empty(2, 4, 3, 64), torch.empty_like(k))),
        "out not a pair": dict(out=(torch.empty_like(q),)),
        "positions out of the table": dict(pos=torch.full((2, 3), 1 << 40)),
        "meta q": dict(q=torch.empty(2, 4, 3, 128, device="meta")),
    }
    for what, args in declined.items():
        assert eager(**args) is None, what


@pytest.mark.parametrize("case", ["positions past the table", "out of another shape", "negative position",
                                  "positions of the wrong shape", "float positions"])
def test_eager_calls_keep_the_full_paths_errors_and_write_nothing(case):
    spec = rotary.Spec.preset("llama-3.1-8b")
    q, k = torch.randn(2, 4, 3, 128), torch.randn(2, 2, 3, 128)
    out = (torch.full_like(q, 7.0), torch.full_like(k, 7.0))
    pos = torch.tensor([[1, 2, 3], [4, 5, 6]])
    args = {"positions past the table": (dict(positions=torch.full((2, 3), 1 << 40)), "positions"),
            "out of another shape": (dict(out=(torch.empty(2, 4, 3, 64), out[1])), "q_out must have shape"),
            "negative position": (dict(positions=torch.tensor([[1, 2, -3], [4, 5, 6]])), "positions"),
            "positions of the wrong shape": (dict(positions=pos.t().contiguous()), "positions has shape"),
            "float positions": (dict(positions=pos.float()), "must hold integers")}[case]
    kwargs = {"positions": pos, "out": out}
    kwargs.update(args[0])
    with pytest.raises(rotary.RotaryError, match=args[1]) as eager_error:
        rt.apply_rotary(q, k, kwargs.pop("positions"), spec, **kwargs)
    assert bool((out[0] == 7.0).all()) and bool((out[1] == 7.0).all())
    with pytest.raises(rotary.RotaryError) as full_error:
        torch_ops._apply_rotary_checked(q, k, args[0].get("positions", pos), spec, None, None, "bhsd", None, None,
                                            "forward", False, 0, 0, None, kwargs["out"], "auto")
    assert str(eager_error.value) == str(full_error.value)
