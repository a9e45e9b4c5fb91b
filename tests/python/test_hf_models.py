"""Proof inside real models: tiny random-weight transformers models run once
with Hugging Face's own RoPE and once with rotary's drop-in (rotary.torch.patch_model), and their
outputs are compared.

  precision="hf":    rotary reproduces transformers' float32 cos/sin chain and its eager
                     arithmetic, so the logits must be bit-identical (torch.equal).
  precision="exact": correctly rounded cos/sin and one rounding per rotated element; the logits
                     differ by a bounded amount (derived below, before exact_logits_bound).

patch_model replaces functions of the modeling_* modules process-wide; every test restores them
(the `restore_modeling` fixture of hf_harness.py records them with monkeypatch, which puts them
back on teardown). Each test also checks that rotary's code really ran (call counters), so a patch
that silently misses a model cannot pass as "bit-identical". test_hf_families.py runs the
family x dtype x position matrix with generation; this file keeps the per-scheme cases.
"""
import copy

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from hf_harness import (build, counting, ids, one_torch_thread, output, restore_modeling,  # noqa: E402,F401
                        rotary_module, small)

U = 2.0**-24  # float32 unit roundoff

# ---- the precision="exact" tolerances (float32) -----------------------------------------------------
# cos/sin: HF's angle is fl(fl(inv_freq) * p) in float32. Its inv_freq is within 4 float32 ulps of
# the exact value (test_hf_frequencies.py asserts this) and the product adds 1/2 ulp, so the angle
# is off by <= ~5u |angle| <= 5u P (inv_freq <= 1, P = the largest position); torch's float32
# cos/sin and the attention-scaling multiply add ~2 ulps, rotary's correctly rounded values 1/2:
#     |cos_hf - cos_exact|, |sin_hf - sin_exact| <= s (5 P + 3) u      (s = attention_scaling)
# (4.8e-5 at P = 160), asserted on the cos/sin each module returned (assert_cos_sin).
# Logits: with cos/sin off by d (the measured maximum of the above), each rotated element
# x cos + rot(x) sin moves by <= 2 d max|x|, i.e. by <= 2d relative to |q|, |k|, and each attention
# logit q.k by <= 4d relative. Softmax, the value mix and the projections of a random init (weights
# ~ N(0, 0.02)) pass relative perturbations on with gain < 1, and the residual stream dilutes them,
# so over L layers the logits move by <= 4 L d max|logits|. rounding="once" vs torch's three
# roundings per rotated element adds <= 1 ulp per element, which reaches the logits as a few ulps:
#     max|logits_hf - logits_exact| <= (4 L d + 8 u) max|logits|                  (exact_logits_bound)
def exact_logits_bound(ref, layers, d):
    return (4 * layers * d + 8 * U) * ref.double().abs().max().item()


# bfloat16, precision="exact": q and k are rounded once instead of three times, so they differ from
# HF's by <= 1 bfloat16 ulp (2^-8 relative) per element, and every later bf16 operation may then
# round the other way: we bound max|d logits| by 16 bf16 ulps of max|logits| (2 layers x ~8
# roundings per layer - projections, softmax, norms, residual adds - each flipping by <= 1 ulp).
BF16_EXACT_RTOL = 16 * 2.0**-8


def record_cos_sin(model):
    """Records the (cos, sin) every forward of the model's rotary-embedding module returns."""
    seen = []
    rotary_module(model).register_forward_hook(lambda module, args, out: seen.append(out))
    return seen


def compare(model, passes, precision, monkeypatch, restore_modeling, expect_patched):
    """Runs `passes` (a list of model kwargs) with HF's RoPE, patches a copy of the model, runs them
    again. Returns [(ref, got)] per pass, [((cos, sin) HF, (cos, sin) rotary)] per pass, and the
    patched model."""
    patched = copy.deepcopy(model)  # before any pass: dynamic / LongRoPE modules start fresh
    hf_cos_sin = record_cos_sin(model)
    refs = [output(model, p) for p in passes]
    restore_modeling(patched)
    replaced = rt.patch_model(patched, precision=precision)
    for item in expect_patched:
        assert any(r.endswith(item) for r in replaced), f"patch_model did not replace {item}: {replaced}"
    assert isinstance(rotary_module(patched), rt.RotaryEmbedding)
    calls = counting(monkeypatch, patched)
    ours_cos_sin = record_cos_sin(patched)
    got = [output(patched, p) for p in passes]
    layers = patched.config.get_text_config().num_hidden_layers
    assert calls["embedding"] == len(passes), calls  # one embedding call per forward (exact count)
    assert calls["apply"] == layers * len(passes), calls  # one apply per layer per forward (exact count)
    return list(zip(refs, got)), list(zip(hf_cos_sin, ours_cos_sin)), patched


def max_position(passes):
    # M-RoPE positions (Qwen2-VL with an image) never exceed the token index: seq - 1 bounds them too.
    return max(int(p["position_ids"].max()) if "position_ids" in p else p["input_ids"].shape[1] - 1 for p in passes)


def assert_cos_sin(cos_sin_pairs, precision, largest, scaling):
    """Returns the largest |cos/sin difference| seen (0 for precision 'hf', where it is asserted)."""
    worst = 0.0
    for i, ((hc, hs), (oc, os_)) in enumerate(cos_sin_pairs):
        assert hc.shape == oc.shape and hc.dtype == oc.dtype, (hc.shape, oc.shape, hc.dtype, oc.dtype)
        if precision == "hf":
            # bit for bit: the same float32 chain (inv_freq, matmul, cos, sin, scaling multiply).
            assert torch.equal(hc, oc) and torch.equal(hs, os_), f"pass {i}: cos/sin differ"
        elif hc.dtype == torch.float32:
            bound = max(1.0, scaling) * (5 * largest + 3) * U  # s (5 P + 3) u, derived at the top
            diff = max((hc - oc).abs().max().item(), (hs - os_).abs().max().item())
            assert diff <= bound, f"pass {i}: cos/sin differ by {diff:.3g} > {bound:.3g}"
            assert diff > 0  # exact is not HF's chain: equal bits would mean it was not used
            worst = max(worst, diff)
    return worst


def assert_outputs(pairs, precision, layers, cos_sin_diff):
    for i, (ref, got) in enumerate(pairs):
        assert ref.abs().max() > 0 and torch.isfinite(ref).all()
        if precision == "hf":
            # bit for bit: the same float32 cos/sin chain and the same eager roundings.
            assert torch.equal(ref, got), f"pass {i}: max |diff| {(ref.float() - got.float()).abs().max().item():.3g}"
        elif ref.dtype == torch.bfloat16:
            diff = (ref.float() - got.float()).abs().max().item()
            bound = BF16_EXACT_RTOL * ref.float().abs().max().item()  # 16 bf16 ulps, see BF16_EXACT_RTOL
            assert diff <= bound, f"pass {i}: {diff:.3g} > {bound:.3g}"
        else:
            diff = (ref.double() - got.double()).abs().max().item()
            bound = exact_logits_bound(ref, layers, cos_sin_diff)  # (4 L d + 8 u) max|logits|, derived at the top
            assert diff <= bound, f"pass {i}: {diff:.3g} > {bound:.3g}"


def check(model, passes, precision, monkeypatch, restore_modeling, expect_patched, scaling=1.0):
    pairs, cos_sin, patched = compare(model, passes, precision, monkeypatch, restore_modeling, expect_patched)
    d = assert_cos_sin(cos_sin, precision, max_position(passes), scaling)
    assert_outputs(pairs, precision, model.config.get_text_config().num_hidden_layers, d)
    return pairs, cos_sin, patched


PRECISIONS = ["hf", "exact"]
F32_BF16 = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
F32 = pytest.mark.parametrize("dtype", [torch.float32], ids=str)


# ---- Llama with Llama 3 scaling --------------------------------------------------------------------
@F32_BF16
@pytest.mark.parametrize("precision", PRECISIONS)
def test_llama3(precision, dtype, monkeypatch, restore_modeling):
    config = small(transformers.LlamaConfig, max_position_embeddings=4096,
                   rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                    "rope_theta": 500000.0})
    model = build(transformers.LlamaForCausalLM, config, dtype)
    check(model, [ids(2, 48, 1)], precision, monkeypatch, restore_modeling,
          ["rotary_emb", "modeling_llama.apply_rotary_pos_emb"])


def test_bit_comparison_detects_a_one_ulp_frequency_change(monkeypatch, restore_modeling):
    """Control: the harness is sensitive. One inv_freq entry of the patched module moved by one
    float32 ulp changes the logits, so torch.equal above is a real check."""
    config = small(transformers.LlamaConfig, max_position_embeddings=256,
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = build(transformers.LlamaForCausalLM, config, torch.float32)
    inputs = ids(1, 40, 15)
    ref = output(model, inputs)
    restore_modeling(model)
    rt.patch_model(model, precision="hf")
    assert torch.equal(output(model, inputs), ref)  # bit for bit, as in every hf test
    module = rotary_module(model)
    nudged = module.inv_freq.clone()
    nudged[1] = torch.nextafter(nudged[1], torch.tensor(1.0))
    module.inv_freq = nudged
    assert not torch.equal(output(model, inputs), ref)


# ---- Qwen2 with YaRN ------------------------------------------------------------------------------
@F32_BF16
@pytest.mark.parametrize("precision", PRECISIONS)
def test_qwen2_yarn(precision, dtype, monkeypatch, restore_modeling):
    config = small(transformers.Qwen2Config, max_position_embeddings=256,
                   rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                    "rope_theta": 1000000.0})
    model = build(transformers.Qwen2ForCausalLM, config, dtype)
    scaling = rotary.Spec.from_hf_config(config).frequencies().attention_scaling
    assert scaling > 1.1  # YaRN's 0.1 ln(4) + 1: cos/sin carry a non-trivial attention scaling
    check(model, [ids(2, 80, 2)], precision, monkeypatch, restore_modeling,
          ["rotary_emb", "modeling_qwen2.apply_rotary_pos_emb"], scaling=scaling)


# ---- Phi-3 with LongRoPE: short factors, long factors (seq_len > original), short again ------------
@F32_BF16
@pytest.mark.parametrize("precision", PRECISIONS)
def test_phi3_longrope_switches_factor_sets(precision, dtype, monkeypatch, restore_modeling):
    head_dim, partial = 16, 0.75  # partial rotary as Phi-4-mini: 12 of 16 dims rotate, 6 pairs
    pairs = int(head_dim * partial) // 2
    config = small(transformers.Phi3Config, max_position_embeddings=256, original_max_position_embeddings=64,
                   rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": partial,
                                    "short_factor": [1.0 + 0.05 * i for i in range(pairs)],
                                    "long_factor": [1.5 + 0.75 * i for i in range(pairs)]})
    model = build(transformers.Phi3ForCausalLM, config, dtype)
    spec = rotary.Spec.from_hf_config(config)
    assert spec.rotary_dim == 2 * pairs
    scaling = spec.frequencies().attention_scaling
    # HF switches to the long factors when seq_len = max(position) + 1 > original (64): 65 is long.
    passes = [ids(1, 40, 3), ids(1, 65, 4), ids(2, 90, 5), ids(1, 64, 6)]
    _, cos_sin, _ = check(model, passes, precision, monkeypatch, restore_modeling,
                          ["rotary_emb", "modeling_phi3.apply_rotary_pos_emb"], scaling=scaling)
    # The factor sets really switched: short, long, long, short at position 30 (in every pass).
    cos30 = [hf[0][0, 30] for hf, _ in cos_sin]
    assert not torch.equal(cos30[0], cos30[1]) and torch.equal(cos30[1], cos30[2])
    assert torch.equal(cos30[0], cos30[3])


# ---- GPT-NeoX with partial rotary (rotary_pct 0.25) ------------------------------------------------
@F32
@pytest.mark.parametrize("precision", PRECISIONS)
def test_gpt_neox_partial_rotary(precision, dtype, monkeypatch, restore_modeling):
    config = transformers.GPTNeoXConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=2, rotary_pct=0.25, max_position_embeddings=256,
                                        attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = build(transformers.GPTNeoXForCausalLM, config, dtype)
    spec = rotary.Spec.from_hf_config(config)
    assert (spec.head_dim, spec.rotary_dim) == (32, 8)  # a quarter of each head rotates
    check(model, [ids(2, 60, 7)], precision, monkeypatch, restore_modeling,
          ["rotary_emb", "modeling_gpt_neox.apply_rotary_pos_emb"])


# ---- Llama with dynamic NTK: growth past max_position_embeddings, then reset -----------------------
@F32_BF16
@pytest.mark.parametrize("precision", PRECISIONS)
def test_llama_dynamic_ntk_growth_and_reset(precision, dtype, monkeypatch, restore_modeling):
    config = small(transformers.LlamaConfig, max_position_embeddings=64,
                   rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    model = build(transformers.LlamaForCausalLM, config, dtype)
    # 100 > 64 grows (new base), 130 grows again, 20 < 64 resets to the original inv_freq.
    passes = [ids(1, 100, 8), ids(1, 130, 9), ids(2, 20, 10)]
    _, cos_sin, _ = check(model, passes, precision, monkeypatch, restore_modeling,
                          ["rotary_emb", "modeling_llama.apply_rotary_pos_emb"])
    # The passes really used three different frequency sets (position 19 is in all three).
    cos19 = [hf[0][0, 19] for hf, _ in cos_sin]
    assert not torch.equal(cos19[0], cos19[1]) and not torch.equal(cos19[0], cos19[2])


# ---- DeepSeek-V3: MLA with YaRN on qk_rope_head_dim, interleaved pairs ----------------------------
@F32_BF16
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("interleave", [True, False], ids=["interleave", "rotate_half"])
def test_deepseek_v3(precision, dtype, interleave, monkeypatch, restore_modeling):
    config = small(transformers.DeepseekV3Config, num_key_value_heads=4, moe_intermediate_size=32,
                   q_lora_rank=None, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                   n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
                   max_position_embeddings=256, rope_interleave=interleave,
                   rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                    "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 32, "beta_slow": 1,
                                    "rope_theta": 10000.0})
    model = build(transformers.DeepseekV3ForCausalLM, config, dtype)
    spec = rotary.Spec.from_hf_config(config)
    assert spec.rotary_dim == 16 and spec.style == ("gptj" if interleave else "neox")
    scaling = spec.frequencies().attention_scaling
    assert scaling != 1.0  # mscale / mscale_all_dim: cos/sin carry a non-trivial attention scaling
    apply_name = "apply_rotary_pos_emb_interleave" if interleave else "apply_rotary_pos_emb"
    check(model, [ids(2, 70, 11)], precision, monkeypatch, restore_modeling,
          ["rotary_emb", f"modeling_deepseek_v3.{apply_name}"], scaling=scaling)


# ---- Cohere: interleaved pairs end to end (repeat_interleave cos/sin, pairwise rotate_half) --------
def cohere_config(**extra):
    return small(transformers.CohereConfig, max_position_embeddings=256,
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **extra)


@F32_BF16  # bfloat16 too: Cohere's apply upcasts q, k to float32 and rounds back once, and so does
# the variant patch_model picks for it ("gptj pairs, float32", test_hf_apply.py)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_cohere_interleaved(precision, dtype, monkeypatch, restore_modeling):
    # rotary's config reader takes the pair style from rope_interleave or the model type (cohere:
    # interleaved, test_cohere_config_reads_as_interleaved).
    config = cohere_config()
    model = build(transformers.CohereForCausalLM, config, dtype)
    assert rotary.Spec.from_hf_config(config).style == "gptj"
    check(model, [ids(2, 50, 12)], precision, monkeypatch, restore_modeling,
          ["rotary_emb", "modeling_cohere.apply_rotary_pos_emb"])


def test_cohere_config_reads_as_interleaved():
    assert rotary.Spec.from_hf_config(cohere_config()).style == "gptj"


# ---- Qwen2-VL's text model: M-RoPE (3 position streams: t, h, w) ------------------------------------
def mrope_positions(batch, seq):
    """[3, batch, seq] positions as Qwen2-VL builds them for text, a 4x4 image, text: t, h, w differ
    inside the image, so every section of M-RoPE reads a different stream."""
    t, h, w = [], [], []
    for i in range(6):  # text
        t.append(i), h.append(i), w.append(i)
    for r in range(4):  # image tokens: t fixed, h = row, w = column, all offset by 6
        for c in range(4):
            t.append(6), h.append(6 + r), w.append(6 + c)
    for i in range(seq - len(t)):  # text after the image resumes at max + 1 = 10
        t.append(10 + i), h.append(10 + i), w.append(10 + i)
    pos = torch.tensor([t, h, w])
    return pos[:, None, :].expand(3, batch, seq).contiguous()


@F32_BF16
@pytest.mark.parametrize("precision", PRECISIONS)
def test_qwen2_vl_text_model_mrope(precision, dtype, monkeypatch, restore_modeling):
    config = small(transformers.Qwen2VLTextConfig, max_position_embeddings=256,
                   rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1000000.0})
    model = build(transformers.Qwen2VLTextModel, config, dtype)
    spec = rotary.Spec.from_hf_config(config)
    assert spec.axes == "mrope" and spec.mrope_section == (2, 3, 3)
    mrope = dict(ids(2, 40, 13), position_ids=mrope_positions(2, 40))
    plain = ids(2, 30, 14)  # plain text: the model builds position_ids [3, batch, seq] itself
    check(model, [mrope, plain], precision, monkeypatch, restore_modeling,
          ["rotary_emb", "modeling_qwen2_vl.apply_multimodal_rotary_pos_emb"])


# ---- Qwen2-VL, the whole model: text with an image (get_rope_index's M-RoPE positions) --------------
@F32
@pytest.mark.parametrize("precision", PRECISIONS)
def test_qwen2_vl_with_an_image(precision, dtype, monkeypatch, restore_modeling):
    """The vision tower's VisionRotaryEmbedding (no config, forward(seqlen)) must stay as it is;
    the language model's M-RoPE goes through rotary, with t/h/w positions from get_rope_index."""
    image, start, end = 90, 92, 93
    config = transformers.Qwen2VLConfig(
        text_config=dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1000000.0}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=image, video_token_id=91, vision_start_token_id=start, vision_end_token_id=end,
        attn_implementation="eager")
    model = build(transformers.Qwen2VLForConditionalGeneration, config, dtype)
    g = torch.Generator().manual_seed(16)
    text = torch.randint(3, 89, (1, 24), generator=g)
    # A 56 x 56 image: a 4 x 4 patch grid, merged 2 x 2 into 4 image tokens.
    input_ids = torch.cat([text[:, :6], torch.tensor([[start] + [image] * 4 + [end]]), text[:, 6:]], dim=1)
    inputs = dict(input_ids=input_ids, pixel_values=torch.randn(16, 3 * 2 * 14 * 14, generator=g),
                  image_grid_thw=torch.tensor([[1, 4, 4]]), mm_token_type_ids=(input_ids == image).int())
    position_ids, _ = model.model.get_rope_index(input_ids, image_grid_thw=inputs["image_grid_thw"],
                                                 attention_mask=torch.ones_like(input_ids),
                                                 mm_token_type_ids=inputs["mm_token_type_ids"])
    assert not torch.equal(position_ids[1], position_ids[2])  # h and w differ on the image tokens
    _, cos_sin, patched = check(model, [inputs], precision, monkeypatch, restore_modeling,
                       ["language_model.rotary_emb", "modeling_qwen2_vl.apply_multimodal_rotary_pos_emb"])
    assert cos_sin[0][0][0].shape[0] == 3  # [3, batch, seq, dim]: one row per stream, as HF's module
    assert type(patched.model.visual.rotary_pos_emb).__name__ == "VisionRotaryEmbedding"
