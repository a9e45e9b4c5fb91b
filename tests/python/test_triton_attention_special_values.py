"""rotary._triton_attention with NaN, +inf and -inf in q, k and v (docs/attention.md, the special
values paragraph), on CPU tensors in Triton's interpreter as test_triton_attention.py runs it.

The contract: a row with a NaN or +inf score among its visible keys is NaN throughout; a row whose
visible scores are all -inf is NaN; a -inf score beside finite ones gives its key weight 0; NaN or
+-inf in v reaches the output elements it is multiplied into (inf * w, 0 * inf = NaN); only the
keys a row sees count (a NaN in a key past the causal edge or outside the window never reaches
it); a row that sees no key gets zeros and lse -inf.

Each case sets the special values by hand, states which output elements are NaN / infinite, and
checks, element by element: the float64 reference below has exactly that pattern; the kernel has
NaN where it is NaN, the same infinity where it is infinite, and elsewhere is finite and within
test_triton_attention's bound (computed on the inputs with the special values replaced by 0: the
finite rows' keys are the same, a -inf score's key adds exactly 0); rotary.torch.attention's CPU
kernels have the same pattern. The decode form runs with one and with three key splits (the merge).
"""
import math

import pytest
import torch

import rotary.torch as rt

pytest.importorskip("triton", reason="triton is not installed (scripts/requirements.txt pins it)")

from test_triton_attention import (LLAMA, reference, set_launch, storage, triton_attention,  # noqa: E402
                                   visible_mask, with_rope)
from triton_device import interpreter  # noqa: E402

AUTOUSE = (interpreter,)  # imported for its autouse: TRITON_INTERPRET=1 before any launch

NAN, INF = float("nan"), float("inf")
# The interpreter's NumPy warns of the inf - inf and 0 * inf it is asked to compute.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def special_reference(q, k, v, *, causal=False, window=0, query_offset=0, scale=None, spec=None):
    """float64 attention in IEEE arithmetic over each row's visible keys only: m = max s_j,
    w_j = exp(s_j - m), out = sum_j w_j v_j / sum_j w_j; a row without keys: zeros."""
    q, k, v = q.double(), k.double(), v.double()
    batch, heads, q_len, d = q.shape
    kv_len, group = k.shape[2], heads // k.shape[1]
    if spec is not None:
        qp = (query_offset + torch.arange(q_len)).expand(batch, q_len).contiguous()
        kp = torch.arange(kv_len).expand(batch, kv_len).contiguous()
        q, _ = rt.apply_rotary(q, None, qp, spec, layout="bhsd")
        k, _ = rt.apply_rotary(k, None, kp, spec, layout="bhsd")
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = torch.einsum("bhid,bhjd->bhij", q, k) * (1.0 / math.sqrt(d) if scale is None else scale)
    visible = visible_mask(q_len, kv_len, causal, window, query_offset).expand(batch, heads, q_len, kv_len)
    s = s.masked_fill(~visible, -INF)
    w = torch.exp(s - s.amax(-1, keepdim=True))
    w_v = torch.where(visible[..., None], w[..., None] * v[:, :, None], torch.zeros(()).double())
    out = w_v.sum(-2) / torch.where(visible, w, torch.zeros(()).double()).sum(-1, keepdim=True)
    return torch.where(visible.any(-1, keepdim=True), out, torch.zeros(()).double())


def compare(name, got, want, tol, dtype):
    """NaN where want is NaN, want's infinity where it is infinite, else finite within tol."""
    got64 = got.double()
    assert torch.equal(torch.isnan(got64), torch.isnan(want)), \
        f"{name}: NaN at {torch.nonzero(torch.isnan(got64) != torch.isnan(want))[:8].tolist()}"
    inf = torch.isinf(want)
    assert torch.equal(got64[inf], want[inf]) and torch.equal(torch.isinf(got64), inf), f"{name}: infinities differ"
    finite = torch.isfinite(want)
    err = (got64 - want).abs()[finite]
    bound = (tol + storage(got, want, dtype))[finite]
    assert bool((err <= bound).all()), f"{name}: |triton - ref| / bound = {float((err / bound).max())}"


def clean(t):
    return t.nan_to_num(0.0, 0.0, 0.0)


def pattern(shape, nan=(), inf=()):
    """The expected float64 pattern: NaN at the index tuples of `nan`, the signed infinities of
    `inf` ((index, value) pairs), 0 elsewhere (finite)."""
    p = torch.zeros(shape, dtype=torch.float64)
    for index in nan:
        p[index] = NAN
    for index, value in inf:
        p[index] = value
    return p


def randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def case_causal_gqa_prefill(gen):
    # 20 queries, causal, 4 q heads on 2 kv heads: a NaN k element at key 7 of kv head 0 reaches
    # rows 7.. of q heads 0 and 1, not rows 0..6 (same key tile); a NaN v element at key 9 of kv
    # head 1 reaches element 5 of rows 9.. of q heads 2 and 3 only; -inf in v at key 3 of kv head 1
    # element 0: -inf in element 0 of rows 3.. (weight > 0) unless the NaN is there too.
    q, k, v = randn(gen, 1, 4, 20, 16), randn(gen, 1, 2, 20, 16), randn(gen, 1, 2, 20, 16)
    k[0, 0, 7, 3] = NAN
    v[0, 1, 9, 5] = NAN
    v[0, 1, 3, 0] = -INF
    rows = [(0, h, i, slice(None)) for h in (0, 1) for i in range(7, 20)]
    elems = [(0, h, i, 5) for h in (2, 3) for i in range(9, 20)]
    infs = [((0, h, i, 0), -INF) for h in (2, 3) for i in range(3, 20)]
    return q, k, v, dict(causal=True), pattern((1, 4, 20, 16), rows + elems, infs)


def case_sliding_window(gen):
    # Window 4, causal, 24 queries: a NaN k element at key 5 reaches rows 5..8 only; +inf in v at
    # key 12 element 2 gives +inf in element 2 of rows 12..15 only; keys 0..4 hold NaN in v for
    # element 7, seen by rows 0..7 only (row 4 + 3 = 7 is the last whose window reaches key 4).
    q, k, v = randn(gen, 1, 2, 24, 16), randn(gen, 1, 2, 24, 16), randn(gen, 1, 2, 24, 16)
    k[0, 1, 5, 0] = NAN
    v[0, 1, 12, 2] = INF
    v[0, 0, :5, 7] = NAN
    nan = [(0, 1, i, slice(None)) for i in range(5, 9)] + [(0, 0, i, 7) for i in range(0, 8)]
    return q, k, v, dict(causal=True, window=4), pattern((1, 2, 24, 16), nan, [((0, 1, i, 2), INF) for i in range(12, 16)])


def case_minus_infinity_scores(gen):
    # Causal, 30 queries: q element 0 is 0.5 everywhere; kv head 0's keys 0..9 have k element 0
    # -inf (score -inf, weight 0): rows 0..9 of q head 0 see only those keys (NaN), rows 10.. are
    # finite, attention over keys 10..; +inf in v at key 3 (weight 0) gives 0 * inf = NaN in
    # element 1 of those rows. kv head 1's keys all score -inf: NaN rows.
    q, k, v = randn(gen, 1, 2, 30, 16), randn(gen, 1, 2, 30, 16), randn(gen, 1, 2, 30, 16)
    q[..., 0] = 0.5
    k[0, 0, :10, 0] = -INF
    k[0, 1, :, 0] = -INF
    v[0, 0, 3, 1] = INF
    nan = [(0, 0, i, slice(None)) for i in range(10)] + [(0, 0, slice(10, None), 1), (0, 1)]
    return q, k, v, dict(causal=True), pattern((1, 2, 30, 16), nan)


def case_infinite_query_decode(gen):
    # Decode: one query at the end of 70 keys, 4 q heads on 2 kv heads; +inf in q head 1 gives
    # scores of both signs (NaN row); NaN in v at key 10 element 4 of kv head 1 reaches q heads 2
    # and 3 there; kv head 0's first 40 keys score -inf (k element 0 against q's 0.5): heads 0 and
    # 1 attend to the rest (head 1 is NaN anyway).
    q, k, v = randn(gen, 1, 4, 1, 16), randn(gen, 1, 2, 70, 16), randn(gen, 1, 2, 70, 16)
    q[..., 0] = 0.5
    q[0, 1, 0, 3] = INF
    v[0, 1, 10, 4] = NAN
    k[0, 0, :40, 0] = -INF
    return q, k, v, dict(causal=True, query_offset=69), pattern((1, 4, 1, 16), [(0, 1), (0, 2, 0, 4), (0, 3, 0, 4)])


def case_all_minus_infinity_decode(gen):
    # Decode with every key of kv head 1 scoring -inf: NaN for q heads 2 and 3, also when the keys
    # are split among programs (each split's partial has l = 0, as one that sees no key).
    q, k, v = randn(gen, 1, 4, 1, 16), randn(gen, 1, 2, 70, 16), randn(gen, 1, 2, 70, 16)
    q[..., 0] = 0.5
    k[0, 1, :, 0] = -INF
    return q, k, v, dict(causal=True, query_offset=69), pattern((1, 4, 1, 16), [(0, 2), (0, 3)])


def case_fused_rope(gen):
    # Fused RoPE (partial: the first 16 of 32 columns rotated, NeoX) in bfloat16, causal, query
    # offset 4: NaN in a rotated k column at key 6 (both elements of its pair rotate to NaN)
    # reaches rows with 4 + i >= 6; -inf in an unrotated k column at key 1 against q's positive
    # column: weight 0, finite rows.
    spec = LLAMA.replace(head_dim=32, rotary_dim=16, num_attention_heads=2, num_key_value_heads=1)
    q, k, v = (randn(gen, 1, h, n, 32, dtype=torch.bfloat16) for h, n in ((2, 12), (1, 16), (1, 16)))
    q[..., 20] = 0.5
    k[0, 0, 6, 3] = NAN
    k[0, 0, 1, 20] = -INF
    nan = [(0, h, i, slice(None)) for h in (0, 1) for i in range(2, 12)]
    return q, k, v, dict(causal=True, query_offset=4, spec=spec), pattern((1, 2, 12, 32), nan)


def case_rows_without_keys(gen):
    # Window 2 with query_offset 10 over 5 keys: no query sees a key, so NaN and inf everywhere in
    # k and v change nothing: zeros.
    q, k, v = randn(gen, 1, 1, 3, 16), torch.full((1, 1, 5, 16), NAN), torch.full((1, 1, 5, 16), INF)
    return q, k, v, dict(window=2, query_offset=10), pattern((1, 1, 3, 16))


CASES = {"causal gqa prefill": case_causal_gqa_prefill, "sliding window": case_sliding_window,
         "-inf scores": case_minus_infinity_scores, "inf query decode": case_infinite_query_decode,
         "all -inf decode": case_all_minus_infinity_decode, "fused rope bf16": case_fused_rope,
         "rows without keys": case_rows_without_keys}


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_special_values_reach_exactly_the_rows_that_see_them(case, splits, monkeypatch):
    set_launch(monkeypatch, splits=splits)
    q, k, v, kwargs, expected = CASES[case](torch.Generator().manual_seed(7))
    spec = kwargs.pop("spec", None)
    want = special_reference(q, k, v, spec=spec, **kwargs)
    assert torch.equal(torch.isnan(want), torch.isnan(expected)), f"{case}: the reference's NaN pattern"
    assert torch.equal(torch.isinf(want), torch.isinf(expected)) and torch.equal(want[torch.isinf(want)],
                                                                                 expected[torch.isinf(expected)])
    _, _, tol, _ = reference(clean(q), clean(k), clean(v), spec=spec, splits=splits, **kwargs)
    got, lse = triton_attention(q, k, v, spec, **kwargs)
    compare(f"{case} splits {splits}", got, want, tol, q.dtype)
    cpu = rt.attention(q, k, v, **with_rope(spec, kwargs)).double()
    assert torch.equal(torch.isnan(cpu), torch.isnan(want)), f"{case}: the CPU kernels' NaN pattern"
    assert torch.equal(cpu[torch.isinf(want)], want[torch.isinf(want)]), f"{case}: the CPU kernels' infinities"
    # lse: -inf exactly for the rows that see no key (and rows whose scores are all -inf:
    # log sum exp(-inf) = -inf), NaN for the rows with a NaN or +inf score.
    no_key = ~visible_mask(q.shape[2], k.shape[2], kwargs.get("causal", False), kwargs.get("window", 0),
                           kwargs.get("query_offset", 0)).any(-1)
    assert bool((lse[..., no_key] == -INF).all()), f"{case}: lse of rows without keys"
