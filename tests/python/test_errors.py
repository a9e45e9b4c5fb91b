"""Bad input through the Python API: each raises rotary.RotaryError (a ValueError) whose message
names the argument and the value, and leaves the caller's arrays untouched."""
import numpy as np
import pytest

import rotary

import torch  # required: a missing dependency fails, never skips
import rotary.torch as rt  # noqa: E402

SPEC = rotary.Spec.preset("llama-3.1-8b")
FIXED = rotary.Table(SPEC, fixed_positions=100)


def q_np(shape=(1, 4, 2, 128), dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def k_np(shape=(1, 4, 1, 128), dtype=np.float32):
    return np.random.default_rng(1).standard_normal(shape).astype(dtype)


def q_t(shape=(1, 4, 2, 128), dtype=torch.float32):
    return torch.from_numpy(q_np(shape)).to(dtype)


def k_t(shape=(1, 4, 1, 128), dtype=torch.float32):
    return torch.from_numpy(k_np(shape)).to(dtype)


NUMPY_CASES = {
    "odd head_dim": (lambda q, k: rotary.apply(q[..., :127], k, None, SPEC, layout="bshd"), "q head_dim must be >= options.rotary_offset + rotary_dim = 0 + 128 (got 127)"),
    "int dtype": (lambda q, k: rotary.apply(q.astype(np.int32), k, None, SPEC, layout="bshd"), "q dtype must be float32, float16, bfloat16 or float64 (got int32)"),
    "not an array": (lambda q, k: rotary.apply(q.tolist(), k, None, SPEC, layout="bshd"), "q must be a numpy.ndarray (got list)"),
    "float positions": (lambda q, k: rotary.apply(q, k, np.zeros((1, 4)), SPEC, layout="bshd"), "positions must hold integers (got dtype float64)"),
    "negative position": (lambda q, k: rotary.apply(q, k, np.array([[0, 1, -5, 2]]), SPEC, layout="bshd"), "positions.values[2] must be in [0, 2147483647] (got -5)"),
    "past a fixed table": (lambda q, k: rotary.apply(q, k, np.array([[0, 1, 100, 2]]), FIXED, layout="bshd"), "positions.values[2] must be in [0, 99] (got 100)"),
    "wrong position count": (lambda q, k: rotary.apply(q, k, np.arange(3), SPEC, layout="bshd"), "positions has shape (3,); q has 4 tokens (batch 1 x seq 4, layout bshd): expected (1, 4) or (4,)"),
    "batch mismatch": (lambda q, k: rotary.apply(q, k_np((2, 4, 1, 128)), None, SPEC, layout="bshd"), "k batch must equal q's batch 1 (got 2"),
    "seq mismatch": (lambda q, k: rotary.apply(q, k_np((1, 5, 1, 128)), None, SPEC, layout="bshd"), "k seq must equal q's seq 4 (got 5"),
    "rank": (lambda q, k: rotary.apply(q[0], k, None, SPEC, layout="bshd"), "q must have 4 dimensions for layout bshd (got 3)"),
    "bad layout": (lambda q, k: rotary.apply(q, k, None, SPEC, layout="bsdh"), "layout must be one of bshd, bhsd, sbhd, thd (got 'bsdh')"),
    "bad direction": (lambda q, k: rotary.apply(q, k, None, SPEC, direction="reverse", layout="bshd"), "direction must be 'forward' or 'backward' (got 'reverse')"),
    "bad style": (lambda q, k: rotary.apply(q, k, None, SPEC, style="complex", layout="bshd"), "style must be 'neox' or 'gptj' (got 'complex')"),
    "no spec": (lambda q, k: rotary.apply(q, k, None, None, layout="bshd"), "spec_or_table is required"),
    "spec is a string": (lambda q, k: rotary.apply(q, k, None, "llama", layout="bshd"), "spec_or_table must be a rotary.Spec or rotary.Table (got str)"),
    "negative strides": (lambda q, k: rotary.apply(q[:, ::-1], k, None, SPEC, layout="bshd"), "q stride_elems[1] (seq) must be >= 0 (got -256)"),
    "read-only in place": (lambda q, k: rotary.apply(np.broadcast_to(q, q.shape), k, None, SPEC, inplace=True, layout="bshd"), "q must be writable (got a read-only array)"),
    "offsets with positions": (lambda q, k: rotary.apply(q, k, np.zeros((1, 4), np.int64), SPEC, offsets=[0], layout="bshd"), "positions must come from one source"),
    "thd without cu_seqlens": (lambda q, k: rotary.apply(q[0], k[0], None, SPEC, layout="thd"), "positions.cu_seqlens is required for the thd layout"),
    "cu_seqlens last": (lambda q, k: rotary.apply(q[0], k[0], None, SPEC, layout="thd", cu_seqlens=[0, 3]), "positions.cu_seqlens[1] (the last) must equal the token count 4 of q (got 3)"),
    "cu_seqlens decreasing": (lambda q, k: rotary.apply(q[0], k[0], None, SPEC, layout="thd", cu_seqlens=[0, 3, 2, 4]), "positions.cu_seqlens[2] must be >= positions.cu_seqlens[1] = 3"),
    "unknown preset": (lambda q, k: rotary.Spec.preset("llama-9"), "llama-9"),
    "bad precision": (lambda q, k: rotary.Table(SPEC, "double"),
                      "precision must be 'exact', 'hf', 'ggml' or 'vllm' (got 'double')"),
    "bad storage": (lambda q, k: rotary.Table(SPEC, storage="disk"), "storage must be 'stored' or 'on_the_fly' (got 'disk')"),
    "config NaN theta": (lambda q, k: rotary.Spec.from_hf_config({"hidden_size": 64, "num_attention_heads": 1, "rope_theta": float("nan")}), "rope_theta"),
    "config odd head_dim": (lambda q, k: rotary.Spec.from_hf_config({"hidden_size": 63, "num_attention_heads": 1, "head_dim": 63}), "63"),
    "config wrong type": (lambda q, k: rotary.Spec.from_hf_config(42), "config must be a dict, a path or a transformers config (got int)"),
    "missing config file": (lambda q, k: rotary.Spec.from_hf_config("/nonexistent/config.json"), "/nonexistent/config.json"),
    "replace unknown field": (lambda q, k: SPEC.replace(theta=5), "theta is not a replaceable field"),
    "replace odd rotary_dim": (lambda q, k: SPEC.replace(rotary_dim=127), "127"),
    "unknown layer type": (lambda q, k: SPEC.for_layer_type("sliding_attention"), "layer_type must be one of the config's layer types (none) (got 'sliding_attention')"),
    "cos/sin rotary_dim > head_dim": (lambda q, k: rotary.apply_cos_sin(q, np.ones((4, 130), np.float32), np.ones((4, 130), np.float32), layout="bshd"), "cos shape[3] (rotary_dim) must be <= x's head_dim 128 (got 130)"),
    "cos/sin odd": (lambda q, k: rotary.apply_cos_sin(q, np.ones((4, 7), np.float32), np.ones((4, 7), np.float32), layout="bshd"), "cos shape[3] (rotary_dim) must be even and >= 2 (got 7)"),
    "cos seq": (lambda q, k: rotary.apply_cos_sin(q, np.ones((5, 8), np.float32), np.ones((5, 8), np.float32), layout="bshd"), "cos shape[1] must be x's seq 4 (got shape"),
    "threads": (lambda q, k: rotary.set_num_threads(0), "0"),
    "cpu target": (lambda q, k: rotary.force_cpu_target("NEON9"), "NEON9"),
}


@pytest.mark.parametrize("name", list(NUMPY_CASES))
def test_numpy_bad_input(name):
    call, fragment = NUMPY_CASES[name]
    q, k = q_np(), k_np()
    q0, k0 = q.copy(), k.copy()
    with pytest.raises(rotary.RotaryError) as error:
        call(q, k)
    assert isinstance(error.value, ValueError)
    assert fragment in str(error.value), str(error.value)
    np.testing.assert_array_equal(q, q0)  # nothing written before the checks pass
    np.testing.assert_array_equal(k, k0)


TORCH_CASES = {
    "int dtype": (lambda q, k: rt.apply_rotary(q.to(torch.int32), k, None, SPEC, layout="bshd"), "q dtype must be float32, bfloat16, float16 or float64 (got torch.int32)"),
    "float positions": (lambda q, k: rt.apply_rotary(q, k, torch.zeros(1, 4), SPEC, layout="bshd"), "positions must hold integers (got dtype torch.float32)"),
    "bool offsets": (lambda q, k: rt.apply_rotary(q, k, None, SPEC, offsets=torch.zeros(1, dtype=torch.bool), layout="bshd"), "offsets must hold integers (got dtype torch.bool)"),
    "not a tensor": (lambda q, k: rt.apply_rotary(q.numpy(), k, None, SPEC, layout="bshd"), "q must be a torch.Tensor (got ndarray)"),
    "position past a fixed table": (lambda q, k: rt.apply_rotary(q, k, torch.tensor([[0, 1, 2, 100]]), FIXED, layout="bshd"), "positions.values[3] must be in [0, 99] (got 100)"),
    "negative offset": (lambda q, k: rt.apply_rotary(q, k, None, SPEC, offsets=torch.tensor([-3]), layout="bshd"), "-3"),
    "shape mismatch": (lambda q, k: rt.apply_rotary(q, k_t((1, 3, 1, 128)), None, SPEC, layout="bshd"), "k seq must equal q's seq 4 (got 3"),
    "head_dim": (lambda q, k: rt.apply_rotary(q[..., :64], k, None, SPEC, layout="bshd"), "q head_dim must be >= options.rotary_offset + rotary_dim = 0 + 128 (got 64)"),
    "device mismatch": (lambda q, k: rt.apply_rotary(q, k.to("meta"), None, SPEC, layout="bshd"), "q and k must be on one device (got q on cpu, k on meta)"),
    "bad backend": (lambda q, k: rt.apply_rotary(q, k, None, SPEC, backend="cuda", layout="bshd"), "backend must be 'auto', 'torch' or 'triton' (got 'cuda')"),
    "pos emb unsqueeze_dim": (lambda q, k: rt.apply_rotary_pos_emb(q, k, q[0, :, 0], q[0, :, 0], unsqueeze_dim=3), "unsqueeze_dim must be 1"),
    "pos emb rounding": (lambda q, k: rt.apply_rotary_pos_emb(q, k, q[0, :, 0], q[0, :, 0], rounding="fast"), "rounding must be 'like_torch' or 'once' (got 'fast')"),
    "pos emb cos shape": (lambda q, k: rt.apply_rotary_pos_emb(q, q, torch.ones(1, 3, 8), torch.ones(1, 3, 8)), "cos shape[1] must be q's seq 2 (got shape"),
    "embedding precision": (lambda q, k: rt.RotaryEmbedding(SPEC, precision="fp64"), "precision must be 'hf' or 'exact' (got 'fp64')"),
    "embedding float ids": (lambda q, k: rt.RotaryEmbedding(SPEC)(q, torch.zeros(1, 4)), "position_ids must hold integers (got dtype torch.float32)"),
}


@pytest.mark.parametrize("name", list(TORCH_CASES))
def test_torch_bad_input(name):
    call, fragment = TORCH_CASES[name]
    q, k = q_t(), k_t()
    q0, k0 = q.clone(), k.clone()
    with pytest.raises(rotary.RotaryError) as error:
        call(q, k)
    assert fragment in str(error.value), str(error.value)
    assert torch.equal(q, q0) and torch.equal(k, k0)


def test_spec_preset_takes_any_case_and_repository_ids_and_suggests_like_the_cli():
    assert rotary.Spec.preset("Llama-3.1-8B").name == "llama-3.1-8b"
    assert rotary.Spec.preset("META-LLAMA/llama-3.1-8b").name == "llama-3.1-8b"
    # The repository id gives the config.json it ships (no rope_scaling), not the YaRN preset.
    instruct = rotary.Spec.preset("Qwen/Qwen2.5-7B-Instruct")
    assert instruct.name == "qwen2.5-7b-instruct"
    assert instruct.frequencies().attention_scaling == 1.0
    with pytest.raises(rotary.RotaryError) as error:
        rotary.Spec.preset("llama-3-8b")
    assert str(error.value) == (
        "preset: name must be a built-in preset's name or repository id (got \"llama-3-8b\"); "
        "did you mean one of llama-3.1-8b, llama-3.2-1b, llama-3.2-3b?")
    with pytest.raises(rotary.RotaryError) as error:
        rotary.Spec.preset("gemma3")
    assert str(error.value).endswith('(got "gemma3"); did you mean one of gemma-3-1b, gemma-3-27b?')
