"""torch.compile(fullgraph=True) of patched transformers models, from a cold start
(torch._dynamo.reset() first), with precision="hf" and precision="exact".

What is compared, and why:
  backend="aot_eager": Dynamo traces the model (rotary's Python included) and AOTAutograd builds
      the graph, which then runs with eager kernels. So the compiled model must give exactly the
      eager answer: for precision="hf" the bits of unpatched transformers run eagerly (computed
      before patching), for "exact" the bits of the same model (same seed) patched the same way
      and run eagerly with its own fresh state. Any difference would come from the
      trace itself: a stale table or frequency baked into the graph, an update that did not run,
      a Python object made at trace time and reused. torch.equal.
  backend="inductor": inductor generates its own kernels for everything that is not an opaque op
      (rotary's rotation and exact table reads are custom ops and keep their eager bits; the
      precision="hf" cos/sin chain, the norms, softmax, SiLU are fused and keep float32
      intermediates), so the compiled answer differs from the eager one by inductor's own
      rounding. It is compared with the eager answer within INDUCTOR_RTOL (derived there);
      unpatched transformers under inductor differs from its eager self by the same order.
The subset: aot_eager covers every code path of the drop-in under tracing (one family per path:
plain module, per-layer-type module, the sequence-dependent ops for LongRoPE and dynamic NTK,
M-RoPE positions, GPT-J's tables, gpt-oss's half-width cos/sin, DeepSeek's interleave), each cold
compile ~1-2 s. Inductor costs ~5-15 s per cold compile on this machine, so it runs for LLaMA only
(float32 and bfloat16 with precision="hf", float32 with "exact") and LongRoPE's switching
(precision="hf"). Cached generation under compile recompiles for the decode shapes (~3 graphs,
~8 s with aot_eager): LLaMA only.

Rule checked on every compiled run: nothing inside traced code creates or registers a Python
object of rotary's (forbid_registration makes Table._wrap, handle registration, Spec and
RotaryEmbedding construction raise during tracing and running).
"""
import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from rotary import _handles  # noqa: E402
from hf_harness import build, kernel_calls, one_torch_thread, restore_modeling, small  # noqa: E402,F401
from test_hf_families import FAMILIES, OFFSET, SEQ, greedy_at, positions  # noqa: E402

# Inductor against eager, logits: inductor fuses the elementwise ops between the matmuls (RMSNorm,
# softmax, SiLU * up, residual adds, the precision="hf" cos/sin chain) and keeps float32 inside each
# fused kernel where eager rounds after every op; it also evaluates cos/sin with its own vectorized
# code (<= 1 float32 ulp apart from ATen's). Each of those ~10 rounding sites per layer moves its
# output by <= 1 unit of the storage type, relative, and a tiny random model passes relative
# perturbations on with gain <= ~2 per layer (test_hf_models.py's argument), so over L = 2 layers
# max|logits_compiled - logits_eager| <= 2 * L * 10 * ulp * max|logits| = 40 ulp_rel * max|logits|:
# 40 * 2^-23 (float32) and 40 * 2^-8 (bfloat16, where one bf16 rounding skipped is 2^-8 relative).
# Measured on LLaMA: 2.6 x 2^-23 (float32) and 1.75 x 2^-8 (bfloat16) times max|logits|, for the
# patched model and for unpatched transformers alike (each compiled against its eager self).
INDUCTOR_RTOL = {torch.float32: 40 * 2.0**-23, torch.bfloat16: 40 * 2.0**-8}


def _llama_dynamic():
    return transformers.LlamaForCausalLM, small(transformers.LlamaConfig, max_position_embeddings=64,
                                                rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                 "rope_theta": 10000.0})


def builder(family):
    return _llama_dynamic if family == "llama_dynamic" else FAMILIES[family][0]


# (family, precision, dtype, layers-worth of kernel calls per forward)
AOT_EAGER_CASES = [
    ("llama", "hf", torch.float32), ("llama", "hf", torch.bfloat16),
    ("llama", "exact", torch.float32), ("llama", "exact", torch.bfloat16),
    ("gemma3", "hf", torch.float32), ("gemma3", "exact", torch.float32),
    ("phi3_longrope", "hf", torch.float32), ("phi3_longrope", "exact", torch.float32),
    ("llama_dynamic", "hf", torch.float32), ("llama_dynamic", "exact", torch.float32),
    ("qwen2_vl", "hf", torch.float32), ("gptj", "hf", torch.float32), ("gptj", "exact", torch.float32),
    ("gpt_oss", "hf", torch.float32), ("deepseek_v3", "hf", torch.float32),
]
# 0: short; OFFSET: past every context (dynamic NTK grows, LongRoPE takes its long factors); 0 again
# (dynamic NTK resets, LongRoPE back to short). One traced graph serves all three (same shapes).
STARTS = (0, OFFSET, 0)


def logits(model, input_ids, start):
    with torch.no_grad():
        return model(input_ids=input_ids, position_ids=positions(model, start, SEQ), use_cache=False).logits


@pytest.fixture
def forbid_registration(monkeypatch):
    """Returns a function that, once called, makes every way of creating or registering one of
    rotary's Python objects raise: Table._wrap and _handles.register (handles for Specs and
    Tables), RotaryEmbedding.__init__ (module ids) and Spec construction. Called after patching,
    before the compiled runs: tracing and running must do none of it."""

    def forbid():
        def refuse(what):
            def raising(*args, **kwargs):
                raise AssertionError(f"{what} called in forward")
            return raising

        monkeypatch.setattr(rotary.Table, "_wrap", refuse("rotary.Table._wrap"))
        monkeypatch.setattr(_handles, "register", refuse("rotary._handles.register"))
        monkeypatch.setattr(rt.RotaryEmbedding, "__init__", refuse("RotaryEmbedding.__init__"))
        monkeypatch.setattr(rotary.Spec, "__init__", refuse("rotary.Spec.__init__"))

    return forbid


def _compile_case(family, precision, dtype, restore_modeling):
    """(the model patched, its eager reference outputs at STARTS)."""
    model_cls, config = builder(family)()
    model = build(model_cls, config, dtype)
    input_ids = torch.randint(3, 89, (1, SEQ), generator=torch.Generator().manual_seed(9))
    if precision == "hf":
        expected = [logits(model, input_ids, s) for s in STARTS]  # unpatched transformers, eager
    restore_modeling(model)
    rt.patch_model(model, precision=precision)
    if precision == "exact":
        reference = build(model_cls, config, dtype)  # the same weights (seeded), patched, its own fresh state
        rt.patch_model(reference, precision="exact")
        expected = [logits(reference, input_ids, s) for s in STARTS]
    return model, input_ids, expected


@pytest.mark.parametrize("family, precision, dtype", AOT_EAGER_CASES,
                         ids=[f"{f}-{p}-{str(d)[6:]}" for f, p, d in AOT_EAGER_CASES])
def test_cold_fullgraph_compile_is_bit_identical_to_eager(family, precision, dtype, monkeypatch, restore_modeling,
                                                          forbid_registration):
    model, input_ids, expected = _compile_case(family, precision, dtype, restore_modeling)
    layers = model.config.get_text_config().num_hidden_layers
    forbid_registration()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    calls = kernel_calls(monkeypatch)
    got = [logits(compiled, input_ids, s) for s in STARTS]
    for start, e, g in zip(STARTS, expected, got):
        assert e.dtype == g.dtype and torch.equal(e, g), \
            f"start {start}: max |diff| {(e.double() - g.double()).abs().max().item():.3g}"
    # rotary's kernel ran inside the compiled graph: q and k in every layer, every forward.
    assert calls["kernel"] == 2 * layers * len(STARTS), calls


def test_compiled_graph_reads_the_patched_module(restore_modeling):
    """precision="hf" cos/sin are traced torch ops, not an opaque op: the compiled graph must read
    rotary's module. Nudging one inv_freq entry of it by one ulp changes the compiled logits."""
    model_cls, config = FAMILIES["llama"][0]()
    model = build(model_cls, config, torch.float32)
    restore_modeling(model)
    rt.patch_model(model)
    input_ids = torch.randint(3, 89, (1, SEQ), generator=torch.Generator().manual_seed(9))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    before = logits(compiled, input_ids, OFFSET)
    module = model.model.rotary_emb
    assert isinstance(module, rt.RotaryEmbedding)
    with torch.no_grad():
        module.inv_freq[1] = torch.nextafter(module.inv_freq[1], torch.tensor(1.0))
    assert not torch.equal(logits(compiled, input_ids, OFFSET), before)


def test_cold_compiled_cached_greedy_generation(monkeypatch, restore_modeling, forbid_registration):
    """Greedy decoding with the KV cache (DynamicCache), the model compiled with fullgraph=True
    (prefill and decode graphs), at position 100000: transformers' eager bits, step for step."""
    model_cls, config = FAMILIES["llama"][0]()
    model = build(model_cls, config, torch.float32)
    input_ids = torch.randint(3, 89, (1, SEQ), generator=torch.Generator().manual_seed(9))
    expected = greedy_at(model, input_ids, OFFSET)
    restore_modeling(model)
    rt.patch_model(model)
    forbid_registration()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    calls = kernel_calls(monkeypatch)
    got = greedy_at(compiled, input_ids, OFFSET)
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])
    assert calls["kernel"] == 2 * config.num_hidden_layers * (expected[1].shape[0]), calls


INDUCTOR_CASES = [("llama", "hf", torch.float32), ("llama", "hf", torch.bfloat16), ("llama", "exact", torch.float32),
                  ("phi3_longrope", "hf", torch.float32)]


@pytest.mark.parametrize("family, precision, dtype", INDUCTOR_CASES,
                         ids=[f"{f}-{p}-{str(d)[6:]}" for f, p, d in INDUCTOR_CASES])
def test_cold_fullgraph_inductor_stays_within_inductors_rounding(family, precision, dtype, monkeypatch,
                                                                 restore_modeling, forbid_registration):
    model, input_ids, expected = _compile_case(family, precision, dtype, restore_modeling)
    forbid_registration()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    calls = kernel_calls(monkeypatch)
    got = [logits(compiled, input_ids, s) for s in STARTS]
    for start, e, g in zip(STARTS, expected, got):
        diff = (e.double() - g.double()).abs().max().item()
        bound = INDUCTOR_RTOL[dtype] * e.double().abs().max().item()  # derived at INDUCTOR_RTOL
        assert e.dtype == g.dtype and diff <= bound, f"start {start}: {diff:.3g} > {bound:.3g}"
    layers = model.config.get_text_config().num_hidden_layers
    assert calls["kernel"] == 2 * layers * len(STARTS), calls
    if family == "phi3_longrope":
        # The factor set switched inside the compiled model (short, long, short): the logits at 0
        # after the long call equal the first ones, bit for bit (same graph, same short inv_freq).
        assert torch.equal(got[0], got[2])
