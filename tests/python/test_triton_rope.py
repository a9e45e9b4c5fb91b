"""rotary.torch's backend="triton" (python/rotary/_triton_rope.py, docs/gpu.md) on CPU tensors, in
Triton's interpreter (TRITON_INTERPRET=1): random calls against rotary's CPU kernel (the same
float32 cos/sin rows) and the float64 reference, in every layout, dtype, style, position source,
output mode, partial rotary and GQA; the backward; YaRN's attention scaling; the refusals.

Bounds (docs/numerics.md, "The SIMD kernels ... against the float64 reference"; u = 2^-24, C and S
the table's float32 values, M = |a*C| + |b*S| for an output pair from inputs (a, b)):
- float32 against the float64 reference: 2u*M + u*|ref| + 2^-50*M, as the CPU kernel;
- float32 against the CPU kernel: both are within 2u*M of the exact value before their last
  rounding, and either rounds a*C or not (FMA): |difference| <= u*|a*C| + u*|out1| + u*|out2|
  <= (1 + 2*sqrt(2)) * u * s * max(|a|, |b|) < 4u * s * max(|a|, |b|) (s: attention_scaling,
  |C|, |S| <= s; |out| <= sqrt(2) * s * max(|a|, |b|)), i.e. 2 float32 ulps relative;
- bfloat16 / float16: within one unit of the storage format of the CPU kernel's output, and
  2u*M + one unit of the reference.
The elements outside the rotated block are bitwise equal to the input.

The interpreter reads TRITON_INTERPRET when the kernel is defined (_triton_rope_kernel's import,
on the first launch), so the fixture below sets it before any launch and removes it afterwards:
importing triton or torch earlier (other test files) does not matter.

ROTARY_TEST_DEVICE=cuda runs the same tests on a GPU (scripts/gpu-check.sh): the triton calls get
CUDA copies of the inputs, without the interpreter, and their results come back to the CPU to be
compared with the CPU kernel and the float64 reference there.
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import rotary
import rotary.torch as rt

pytest.importorskip("triton", reason="triton is not installed (scripts/requirements.txt pins it): backend='triton' "
                                     "cannot run")

U = 2.0 ** -24
LLAMA = rotary.Spec.preset("llama-3.1-8b")
YARN = rotary.Spec.preset("qwen2.5-7b-yarn")
FORMAT_BITS = {torch.bfloat16: (7, 2.0 ** -133), torch.float16: (10, 2.0 ** -24)}
from triton_device import dev, interpreter  # noqa: E402,F401 (interpreter: the autouse fixture)


def triton(q, k, positions, spec, **kwargs):
    """apply_rotary(backend="triton") on DEVICE copies of every tensor argument; results on the CPU."""
    for key in ("offsets", "cu_seqlens"):
        if key in kwargs:
            kwargs[key] = dev(kwargs[key])
    got_q, got_k = rt.apply_rotary(dev(q), dev(k), dev(positions), spec, backend="triton", **kwargs)
    return got_q.cpu(), (None if got_k is None else got_k.cpu())


@pytest.fixture(autouse=True, scope="module")
def registry():
    # The first backend="triton" call registers "triton" in the device seam (_backends.py); later
    # test files (test_backends.py) expect the registry of a fresh import: "triton" leaves with
    # this module (the next call would register it again).
    yield
    from rotary import _backends
    _backends.unregister_backend("triton")


def layout_shape(layout, batch, seq, heads, dim):
    return {"bshd": (batch, seq, heads, dim), "bhsd": (batch, heads, seq, dim), "sbhd": (seq, batch, heads, dim),
            "thd": (batch * seq, heads, dim)}[layout]


def strided(shape, dtype, gen, kind):
    """A tensor of `shape` that is a view with other strides: every other head_dim element of a
    wider tensor, or the transpose of a tensor with its last two axes swapped."""
    if kind == "contiguous":
        return torch.randn(shape, generator=gen).to(dtype)
    if kind == "every other":
        return torch.randn(*shape[:-1], 2 * shape[-1], generator=gen).to(dtype)[..., ::2]
    swapped = shape[:-2] + (shape[-1], shape[-2])
    return torch.randn(swapped, generator=gen).to(dtype).transpose(-1, -2)


def pair_terms(x, rotary_offset, rotary_dim, style, scale):
    """float64 [...]: s * (|a| + |b|) and s * max(|a|, |b|) of each element's pair, 0 outside the block."""
    x = x.double().abs()
    block = x[..., rotary_offset:rotary_offset + rotary_dim]
    if style == "neox":
        partner = torch.cat([block[..., rotary_dim // 2:], block[..., :rotary_dim // 2]], -1)
    else:
        partner = block.reshape(*block.shape[:-1], rotary_dim // 2, 2).flip(-1).reshape(block.shape)
    total, most = torch.zeros_like(x), torch.zeros_like(x)
    total[..., rotary_offset:rotary_offset + rotary_dim] = scale * (block + partner)
    most[..., rotary_offset:rotary_offset + rotary_dim] = scale * torch.maximum(block, partner)
    return total, most


def format_unit(v, dtype):
    """One unit of the storage format at |v|: 2^(floor(log2 |v|) - p), at least the smallest subnormal."""
    p, smallest = FORMAT_BITS[dtype]
    v = v.abs().clamp_min(smallest)
    return torch.maximum(torch.exp2(torch.floor(torch.log2(v)) - p), torch.full_like(v, smallest))


def check_close(name, got, kernel, ref, x, rotary_offset, rotary_dim, style, scale):
    """got (triton) against kernel (the CPU kernel) and ref (float64), with the bounds above."""
    total, most = pair_terms(x, rotary_offset, rotary_dim, style, scale)
    rotated = total > 0
    g, c, r = got.double(), kernel.double(), ref
    # Outside the rotated block: copied (or left in place), bit for bit.
    assert torch.equal(got[~rotated], x[~rotated]), name
    if got.dtype == torch.float32:
        assert torch.all((g - c).abs() <= 4 * U * most), (name, float(((g - c).abs() / (most + 1e-300)).max()))
        bound = 2 * U * total + U * r.abs() + 2.0 ** -50 * total
    else:
        assert torch.all((g - c).abs() <= format_unit(torch.maximum(g.abs(), c.abs()), got.dtype)), name
        bound = 2 * U * total + format_unit(torch.maximum(g.abs(), r.abs()), got.dtype)
    assert torch.all((g - r).abs() <= bound), (name, float(((g - r).abs() - bound).max()))


def random_call(trial):
    """The arguments of one random apply_rotary call (small: the interpreter runs a program at a time)."""
    rng = np.random.default_rng(20261127 + trial)
    gen = torch.Generator().manual_seed(trial)
    layout = ["bshd", "bhsd", "sbhd", "thd"][trial % 4]
    dtype = [torch.float32, torch.bfloat16, torch.float16][trial % 3]
    style = ["neox", "gptj"][(trial // 4) % 2]
    head_dim = int(rng.choice([16, 32, 64]))
    rotary_dim = head_dim if trial % 3 == 0 else int(rng.choice([d for d in (8, 16, 32) if d < head_dim]))
    rotary_offset = int(rng.choice([0, head_dim - rotary_dim])) if trial % 5 == 1 else 0
    spec = (YARN if trial % 7 == 3 else LLAMA).replace(head_dim=head_dim, rotary_dim=rotary_dim)
    batch, seq = (1, int(rng.integers(1, 7))) if layout == "thd" else (int(rng.integers(1, 3)), int(rng.integers(1, 4)))
    heads_q = int(rng.choice([1, 2, 4]))
    heads_k = int(rng.choice([h for h in (1, 2, 4) if heads_q % h == 0]))  # GQA
    kind = ["contiguous", "every other", "transposed"][trial % 3]
    q = strided(layout_shape(layout, batch, seq, heads_q, head_dim), dtype, gen, kind)
    k = strided(layout_shape(layout, batch, seq, heads_k, head_dim), dtype, gen, kind)
    kwargs = dict(layout=layout, style=style, rotary_offset=rotary_offset)
    positions = None
    far = 100_000 if trial % 2 else 40
    source = trial % 3
    if layout == "thd":
        lengths = [seq] if seq < 3 else [seq - 2, 2]
        kwargs["cu_seqlens"] = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]))
        if source == 1:
            kwargs["offsets"] = torch.tensor(rng.integers(0, far, len(lengths)))
        elif source == 2:
            positions = torch.tensor(rng.integers(0, far, batch * seq))
    elif source == 1:
        kwargs["offsets"] = torch.tensor(rng.integers(0, far, batch))
    elif source == 2:
        positions = torch.tensor(rng.integers(0, far, (batch, seq)))
    return spec, q, k, positions, kwargs


@pytest.mark.parametrize("trial", range(30))
def test_random_calls_match_the_cpu_kernel_and_the_float64_reference(trial):
    spec, q, k, positions, kwargs = random_call(trial)
    mode = ["fresh", "inplace", "out"][(trial // 3) % 3]
    kernel_q, kernel_k = rt.apply_rotary(q, k, positions, spec, **kwargs)
    ref_q, ref_k = rt.apply_rotary(q.double(), k.double(), positions, spec, **kwargs)  # the float64 reference
    q_in, k_in = q.clone(), k.clone()
    q, k, positions = dev(q), dev(k), dev(positions)
    kwargs = {key: dev(value) if isinstance(value, torch.Tensor) else value for key, value in kwargs.items()}
    if mode == "fresh":
        got_q, got_k = rt.apply_rotary(q, k, positions, spec, backend="triton", **kwargs)
    elif mode == "inplace":
        got_q, got_k = rt.apply_rotary(q, k, positions, spec, backend="triton", inplace=True, **kwargs)
        assert got_q is q and got_k is k
    else:  # into strided outputs: the transposes of contiguous tensors
        out = tuple(torch.full(t.shape[:-2] + (t.shape[-1], t.shape[-2]), 7.0, dtype=t.dtype,
                               device=t.device).transpose(-1, -2) for t in (q, k))
        got_q, got_k = rt.apply_rotary(q, k, positions, spec, backend="triton", out=out, **kwargs)
        assert got_q is out[0] and got_k is out[1]
    if mode != "inplace":
        assert torch.equal(q.cpu(), q_in) and torch.equal(k.cpu(), k_in)  # the inputs are unchanged
    got_q, got_k = got_q.cpu(), got_k.cpu()
    scale = rotary.Table(spec).attention_scaling
    rotary_offset, rotary_dim = kwargs["rotary_offset"], spec.rotary_dim
    name = f"trial {trial}: {kwargs['layout']} {q.dtype} {kwargs['style']} {mode} {tuple(q.shape)}/{tuple(k.shape)}"
    check_close(name + " q", got_q, kernel_q, ref_q, q_in, rotary_offset, rotary_dim, kwargs["style"], scale)
    check_close(name + " k", got_k, kernel_k, ref_k, k_in, rotary_offset, rotary_dim, kwargs["style"], scale)


@pytest.mark.parametrize("block_h", [1, 2, 4, 8])
def test_every_launch_shape_covers_every_head(monkeypatch, block_h):
    # Heads per program (_triton_rope.LAUNCH, which the GPU check sweeps): 8 q heads and 2 k heads
    # in blocks of 1, 2, 4 or 8 (k's partial blocks masked), each head rotated exactly once.
    from rotary import _triton_rope
    monkeypatch.setitem(_triton_rope.LAUNCH, "block_h", block_h)
    gen = torch.Generator().manual_seed(12 + block_h)
    q, k = torch.randn(2, 3, 8, 32, generator=gen), torch.randn(2, 3, 2, 32, generator=gen)
    positions = torch.randint(0, 100_000, (2, 3), generator=gen)
    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    got_q, got_k = triton(q, k, positions, spec, layout="bshd")
    kernel_q, kernel_k = rt.apply_rotary(q, k, positions, spec, layout="bshd")
    ref_q, ref_k = rt.apply_rotary(q.double(), k.double(), positions, spec, layout="bshd")
    check_close(f"block_h {block_h} q", got_q, kernel_q, ref_q, q, 0, 32, "neox", 1.0)
    check_close(f"block_h {block_h} k", got_k, kernel_k, ref_k, k, 0, 32, "neox", 1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_formats_round_to_nearest_even_as_the_cpu_kernel(dtype):
    # One unit apart is the bound, but both round the same float32 values (to within an ulp) to
    # nearest, ties to even: all but a few of the outputs are the CPU kernel's bits. Truncation,
    # what Triton 3.9's interpreter does for a plain float32 -> bfloat16 .to(), differs in about half.
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 2, 64, generator=gen).to(dtype)
    positions = torch.randint(0, 100_000, (2, 4), generator=gen)
    spec = LLAMA.replace(head_dim=64, rotary_dim=64)
    got, _ = triton(q, None, positions, spec, layout="bshd")
    kernel, _ = rt.apply_rotary(q, None, positions, spec, layout="bshd")
    same = float((got.view(torch.int16) == kernel.view(torch.int16)).double().mean())
    assert same >= 0.99, same


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nan_and_infinity_propagate_as_in_the_cpu_kernel(dtype):
    # IEEE arithmetic, as the C++ kernel and the float64 reference do: a NaN stays NaN, an infinity
    # times sin 0 (position 0) is NaN, an infinity elsewhere gives infinities and NaN in its pair.
    # Never a finite value where the kernel has none, and the finite rest within float32 rounding.
    gen = torch.Generator().manual_seed(11)
    q = torch.randn(1, 4, 2, 32, generator=gen)
    q[0, 0, 0, 3] = float("inf")   # position 0
    q[0, 1, 0, 5] = float("nan")
    q[0, 2, 1, 20] = float("-inf")
    q[0, 3, 0, 0] = float("inf")
    q = q.to(dtype)
    positions = torch.tensor([[0, 7, 300, 99_999]])
    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    got, _ = triton(q, None, positions, spec, layout="bshd")
    kernel, _ = rt.apply_rotary(q, None, positions, spec, layout="bshd")
    assert int(kernel.isnan().sum()) >= 3 and int(kernel.isinf().sum()) >= 2  # the case is not vacuous
    assert torch.equal(got.isnan(), kernel.isnan())
    assert torch.equal(got.isinf(), kernel.isinf())
    assert torch.equal(got[got.isinf()], kernel[kernel.isinf()])
    finite = kernel.isfinite()
    unit = 2.0 ** -23 if dtype == torch.float32 else 2.0 ** -7
    bound = 4 * unit * q.float().nan_to_num(0, 0, 0).abs().amax(-1, keepdim=True).expand_as(q)  # finite elements only
    assert bool(((got.float() - kernel.float()).abs()[finite] <= bound[finite]).all())


def test_yarn_attention_scaling_is_in_the_rows():
    # YaRN multiplies cos and sin by its attention factor (0.1 ln s + 1 = 1.1386 for s = 4); a
    # rotation alone keeps each pair's length, so the output's pairs are that much longer.
    spec = YARN.replace(head_dim=32, rotary_dim=32)
    scale = rotary.Table(spec).attention_scaling
    assert scale == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-6)
    q = torch.randn(1, 3, 2, 32, generator=torch.Generator().manual_seed(5))
    positions = torch.tensor([[0, 5000, 30000]])
    got, _ = triton(q, None, positions, spec, layout="bshd")
    kernel, _ = rt.apply_rotary(q, None, positions, spec, layout="bshd")
    ref, _ = rt.apply_rotary(q.double(), None, positions, spec, layout="bshd")
    check_close("yarn", got, kernel, ref, q, 0, 32, "neox", scale)
    length = lambda x: x[..., :16].double().hypot(x[..., 16:].double())  # noqa: E731 (each pair's length)
    assert torch.allclose(length(got), scale * length(q), rtol=3e-7, atol=0)


def test_dynamic_ntk_reads_the_table_of_each_calls_seq_len():
    # Dynamic NTK has one table per seq_len past max_position_embeddings (64 here): the device
    # rows are kept per table, so a later call with other frequencies never reads stale rows.
    spec = rotary.Spec.from_json('{"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, '
                                 '"max_position_embeddings": 64, "rope_theta": 10000.0, '
                                 '"rope_scaling": {"type": "dynamic", "factor": 4.0}}')
    q = torch.randn(1, 3, 1, 32, generator=torch.Generator().manual_seed(8))
    for last in (40, 300, 5000, 40):
        positions = torch.tensor([[0, 17, last]])
        got, _ = triton(q, None, positions, spec, layout="bshd")
        kernel, _ = rt.apply_rotary(q, None, positions, spec, layout="bshd")
        ref, _ = rt.apply_rotary(q.double(), None, positions, spec, layout="bshd")
        check_close(f"dynamic {last}", got, kernel, ref, q, 0, 32, "neox", 1.0)
    stale, _ = rt.apply_rotary(q, None, torch.tensor([[0, 17, 40]]), spec, layout="bshd", seq_len=5001)
    assert float((stale - got).abs().max()) > 1e-3  # the seq_lens' tables differ: the test can fail


def test_backward_is_the_triton_rotation_by_minus_angle(monkeypatch):
    from rotary import _triton_rope
    launches = []
    launch = _triton_rope.launch
    monkeypatch.setattr(_triton_rope, "launch", lambda *args: launches.append(args[7]) or launch(*args))
    gen = torch.Generator().manual_seed(11)
    q = dev(torch.randn(2, 3, 4, 32, generator=gen)).requires_grad_()
    k = dev(torch.randn(2, 3, 2, 32, generator=gen)).requires_grad_()
    positions = torch.tensor([[3, 99_999, 7], [0, 1, 2]])
    spec = LLAMA.replace(head_dim=32, rotary_dim=16)
    out_q, out_k = rt.apply_rotary(q, k, dev(positions), spec, layout="bshd", style="gptj", backend="triton")
    gq, gk = torch.randn(out_q.shape, generator=gen), torch.randn(out_k.shape, generator=gen)
    (out_q * dev(gq)).sum().add((out_k * dev(gk)).sum()).backward()
    assert launches == ["forward", "backward"]  # one launch each way: the backward is the triton kernel
    # The gradient is the rotation of the gradient by -angle: the same kernel's direction="backward".
    want_q, want_k = triton(gq, gk, positions, spec, layout="bshd", style="gptj", direction="backward")
    assert torch.equal(q.grad.cpu(), want_q) and torch.equal(k.grad.cpu(), want_k)
    kernel_q, _ = rt.apply_rotary(gq, gk, positions, spec, layout="bshd", style="gptj", direction="backward")
    ref_q, _ = rt.apply_rotary(gq.double(), None, positions, spec, layout="bshd", style="gptj", direction="backward")
    check_close("backward", q.grad.cpu(), kernel_q, ref_q, gq, 0, 16, "gptj", 1.0)
    # And it undoes the forward rotation (to float32 rounding).
    back, _ = triton(out_q.detach(), None, positions, spec, layout="bshd", style="gptj", direction="backward")
    q = q.detach().cpu()
    assert torch.allclose(back, q, rtol=0, atol=8 * U * float(q.abs().max()))


def test_refusals_name_the_argument():
    q = dev(torch.randn(1, 2, 2, 32))
    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    with pytest.raises(rotary.RotaryError) as error:
        rt.apply_rotary(q.double(), None, None, spec, layout="bshd", backend="triton")
    assert str(error.value) == ("backend 'triton' takes float32, bfloat16 or float16 tensors (got q of dtype "
                                "torch.float64); backend 'auto' runs float64 through the float64 reference")
    # The C++ checks run first, with the messages every backend gives.
    for backend in ("auto", "triton"):
        with pytest.raises(rotary.RotaryError, match=r"q head_dim must be >= options.rotary_offset \+ rotary_dim = "
                                                     r"0 \+ 128 \(got 32\)"):
            rt.apply_rotary(q, None, None, LLAMA, layout="bshd", backend=backend)
        with pytest.raises(rotary.RotaryError, match=r"positions"):
            rt.apply_rotary(q, None, dev(torch.tensor([[0, -1]])), spec, layout="bshd", backend=backend)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(rotary.RotaryError) as error:
        rt.apply_rotary(torch.randn(1, 2, 2, 32), None, None, LLAMA.replace(head_dim=32, rotary_dim=32),
                        layout="bshd", backend="triton")
    assert str(error.value) == ("backend 'triton' runs on cpu tensors only under Triton's interpreter: set "
                                "TRITON_INTERPRET=1 before the first triton call (got q on cpu without it); backend "
                                "'auto' runs rotary's CPU kernels")


def test_importing_rotary_and_other_backends_never_load_triton():
    code = ("import sys, torch, rotary, rotary.torch as rt\n"
            "q = torch.randn(1, 2, 2, 128)\n"
            "rt.apply_rotary(q, q.clone(), None, rotary.Spec.preset('llama-3.1-8b'), layout='bshd')\n"
            "rt.apply_rotary(q, q.clone(), None, rotary.Spec.preset('llama-3.1-8b'), layout='bshd', backend='torch')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'triton' or m.startswith('rotary._triton')))\n")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_custom_ops_compute_what_the_eager_launch_computes():
    # An eager call without gradients launches directly (no custom op dispatch); torch.compile,
    # dispatch modes and autograd go through the ops rotary::apply_rotary_triton(_, _out). Both
    # paths, each output mode: the same bits.
    from rotary import _triton_rope
    gen = torch.Generator().manual_seed(21)
    q, k = dev(torch.randn(2, 5, 8, 64, generator=gen)), dev(torch.randn(2, 5, 2, 64, generator=gen))
    positions = dev(torch.randint(0, 100_000, (2, 5), generator=gen))
    spec = LLAMA.replace(head_dim=64, rotary_dim=64)
    want_q, want_k = rt.apply_rotary(q, k, positions, spec, layout="bshd", backend="triton")
    rest = (positions, None, None, spec._handle, "", "", -1, "bshd", "forward", 0, 0)
    got_q, got_k = _triton_rope.apply_rotary(q, k, *rest, False, None)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    out = (torch.empty_like(q), torch.empty_like(k))
    _triton_rope.apply_rotary(q, k, *rest, False, out)
    assert torch.equal(out[0], want_q) and torch.equal(out[1], want_k)
    q2, k2 = q.clone(), k.clone()
    _triton_rope.apply_rotary(q2, k2, *rest, True, None)
    assert torch.equal(q2, want_q) and torch.equal(k2, want_k)


def test_positions_reach_the_device_once_per_distinct_value_set():
    # The layers of a forward step pass the same positions: one device copy serves them all (kept
    # by value, compared in full), and other positions of the same shape get their own copy.
    from rotary import _triton_rope
    _triton_rope._POSITIONS.clear()
    gen = torch.Generator().manual_seed(22)
    q = torch.randn(1, 4, 8, 32, generator=gen)
    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    first, second = torch.tensor([[5, 9, 70_000, 3]]), torch.tensor([[5, 9, 70_001, 3]])
    for _ in range(3):
        triton(q, None, first, spec, layout="bshd")
    assert len(_triton_rope._POSITIONS) == 1
    got, _ = triton(q, None, second, spec, layout="bshd")
    assert len(_triton_rope._POSITIONS) == 2
    kernel, _ = rt.apply_rotary(q, None, second, spec, layout="bshd")
    ref, _ = rt.apply_rotary(q.double(), None, second, spec, layout="bshd")
    check_close("second positions", got, kernel, ref, q, 0, 32, "neox", 1.0)
    triton(q, None, None, spec, layout="bshd")  # 0, 1, 2, 3: computed by the kernel, nothing copied
    assert len(_triton_rope._POSITIONS) == 2


def test_cuda_calls_choose_triton_where_it_computes_them():
    # backend="auto" on a CUDA tensor: the Triton kernel for float32 / bfloat16 / float16 and
    # one position stream without xPos; the pure-torch backend for the rest (float64, M-RoPE).
    from rotary._torch_ops import triton_serves
    q = torch.empty(1, 2, 2, 32)
    assert triton_serves(q, q, LLAMA) and triton_serves(q.half(), None, rotary.Table(LLAMA))
    assert not triton_serves(q.double(), None, LLAMA)
    assert not triton_serves(q, q.double(), LLAMA)
    mrope = rotary.Spec.preset("qwen2-vl-7b")
    assert mrope.position_streams == 3 and not triton_serves(q, q, mrope)


def test_torch_compile_keeps_the_triton_op_as_one_node():
    # Under torch.compile the call goes through the custom op (not the eager launch): fullgraph,
    # one rotary::apply_rotary_triton node in the graph, and the eager call's bits. Autograd too.
    graphs = []

    def backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    gen = torch.Generator().manual_seed(23)
    q, k = dev(torch.randn(1, 6, 8, 32, generator=gen)), dev(torch.randn(1, 6, 2, 32, generator=gen))
    positions = dev(torch.randint(0, 100_000, (1, 6), generator=gen))

    def rotate(q, k, positions):
        return rt.apply_rotary(q, k, positions, spec, layout="bshd", backend="triton")

    from rotary import _backends
    _backends.unregister_backend("triton")  # a first call that is traced registers it where the op runs
    torch._dynamo.reset()
    compiled = torch.compile(rotate, fullgraph=True, backend=backend)
    got = compiled(q, k, positions)
    want = rotate(q, k, positions)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    ops = [str(node.target) for g in graphs for node in g.graph.nodes if node.op == "call_function"]
    assert sum("apply_rotary_triton" in op for op in ops) == 1, ops
    # The backward through the compiled call is the kernel's rotation by -angle.
    qg = q.clone().requires_grad_()
    out_q, _ = compiled(qg, k, positions)
    grad = dev(torch.randn(out_q.shape, generator=gen))
    out_q.backward(grad)
    want_grad, _ = rt.apply_rotary(grad, None, positions, spec, layout="bshd", direction="backward",
                                   backend="triton")
    assert torch.equal(qg.grad, want_grad)
