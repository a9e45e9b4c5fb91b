"""rotary._triton_attention (attention with fused RoPE in one Triton launch, docs/gpu.md,
"Attention") on CPU tensors in Triton's interpreter (TRITON_INTERPRET=1): random small calls
against a float64 reference and against rotary.torch.attention's CPU kernels, and the refusals.

The reference: q, k, v widened to float64 (exact), q and k rotated by rt.apply_rotary in float64
at their positions, s = q.k * scale (cap * tanh(s / cap) with softcap), the mask, softmax, times v;
a query that sees no key gets zeros and log-sum-exp -inf.

Bounds (docs/attention.md, "Error analysis", whose steps the kernel follows; u = 2^-24). For a
query with n visible keys, A_j = scale * sum_e |q~_e| |k~_e| (q~, k~: |x| without RoPE, and
s_att * (|a| + |b|) >= |a||C| + |b||S| for a rotated pair (a, b), s_att the table's attention
scaling, |C|, |S| <= s_att):
1. scores: the rotation 2u (|a||C| + |b||S|) per element for q and for k, the scale's product u,
   the float32 dot product of d terms gamma_d: |s^ - s| <= E = (d + 6) u max_j A_j with exact
   float32 products (the kernel's dot precision "ieee"). "tf32x3" splits each operand into two
   TF32 numbers (11 significant bits each: the remainder within 2^-22 of the value) and drops the
   product of the low parts: each product within 3 * 2^-22 = 12u, three sums of d products each,
   which a GPU's tensor cores may truncate (2u per addition): E = (6d + 20) u max_j A_j.
   "storage" (bfloat16 / float16 operands, unit roundoff u_s = 2^-8 / 2^-11): rotated q and k
   round once each (unrotated ones are exact), E = ((2d + 6) u + 2 u_s + u_s^2) max_j A_j.
   Soft-capping:
   tanh' <= 1 passes E through; s / cap rounds (u |s|), the tanh from exp is within 4u absolutely,
   the product by cap rounds (u cap): E += u max_j |s_j| + 5u cap.
2. weights: exp's argument s - m rounds (u |s - m| <= 104u where exp is not 0) and exp itself
   (1 ulp in the interpreter's NumPy; a GPU's ex2.approx of (s - m) log2 e: its own 2 ulps and
   the product's u |s - m|): eta = E + 220u relative per weight, moving the output by
   <= Vbar 2 eta (1 + 2 eta), Vbar = max over visible j of |v_je|.
3. sums: l and o are float32 sums of n terms and a rescale per key tile, and with the keys split
   among programs one more per split in the merge: acc = (n + 4 (tiles + splits) + 4) u each,
   2 acc Vbar together.
   "storage" also rounds each weight to the storage type before P.V (not in l): the output
   moves by <= u_s Vbar more.
4. storage: float32 out u |ref|; bfloat16 / float16: one unit of the format at max(|got|, |ref|)
   (the kernel rounds once, half a unit; the allowance holds either side of a boundary).
tolerance_e = Vbar_e (2 eta (1 + 2 eta) + 2 acc) + storage.
log-sum-exp: m + log(l) = log sum_j exp(s^_j) (1 + delta_j) with |delta_j| <= eta, l's sum acc,
and the final log and sum round: |lse^ - lse| <= 2 eta + 2 acc + 4u (|lse| + 2 log(n + 1)).
Against rotary.torch.attention's CPU kernels (the same float32 table rows, no soft-capping): both
within their bound of the reference, so within twice this tolerance of each other.

The interpreter reads TRITON_INTERPRET when the kernel is defined (its first launch), so the
fixture sets it before any launch. ROTARY_TEST_DEVICE=cuda runs the same tests on a GPU: the
triton calls get CUDA copies of the inputs and their results come back to the CPU.
"""
import math

import pytest
import torch

import rotary
import rotary.torch as rt

pytest.importorskip("triton", reason="triton is not installed (scripts/requirements.txt pins it)")

U = 2.0 ** -24
LLAMA = rotary.Spec.preset("llama-3.1-8b")
YARN = rotary.Spec.preset("qwen2.5-7b-yarn")
FORMAT_BITS = {torch.bfloat16: (7, 2.0 ** -133), torch.float16: (10, 2.0 ** -24)}
from triton_device import DEVICE, dev, interpreter  # noqa: E402,F401 (interpreter: the autouse fixture)
TILE = 16  # the interpreter's key tile (the GPU's is larger: fewer tiles, inside the same bound)


ROPE_TERMS = ("q_positions", "k_positions", "rotary_offset", "precision", "seq_len")


def with_rope(spec, kwargs, move=lambda t: t):
    """kwargs with spec and its fused-RoPE terms grouped as rope=rotary.FusedRope(...), positions
    through move; kwargs without them when spec is None (then no term may be set)."""
    rest = {key: value for key, value in kwargs.items() if key not in ROPE_TERMS}
    terms = {key: kwargs[key] for key in ROPE_TERMS if kwargs.get(key) is not None}
    if spec is None:
        assert not terms, f"fused-RoPE terms without a spec: {terms}"
        return rest
    for key in ("q_positions", "k_positions"):
        if key in terms:
            terms[key] = move(terms[key])
    return dict(rest, rope=rotary.FusedRope(spec, **terms))


def triton_attention(q, k, v, spec=None, **kwargs):
    """rotary._triton_attention.attention on DEVICE copies, fused RoPE by spec (None: none) and
    the terms in kwargs; (out, lse) on the CPU."""
    from rotary._triton_attention import attention
    out, lse = attention(dev(q), dev(k), dev(v), return_lse=True, **with_rope(spec, kwargs, dev))
    return out.cpu(), lse.cpu()


def visible_mask(q_len, kv_len, causal, window, query_offset):
    p = query_offset + torch.arange(q_len)[:, None]
    j = torch.arange(kv_len)[None, :]
    visible = torch.ones(q_len, kv_len, dtype=torch.bool)
    if causal:
        visible &= j <= p
    if window > 0:
        visible &= p - j < window
    return visible


def magnitudes(x, spec, s_att):
    """|x|, with each rotated element replaced by s_att * (|a| + |b|) of its pair (float64)."""
    x = x.abs()
    if spec is None:
        return x
    r = spec.rotary_dim
    block = x[..., :r]
    if spec.style == "neox":
        partner = torch.cat([block[..., r // 2:], block[..., :r // 2]], -1)
    else:
        partner = block.reshape(*block.shape[:-1], r // 2, 2).flip(-1).reshape(block.shape)
    return torch.cat([s_att * (block + partner), x[..., r:]], -1)


def dot_precision(dtype):
    """The kernel's dot precision for dtype (rotary._triton_attention.DOT; float32 "storage" is
    "ieee")."""
    from rotary._triton_attention import DOT
    mode = DOT[dtype]
    return "ieee" if mode == "storage" and dtype == torch.float32 else mode


def reference(q, k, v, *, causal=False, window=0, scale=None, spec=None, query_offset=0, softcap=None,
              q_positions=None, k_positions=None, precision=None, seq_len=None, splits=1):
    """float64 (out, lse, tolerance of out, tolerance of lse) for bhsd q, k, v, with the bound of
    the kernel's dot precision for q's dtype and `splits` key splits."""
    mode = dot_precision(q.dtype)
    u_s = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}.get(q.dtype, 0.0) if mode == "storage" else 0.0
    rotated = spec is not None
    q, k, v = q.double(), k.double(), v.double()
    batch, heads, q_len, d = q.shape
    kv_len, group = k.shape[2], heads // k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s_att = 1.0
    if spec is not None:
        qp = q_positions if q_positions is not None else (query_offset + torch.arange(q_len)).expand(batch, q_len)
        kp = k_positions if k_positions is not None else torch.arange(kv_len).expand(batch, kv_len)
        qr, _ = rt.apply_rotary(q, None, qp.contiguous(), spec, layout="bhsd", precision=precision, seq_len=seq_len)
        kr, _ = rt.apply_rotary(k, None, kp.contiguous(), spec, layout="bhsd", precision=precision, seq_len=seq_len)
        table = spec if isinstance(spec, rotary.Table) else rotary.Table(spec)
        s_att = float(table.rows([0])[0][0, 0])  # cos 0 times the attention scaling
        spec = table.spec
    else:
        qr, kr = q, k
    kr, kv_, k_abs = (t.repeat_interleave(group, 1) for t in (kr, v, magnitudes(k, spec, s_att)))
    s = torch.einsum("bhid,bhjd->bhij", qr, kr) * scale
    a = torch.einsum("bhid,bhjd->bhij", magnitudes(q, spec, s_att), k_abs) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    visible = visible_mask(q_len, kv_len, causal, window, query_offset).expand(batch, heads, q_len, kv_len)
    s_masked = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s_masked, -1)
    weights = torch.exp(s_masked - lse[..., None]).nan_to_num(0.0)  # rows without a key: 0
    out = weights @ kv_
    n = visible.sum(-1).double()
    a_max = a.masked_fill(~visible, 0).amax(-1)
    if mode == "ieee":
        e = (d + 6) * U * a_max
    elif mode == "tf32x3":
        e = (6 * d + 20) * U * a_max
    else:
        e = ((2 * d + 6) * U + (2 * u_s + u_s * u_s if rotated else 0.0)) * a_max
    if softcap is not None:
        e = e + U * s.abs().masked_fill(~visible, 0).amax(-1) + 5 * U * softcap
    eta = e + 220 * U
    acc = (n + 4 * (math.ceil(kv_len / TILE) + 1 + splits) + 4) * U
    vbar = (visible[..., None] * kv_.abs()[:, :, None, :, :]).amax(-2)
    tol = vbar * (2 * eta * (1 + 2 * eta) + 2 * acc + u_s)[..., None]
    tol_lse = 2 * eta + 2 * acc + 4 * U * (lse.abs().nan_to_num(0.0, 0.0, 0.0) + 2 * torch.log(n + 1))
    return out, lse, tol, tol_lse


def storage(got, ref, dtype):
    """The storage allowance of step 4."""
    if dtype == torch.float32:
        return U * ref.abs()
    p, smallest = FORMAT_BITS[dtype]
    m = torch.maximum(got.double().abs(), ref.abs()).clamp_min(smallest)
    return torch.exp2(torch.floor(torch.log2(m)) - p).clamp_min(smallest)


def check(name, got, lse, ref, ref_lse, tol, tol_lse, dtype):
    got64 = got.double()
    bound = tol + storage(got, ref, dtype)
    err = (got64 - ref).abs()
    ratio = torch.where(err == 0, torch.zeros_like(err), err / bound)  # 0 / 0: a row without keys
    worst = float(ratio.max()) if err.numel() else 0.0
    assert worst <= 1.0, f"{name}: |triton - ref| / bound = {worst}"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty) and bool((lse[empty] < 0).all()), f"{name}: lse of empty rows"
    assert torch.all(got64[empty] == 0), f"{name}: a row without keys is not zeros"
    lse_err = (lse.double() - ref_lse)[~empty].abs()
    assert bool((lse_err <= tol_lse[~empty]).all()), f"{name}: lse off by {float(lse_err.max())}"
    return worst


def random_call(seed):
    gen = torch.Generator().manual_seed(seed)
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=gen))]  # noqa: E731
    d = pick((16, 32, 64))
    kv_heads = pick((1, 2))
    heads = kv_heads * pick((1, 2, 3))
    batch = pick((1, 2))
    q_len, kv_len = (int(x) for x in torch.randint(1, 41, (2,), generator=gen))
    dtype = pick((torch.float32, torch.bfloat16, torch.float16))
    mask = pick(("none", "causal", "window", "causal window"))
    causal = "causal" in mask
    window = int(torch.randint(1, 12, (1,), generator=gen)) if "window" in mask else 0
    query_offset = int(torch.randint(0, max(1, kv_len - q_len + 3), (1,), generator=gen)) if causal or window else 0
    spec = pick((None, LLAMA, YARN))
    if spec is not None:
        spec = spec.replace(head_dim=d, rotary_dim=pick((d, d // 2)), style=pick(("neox", "gptj")),
                            num_attention_heads=heads, num_key_value_heads=kv_heads)
    kwargs = dict(causal=causal, window=window, query_offset=query_offset, spec=spec,
                  scale=pick((None, 0.3)), softcap=pick((None, None, 5.0)))
    if spec is not None and pick((False, True)):  # far positions (the masks stay on indices)
        base = int(torch.randint(0, 100_000 - 80, (1,), generator=gen))
        kwargs["q_positions"] = base + query_offset + torch.arange(q_len).expand(batch, q_len)
        kwargs["k_positions"] = base + torch.arange(kv_len).expand(batch, kv_len)
    q = torch.randn(batch, heads, q_len, d, generator=gen).to(dtype)
    k = torch.randn(batch, kv_heads, kv_len, d, generator=gen).to(dtype)
    v = torch.randn(batch, kv_heads, kv_len, d, generator=gen).to(dtype)
    return q, k, v, kwargs


@pytest.mark.parametrize("seed", range(36))
def test_random_calls_against_the_float64_reference_and_the_cpu_kernels(seed):
    q, k, v, kwargs = random_call(seed)
    spec = kwargs.pop("spec")
    ref, ref_lse, tol, tol_lse = reference(q, k, v, spec=spec, **kwargs)
    got, lse = triton_attention(q, k, v, spec, **kwargs)
    assert got.dtype == q.dtype and got.shape == ref.shape and lse.dtype == torch.float32
    check(f"seed {seed} {kwargs}", got, lse, ref, ref_lse, tol, tol_lse, q.dtype)
    if kwargs["softcap"] is None:  # rotary.torch.attention has no soft-capping
        cpu_kwargs = {key: value for key, value in kwargs.items() if key != "softcap"}
        cpu = rt.attention(q, k, v, **with_rope(spec, cpu_kwargs))
        both = 2 * (tol + storage(got, ref, q.dtype))
        assert bool(((got.double() - cpu.double()).abs() <= both).all()), f"seed {seed}: against the CPU kernels"


def set_launch(monkeypatch, *, dot=None, splits=None):
    """The kernel's dot precision for every dtype and its key splits, for one test (both launch
    tables: the interpreter's and the GPU's)."""
    from rotary import _triton_attention
    if dot is not None:
        for dtype in list(_triton_attention.DOT):
            monkeypatch.setitem(_triton_attention.DOT, dtype, dot)
    if splits is not None:
        monkeypatch.setitem(_triton_attention.INTERPRETER_LAUNCH, "splits", splits)
        monkeypatch.setitem(_triton_attention.LAUNCH, "splits", splits)


@pytest.mark.parametrize("dot", ["ieee", "storage"])
@pytest.mark.parametrize("seed", range(36, 48))
def test_each_dot_precision_within_its_bound(seed, dot, monkeypatch):
    # The default precision ("tf32x3") is the test above's; these are the other two, on calls whose
    # dtype the random pick makes bfloat16 or float16 (storage rounding) as often as float32.
    set_launch(monkeypatch, dot=dot)
    q, k, v, kwargs = random_call(seed)
    spec = kwargs.pop("spec")
    ref, ref_lse, tol, tol_lse = reference(q, k, v, spec=spec, **kwargs)
    got, lse = triton_attention(q, k, v, spec, **kwargs)
    check(f"seed {seed} dot {dot} {kwargs}", got, lse, ref, ref_lse, tol, tol_lse, q.dtype)


def test_storage_precision_rounds_rotated_operands():
    # Not vacuous: with fused RoPE in bfloat16, "storage" rounds the rotated q and k and the
    # weights, so its output differs from "ieee"'s, by less than the storage bound's extra terms.
    gen = torch.Generator().manual_seed(44)
    q, k, v = (torch.randn(1, 2, 24, 32, generator=gen).to(torch.bfloat16) for _ in range(3))
    spec = LLAMA.replace(head_dim=32, rotary_dim=32, num_attention_heads=2, num_key_value_heads=2)
    from rotary import _triton_attention
    outs = {}
    for dot in ("ieee", "storage"):
        saved = _triton_attention.DOT[torch.bfloat16]
        _triton_attention.DOT[torch.bfloat16] = dot
        try:
            outs[dot], _ = triton_attention(q, k, v, spec, causal=True)
        finally:
            _triton_attention.DOT[torch.bfloat16] = saved
    assert not torch.equal(outs["ieee"], outs["storage"])


@pytest.mark.parametrize("seed", range(48, 60))
def test_key_splits_merge_within_the_bound(seed, monkeypatch):
    # Three key splits (Flash-Decoding) merged by the combine kernel, on the random calls; and the
    # decode shape that packs a GQA group's heads into one tile (one query, four q heads a kv head).
    set_launch(monkeypatch, splits=3)
    q, k, v, kwargs = random_call(seed)
    spec = kwargs.pop("spec")
    ref, ref_lse, tol, tol_lse = reference(q, k, v, spec=spec, splits=3, **kwargs)
    got, lse = triton_attention(q, k, v, spec, **kwargs)
    check(f"seed {seed} splits 3 {kwargs}", got, lse, ref, ref_lse, tol, tol_lse, q.dtype)


@pytest.mark.parametrize("splits", [1, 4])
def test_decode_packs_the_gqa_group(splits, monkeypatch):
    # One and three queries per q head, four q heads per kv head: the tile's rows span q heads
    # (rows g * q_len + i), each with its own causal edge.
    set_launch(monkeypatch, splits=splits)
    gen = torch.Generator().manual_seed(45)
    spec = LLAMA.replace(head_dim=32, rotary_dim=32, num_attention_heads=8, num_key_value_heads=2)
    for q_len in (1, 3):
        q = torch.randn(2, 8, q_len, 32, generator=gen)
        k, v = (torch.randn(2, 2, 70, 32, generator=gen) for _ in range(2))
        kwargs = dict(causal=True, query_offset=70 - q_len)
        ref, ref_lse, tol, tol_lse = reference(q, k, v, spec=spec, splits=splits, **kwargs)
        got, lse = triton_attention(q, k, v, spec, **kwargs)
        check(f"decode q_len {q_len} splits {splits}", got, lse, ref, ref_lse, tol, tol_lse, q.dtype)


H100_SHARED_MEMORY = 232448  # bytes a block may use on sm_90 (H100, H200): Triton's "Hardware limit"


def test_the_kernel_compiles_for_sm90_and_fits_its_shared_memory():
    # The interpreter runs a kernel as Python: a jitted function reading a plain global, or a
    # launch too big for a GPU's shared memory, shows only when it is compiled. Triton's CUDA
    # backend compiles for sm_90 without a GPU (scripts/triton_compile_check.py, in a process of
    # its own: this one's kernels are interpreted). Every dot precision, with fused RoPE, at the
    # default launch.
    import json
    import os
    import subprocess
    import sys
    try:
        from triton.backends import backends
    except ImportError:
        backends = {}
    if "nvidia" not in backends:
        pytest.skip("this triton has no CUDA backend")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "triton_compile_check.py")
    run = subprocess.run([sys.executable, script, "--quick"], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert 0 < row["shared"] <= H100_SHARED_MEMORY, row


@pytest.mark.parametrize("source", ["hf precision", "table", "dynamic ntk"])
def test_precision_tables_and_seq_len_reach_the_rows(source, monkeypatch):
    # The table a call resolves: precision "hf", a Table passed as it is, and a dynamic-NTK spec at
    # the given seq_len (past its trained 64 positions, so the frequencies differ from seq_len 64).
    # Exact float32 products: the tightest bound, which tells the tables' rows apart.
    set_launch(monkeypatch, dot="ieee")
    gen = torch.Generator().manual_seed(43)
    q, k, v = (torch.randn(1, 2, 18, 32, generator=gen) for _ in range(3))
    spec = LLAMA.replace(head_dim=32, rotary_dim=32, num_attention_heads=2, num_key_value_heads=2)
    kwargs = {"causal": True, "query_offset": 900}
    if source == "hf precision":  # float32 angles: far from the exact ones at positions near 100,000
        kwargs.update(precision="hf", q_positions=99_900 + torch.arange(18)[None], k_positions=99_000 +
                      torch.arange(18)[None])
    elif source == "table":
        spec = rotary.Table(spec)
    else:
        spec = rotary.Spec.from_hf_config({"hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 64,
                                           "rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic",
                                                                                   "factor": 2.0}})
        kwargs["seq_len"] = 1000
    ref, ref_lse, tol, tol_lse = reference(q, k, v, spec=spec, **kwargs)
    got, lse = triton_attention(q, k, v, spec, **kwargs)
    check(source, got, lse, ref, ref_lse, tol, tol_lse, torch.float32)
    if source != "table":  # the rows of the exact precision / of another seq_len are flagged
        other_kwargs = dict(kwargs, precision=None)
        if "seq_len" in kwargs:
            other_kwargs["seq_len"] = 64
        other, other_lse, _, _ = reference(q, k, v, spec=spec, **other_kwargs)
        with pytest.raises(AssertionError):
            check(source, got, lse, other, other_lse, tol, tol_lse, torch.float32)


def test_bshd_layout_and_query_offset_give_the_bhsd_result():
    gen = torch.Generator().manual_seed(40)
    q, k, v = (torch.randn(2, 4 if i == 0 else 2, 21, 32, generator=gen) for i in range(3))
    spec = LLAMA.replace(head_dim=32, rotary_dim=32, num_attention_heads=4, num_key_value_heads=2)
    want, want_lse = triton_attention(q, k, v, spec, causal=True, query_offset=0)
    from rotary._triton_attention import attention
    got, lse = attention(dev(q.transpose(1, 2)), dev(k.transpose(1, 2)), dev(v.transpose(1, 2)), causal=True,
                         rope=rotary.FusedRope(spec), layout="bshd", return_lse=True)
    assert got.shape == (2, 21, 4, 32)
    assert torch.equal(got.cpu().transpose(1, 2), want) and torch.equal(lse.cpu(), want_lse)


def test_the_bound_flags_a_mask_off_by_one_key():
    # The tolerance is not vacuous: a reference whose causal edge sits one key later differs by
    # more than the bound in some row.
    gen = torch.Generator().manual_seed(41)
    q, k, v = (torch.randn(1, 2, 24, 32, generator=gen) for _ in range(3))
    got, lse = triton_attention(q, k, v, causal=True, query_offset=3)
    ref, ref_lse, tol, tol_lse = reference(q, k, v, causal=True, query_offset=4)
    with pytest.raises(AssertionError, match="bound"):
        check("off by one", got, lse, ref, ref_lse, tol, tol_lse, torch.float32)


def test_queries_far_past_the_keys_read_their_own_rows():
    # query_offset 90,000 with 20 keys: the launch passes the queries' own positions (not the
    # table's rows [0, 90,013)); causal, every key visible to every query.
    gen = torch.Generator().manual_seed(42)
    q, k, v = torch.randn(1, 2, 13, 32, generator=gen), torch.randn(1, 1, 20, 32, generator=gen), \
        torch.randn(1, 1, 20, 32, generator=gen)
    spec = LLAMA.replace(head_dim=32, rotary_dim=32, num_attention_heads=2, num_key_value_heads=1)
    ref, ref_lse, tol, tol_lse = reference(q, k, v, causal=True, query_offset=90_000, spec=spec)
    got, lse = triton_attention(q, k, v, spec, causal=True, query_offset=90_000)
    check("far queries", got, lse, ref, ref_lse, tol, tol_lse, torch.float32)


def test_a_query_without_keys_gets_zeros_and_lse_minus_infinity():
    q, k, v = torch.randn(1, 1, 3, 16), torch.randn(1, 1, 5, 16), torch.randn(1, 1, 5, 16)
    # window 2 with query_offset 10: query i sees keys 9 + i and 10 + i, past the 5 keys.
    got, lse = triton_attention(q, k, v, window=2, query_offset=10)
    assert torch.equal(got, torch.zeros(1, 1, 3, 16)) and torch.equal(lse, torch.full((1, 1, 3), -math.inf))


def refuse(message, *args, **kwargs):
    from rotary._triton_attention import attention
    with pytest.raises(rotary.RotaryError) as error:
        attention(*args, **kwargs)
    assert str(error.value) == message


def test_refusals_name_the_argument():
    q, k = dev(torch.randn(1, 2, 3, 32)), dev(torch.randn(1, 1, 4, 32))
    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    refuse("q dtype must be float32, bfloat16 or float16 for the triton attention (got torch.float64); "
           "rotary.torch.attention runs float64 on the CPU", q.double(), k.double(), k.double())
    refuse("v dtype must be q's dtype torch.float32 (got torch.float16)", q, k, k.half())
    refuse("k must be 4-D [b, h, s, d] (got shape (4, 32))", q, k[0, 0], k)
    refuse("k's head dim must be q's 32 (got 16)", q, k[..., :16], k)
    refuse("q's head dim must be >= 1 (got 0)", q[..., :0], k[..., :0], k)
    refuse("q heads must be a multiple of k heads (GQA) (got 2 and 3)", q, k.expand(1, 3, 4, 32), k.expand(1, 3, 4, 32))
    refuse("k and v must have q's batch and each other's heads and length (got q (1, 2, 3, 32), k (1, 1, 4, 32), "
           "v (1, 1, 3, 32), layout 'bhsd')", q, k, k[:, :, :3])
    refuse("layout must be 'bhsd' or 'bshd' for the triton attention (got 'sbhd')", q, k, k, layout="sbhd")
    refuse("window must be >= 0 (got -1)", q, k, k, window=-1)
    refuse("query_offset must be >= 0 (got -2)", q, k, k, query_offset=-2)
    refuse("causal must be True or False (got 1)", q, k, k, causal=1)
    refuse("scale must be finite and positive (got -1.0)", q, k, k, scale=-1.0)
    refuse("softcap must be finite and positive, or None (got 0.0)", q, k, k, softcap=0.0)
    refuse("softcap must be finite and positive, or None (got inf)", q, k, k, softcap=math.inf)
    refuse("return_lse must be True or False (got 1)", q, k, k, return_lse=1)
    refuse("q_positions and k_positions go together (got only q_positions)", q, k, k,
           rope=rotary.FusedRope(spec, q_positions=torch.tensor([[0, 1, 2]])))
    refuse("k_positions must be >= 0 (got -1)", q, k, k, rope=rotary.FusedRope(
        spec, q_positions=torch.tensor([[0, 1, 2]]), k_positions=torch.tensor([[0, 1, 2, -1]])))
    refuse("k_positions must have shape [1, 4] (got (1, 3))", q, k, k, rope=rotary.FusedRope(
        spec, q_positions=torch.tensor([[0, 1, 2]]), k_positions=torch.tensor([[0, 1, 2]])))
    refuse("rotary_offset + rotary_dim must be <= head_dim 32 (got rotary_offset 4, rotary_dim 32)", q, k, k,
           rope=rotary.FusedRope(spec, rotary_offset=4))
    fixed = rotary.Table(spec, fixed_positions=8)
    refuse(f"positions must be <= the table's last position {fixed._native.max_position} (got 12)", q, k, k,
           rope=rotary.FusedRope(fixed), query_offset=10)
    mrope = rotary.Spec.preset("qwen2-vl-7b")
    refuse("the triton attention rotates by one position per token (got spec 'qwen2-vl-7b' with 3 position "
           "streams)", q, k, k, rope=rotary.FusedRope(mrope))
    refuse("rope must be a rotary.FusedRope or None (got Spec)", q, k, k, rope=spec)
    refuse("rope and q_positions are exclusive: fused RoPE's terms go inside rope=rotary.FusedRope(...) (got rope "
           "and q_positions)", q, k, k, rope=rotary.FusedRope(spec), q_positions=torch.tensor([[0, 1, 2]]))
    dynamic = rotary.Spec.from_hf_config({"hidden_size": 128, "num_attention_heads": 4, "max_position_embeddings": 64,
                                          "rope_theta": 10000.0, "rope_scaling": {"rope_type": "dynamic",
                                                                                  "factor": 2.0}})
    refuse("seq_len must be given for spec 'config', whose table depends on the sequence length (got seq_len "
           "None)", q, k, k, rope=rotary.FusedRope(dynamic))
    meta = torch.empty(1, 1, 2, 16, device="meta")
    refuse("the triton attention runs on cuda tensors (and cpu ones under TRITON_INTERPRET=1) (got q on meta)", meta,
           meta, meta)
    grad = q.clone().requires_grad_()
    refuse("the triton attention has no backward yet (got q, k or v with requires_grad=True); "
           "rotary.torch.attention records gradients on the CPU", grad, k, k)


def test_the_deprecated_flat_keywords_warn_and_keep_their_refusals():
    # spec_or_table= and the other fused-RoPE terms as flat keywords: one DeprecationWarning a
    # call, then what they did before, refusals included (terms without a source).
    q, k = dev(torch.randn(1, 2, 3, 32)), dev(torch.randn(1, 1, 4, 32))
    with pytest.deprecated_call(match=r"rope=rotary\.FusedRope"):
        refuse("q_positions is for fused RoPE and needs spec_or_table (got q_positions tensor([[0, 1, 2]]))", q, k,
               k, q_positions=torch.tensor([[0, 1, 2]]))
    with pytest.deprecated_call(match=r"rope=rotary\.FusedRope"):
        refuse("rotary_offset is for fused RoPE and needs spec_or_table (got rotary_offset 2)", q, k, k,
               rotary_offset=2)
    spec = LLAMA.replace(head_dim=32, rotary_dim=32)
    from rotary._triton_attention import attention
    want = attention(q, k, k, causal=True, query_offset=1, rope=rotary.FusedRope(spec, precision="hf"))
    with pytest.deprecated_call(match=r"rope=rotary\.FusedRope"):
        got = attention(q, k, k, causal=True, query_offset=1, spec_or_table=spec, precision="hf")
    assert torch.equal(got, want)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    if DEVICE != "cpu":
        pytest.skip("CPU tensors only")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    refuse("the triton attention runs on cpu tensors only under Triton's interpreter: set TRITON_INTERPRET=1 "
           "before the first triton call (got q on cpu without it); rotary.torch.attention runs rotary's CPU kernels",
           torch.randn(1, 1, 2, 16), torch.randn(1, 1, 2, 16), torch.randn(1, 1, 2, 16))


def test_rotary_torch_attention_sends_cuda_calls_to_the_kernel():
    # rotary.torch.attention on CUDA tensors runs this kernel (from_torch_attention, after the
    # function's own checks); here called directly on DEVICE tensors, as the dispatch calls it.
    # What the kernel lacks is refused by name, never run on the host.
    from rotary._triton_attention import from_torch_attention
    gen = torch.Generator().manual_seed(41)
    q = torch.randn(1, 4, 9, 32, generator=gen)
    k, v = torch.randn(1, 2, 9, 32, generator=gen), torch.randn(1, 2, 9, 32, generator=gen)
    spec = rotary.Spec.preset("llama-3.1-8b").replace(head_dim=32, rotary_dim=32, num_attention_heads=4,
                                                      num_key_value_heads=2)
    call = dict(causal=True, scale=None, window=0, query_offset=0, layout="bhsd", rope=rotary.FusedRope(spec),
                implementation="kernels")
    got = from_torch_attention(dev(q), dev(k), dev(v), {}, **call).cpu()
    want = rt.attention(q, k, v, causal=True, rope=rotary.FusedRope(spec))  # the CPU kernels
    assert torch.allclose(got, want, rtol=0, atol=1e-5), float((got - want).abs().max())
    with pytest.raises(rotary.RotaryError, match=r"^kv_lengths is not supported on CUDA tensors yet"):
        from_torch_attention(dev(q), dev(k), dev(v), {"kv_lengths": torch.tensor([9])}, **call)
    with pytest.raises(rotary.RotaryError, match=r"^implementation must be 'kernels' for CUDA tensors"):
        from_torch_attention(dev(q), dev(k), dev(v), {}, **dict(call, implementation="reference"))


def _padded_causal_mask(lengths, q_len, kv_len):
    """transformers' 4-D additive mask for left-padded rows: row b's last lengths[b] keys are real,
    query i sits at key kv_len - q_len + i, causal."""
    mask = torch.full((len(lengths), 1, q_len, kv_len), torch.finfo(torch.float32).min)
    for b, n in enumerate(lengths):
        for i in range(q_len):
            last = kv_len - q_len + i
            mask[b, 0, i, max(0, kv_len - n):last + 1] = 0.0
    return mask


@pytest.mark.parametrize("case", ["no mask", "full rows", "left padding", "sliding window"])
def test_the_transformers_backend_on_cuda_runs_the_kernel(case):
    # attn_implementation="rotary" with CUDA tensors calls _triton_attention.hf_attention (q, k, v
    # in transformers' layout, already rotated; the model's 4-D mask): the CPU backend's results,
    # one launch for uniform rows, one per row for left padding.
    from rotary._torch_attention import _hf_attention_impl
    from rotary._triton_attention import hf_attention
    gen = torch.Generator().manual_seed(51)
    batch, q_len, kv_len = 3, 6, 10
    q = torch.randn(batch, 4, q_len, 32, generator=gen)
    k, v = torch.randn(batch, 2, kv_len, 32, generator=gen), torch.randn(batch, 2, kv_len, 32, generator=gen)
    window = 0
    if case == "no mask":
        mask, kv = None, q_len  # transformers passes None for top-left causal
        k, v = k[:, :, :kv], v[:, :, :kv]
    elif case == "full rows":
        mask = _padded_causal_mask([kv_len] * batch, q_len, kv_len)
    elif case == "left padding":
        mask = _padded_causal_mask([kv_len, 7, 3], q_len, kv_len)
    else:
        window = 4
        mask = _padded_causal_mask([kv_len] * batch, q_len, kv_len)
        for i in range(q_len):
            mask[:, 0, i, :max(0, kv_len - q_len + i - window + 1)] = torch.finfo(torch.float32).min
    got = hf_attention(dev(q), dev(k), dev(v), dev(mask), True, window, None).cpu()
    want = _hf_attention_impl(q, k, v, mask, True, window, None)
    assert got.shape == want.shape == (batch, q_len, 4, 32)
    assert torch.allclose(got, want, rtol=0, atol=2e-6), float((got - want).abs().max())
