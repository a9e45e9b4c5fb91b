"""rotary.convert_weights and `rotary convert-weights` on real transformers checkpoints
(include/rotary/convert.hpp; docs/interop.md, "Converting checkpoints between pairing conventions").

A tiny random transformers model is saved with save_pretrained (safetensors), its q/k rows are
converted to interleaved order, and the same model class, its RoPE replaced by an explicit
interleaved rotation written here, gives the original's logits from the converted weights; and
the reverse. Tolerance (float32): the conversion moves rows, so q and k hold the same float32
values in another order and each head's q.k sums the same products in another order; the only
difference is float32 summation order inside the attention scores (a few ulp of the scores, which
the softmax and the later layers carry to the logits at the same relative size). Checked:
max |logits - reference| <= 1e-5 * max |reference| + 1e-6; a negative control (the converted
weights run with the half-split RoPE they no longer fit) differs by far more.
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
from safetensors.torch import load_file

import rotary
from hf_harness import modeling_modules

sys.path.insert(0, os.path.dirname(__file__))


def interleaved_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1, **_):
    """Hugging Face's apply_rotary_pos_emb signature, rotating interleaved pairs (2i, 2i+1) of the
    last dim by the angles of HF's cos/sin (cat(freqs, freqs): the first half holds pair i's angle)."""
    half = cos.shape[-1] // 2
    cos = cos[..., :half].unsqueeze(unsqueeze_dim)
    sin = sin[..., :half].unsqueeze(unsqueeze_dim)

    def rotate(x):
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)

    return rotate(q), rotate(k)


def randomize(model, seed):
    """Every parameter random (biases included: zeros would hide a bias left unpermuted)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.double()


def tolerance(reference):
    return 1e-5 * reference.abs().max().item() + 1e-6


def close(actual, reference):
    return (actual - reference).abs().max().item() <= tolerance(reference)


def far(actual, reference):
    """A negative control: off by 100x the tolerance or more."""
    return (actual - reference).abs().max().item() > 100 * tolerance(reference)


def build(config_cls, model_cls, seed=0, **kwargs):
    config = config_cls(vocab_size=61, max_position_embeddings=64, **kwargs)
    torch.manual_seed(seed)
    model = model_cls(config).eval()
    randomize(model, seed)
    return model


def save(model, folder):
    model.save_pretrained(folder)
    path = pathlib.Path(folder) / "model.safetensors"
    assert path.is_file(), f"save_pretrained wrote no model.safetensors in {folder}"
    return path


def load_weights(model_cls, config, path, folder):
    """The model class with `config`, its weights read from the safetensors file `path` by
    from_pretrained (which maps saved names, e.g. DeepSeek's per-expert tensors, and ties the
    embeddings)."""
    folder = pathlib.Path(folder)
    folder.mkdir()
    config.save_pretrained(folder)
    shutil.copyfile(path, folder / "model.safetensors")
    return model_cls.from_pretrained(folder, dtype=torch.float32).eval()


def patch_interleaved(monkeypatch, model):
    modules = [m for m in modeling_modules(model) if hasattr(m, "apply_rotary_pos_emb")]
    assert modules, "no apply_rotary_pos_emb to replace"
    for modeling in modules:
        monkeypatch.setattr(modeling, "apply_rotary_pos_emb", interleaved_apply_rotary_pos_emb)


IDS = torch.tensor([[3, 17, 42, 5, 60, 11, 29, 8, 33, 2, 50, 19]])

MODELS = {
    # Llama with GQA and q/k biases (attention_bias), full rotary.
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, attention_bias=True)),
    # Phi: partial rotary (the leading half of each head of 8), q/k biases.
    "phi partial rotary": (transformers.PhiConfig, transformers.PhiForCausalLM,
                           dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                partial_rotary_factor=0.5)),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_half_split_checkpoint_converted_to_interleaved_gives_the_same_logits(name, tmp_path, monkeypatch):
    config_cls, model_cls, kwargs = MODELS[name]
    model = build(config_cls, model_cls, **kwargs)
    reference = logits(model, IDS)
    original = save(model, tmp_path / "hf")
    converted = tmp_path / "interleaved.safetensors"
    result = rotary.convert_weights(original, converted, tmp_path / "hf", to="interleaved")
    layers = model.config.num_hidden_layers
    bias = 2 if name == "phi partial rotary" or model.config.attention_bias else 1
    assert len(result["permuted"]) == layers * 2 * bias
    if name == "phi partial rotary":
        assert result["geometry"]["rotary_dim"] == 4 and result["geometry"]["head_dim"] == 8

    # The converted weights in the unchanged (half-split) model: wrong, by far (the check can fail).
    wrong = logits(load_weights(model_cls, model.config, converted, tmp_path / "wrong"), IDS)
    assert far(wrong, reference), (wrong - reference).abs().max().item()

    # With interleaved RoPE: the original logits.
    interleaved_model = load_weights(model_cls, model.config, converted, tmp_path / "right")
    patch_interleaved(monkeypatch, interleaved_model)
    got = logits(interleaved_model, IDS)
    assert close(got, reference), (got - reference).abs().max().item()


@pytest.mark.parametrize("name", list(MODELS))
def test_interleaved_checkpoint_converted_to_half_split_gives_the_same_logits(name, tmp_path, monkeypatch):
    config_cls, model_cls, kwargs = MODELS[name]
    model = build(config_cls, model_cls, seed=1, **kwargs)
    meta_ordered = save(model, tmp_path / "meta")  # these weights are read as interleaved-ordered
    patch_interleaved(monkeypatch, model)
    reference = logits(model, IDS)
    monkeypatch.undo()
    converted = tmp_path / "half.safetensors"
    rotary.convert_weights(meta_ordered, converted, tmp_path / "meta", to="half-split")
    got = logits(load_weights(model_cls, model.config, converted, tmp_path / "half"), IDS)
    assert close(got, reference), (got - reference).abs().max().item()


def test_deepseek_v3_mla_rope_rows_match_transformers_rope_interleave(tmp_path):
    """DeepSeek V3 checkpoints keep their rope dims interleaved (config rope_interleave: true,
    modeling_deepseek_v3.apply_rotary_pos_emb_interleave). Converted to half-split, the model with
    rope_interleave false gives the same logits: the q_b_proj rope rows per head and the
    kv_a_proj_with_mqa rope rows are the ones transformers rotates."""
    kwargs = dict(hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=12,
                  qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2,
                  n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, attention_bias=True)
    model = build(transformers.DeepseekV3Config, transformers.DeepseekV3ForCausalLM, rope_interleave=True, **kwargs)
    reference = logits(model, IDS)
    original = save(model, tmp_path / "ds")
    converted = tmp_path / "half.safetensors"
    result = rotary.convert_weights(original, converted, tmp_path / "ds", to="half-split")
    names = sorted(row["name"] for row in result["permuted"])
    assert names == sorted(f"model.layers.{i}.self_attn.{m}" for i in range(2)
                           for m in ("q_b_proj.weight", "kv_a_proj_with_mqa.weight", "kv_a_proj_with_mqa.bias"))
    half_config = transformers.DeepseekV3Config(vocab_size=61, max_position_embeddings=64, rope_interleave=False, **kwargs)
    got = logits(load_weights(transformers.DeepseekV3ForCausalLM, half_config, converted, tmp_path / "right"), IDS)
    assert close(got, reference), (got - reference).abs().max().item()
    # The original (interleaved) rows under rope_interleave false: wrong.
    wrong = logits(load_weights(transformers.DeepseekV3ForCausalLM, half_config, original, tmp_path / "wrong"), IDS)
    assert far(wrong, reference), (wrong - reference).abs().max().item()


def rotary_command():
    found = shutil.which("rotary", path=os.path.dirname(sys.executable))
    assert found, f"the rotary command is not installed beside {sys.executable}"
    return found


def test_cli_round_trip_is_byte_identical_and_matches_python(tmp_path):
    config_cls, model_cls, kwargs = MODELS["llama"]
    original = save(build(config_cls, model_cls, seed=2, **kwargs), tmp_path / "hf")
    by_python = tmp_path / "python.safetensors"
    rotary.convert_weights(original, by_python, tmp_path / "hf" / "config.json", to="interleaved")
    command = rotary_command()
    by_cli = tmp_path / "cli.safetensors"
    run = subprocess.run([command, "convert-weights", "--config", str(tmp_path / "hf"), "--to", "interleaved",
                          str(original), str(by_cli)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "permuted 8 tensors" in run.stdout  # 2 layers x q, k x weight, bias
    assert by_cli.read_bytes() == by_python.read_bytes()
    back = tmp_path / "back.safetensors"
    run = subprocess.run([command, "convert-weights", "--config", str(tmp_path / "hf"), "--to", "half-split",
                          str(by_cli), str(back)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert back.read_bytes() == original.read_bytes()
    # Tensor data too, through the safetensors package's reader.
    a, b = load_file(str(original)), load_file(str(back))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_refusals(tmp_path):
    config_cls, model_cls, kwargs = MODELS["llama"]
    original = save(build(config_cls, model_cls, **kwargs), tmp_path / "hf")
    out = tmp_path / "out.safetensors"
    with pytest.raises(rotary.RotaryError, match=r'to must be "interleaved" \(or "gptj"\) or "half-split" \(or "neox"\) \(got "sideways"\)'):
        rotary.convert_weights(original, out, tmp_path / "hf", to="sideways")
    wrong = dict(json.loads((tmp_path / "hf" / "config.json").read_text()), num_key_value_heads=4)
    with pytest.raises(rotary.RotaryError, match=r'k_proj\.(weight|bias)" \(k\) has 16 rows .* 4 heads x head_dim 8 = 32 rows'):
        rotary.convert_weights(original, out, wrong, to="interleaved")
    with pytest.raises(rotary.RotaryError, match="is the input"):
        rotary.convert_weights(original, original, tmp_path / "hf", to="interleaved")
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(original.read_bytes()[:-3])
    with pytest.raises(rotary.RotaryError, match="trailing bytes|run past the data buffer"):
        rotary.convert_weights(truncated, out, tmp_path / "hf", to="interleaved")
    with pytest.raises(rotary.RotaryError, match="config must be a dict"):
        rotary.convert_weights(original, out, 42, to="interleaved")
    assert not out.exists()
    dry = rotary.convert_weights(original, out, tmp_path / "hf", to="interleaved", dry_run=True)
    assert len(dry["permuted"]) == 8 and not out.exists()


def test_pairing_names_of_the_other_functions_are_accepted(tmp_path):
    """to takes "gptj" / "neox" (and the aliases rotary's style arguments take) as well as the
    long names, with the same result."""
    config_cls, model_cls, kwargs = MODELS["llama"]
    original = save(build(config_cls, model_cls, seed=3, **kwargs), tmp_path / "hf")
    for long, short in (("interleaved", "gptj"), ("half-split", "neox")):
        rotary.convert_weights(original, tmp_path / f"{long}.safetensors", tmp_path / "hf", to=long)
        rotary.convert_weights(original, tmp_path / f"{short}.safetensors", tmp_path / "hf", to=short)
        assert (tmp_path / f"{short}.safetensors").read_bytes() == (tmp_path / f"{long}.safetensors").read_bytes()
    assert (tmp_path / "gptj.safetensors").read_bytes() != original.read_bytes()


def test_sharded_checkpoint_converted_to_interleaved_gives_the_same_logits(tmp_path, monkeypatch):
    """save_pretrained with a small max_shard_size writes model.safetensors.index.json and shards;
    the folder converted to interleaved loads with from_pretrained (the new index and shards) and,
    with interleaved RoPE, gives the original logits; each tensor equals the unsharded file's
    conversion."""
    config_cls, model_cls, kwargs = MODELS["llama"]
    model = build(config_cls, model_cls, seed=4, **kwargs)
    reference = logits(model, IDS)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3, shards
    (tmp_path / "sharded" / "notes.bin").write_bytes(b"not converted")  # left out, named

    result = rotary.convert_weights(tmp_path / "sharded", tmp_path / "out", tmp_path / "sharded", to="gptj")
    assert result["files"] == shards
    assert result["copied_files"] == sorted(p.name for p in (tmp_path / "sharded").iterdir()
                                            if p.name not in shards and p.suffix not in (".bin",)
                                            and p.name != "model.safetensors.index.json")
    assert "config.json" in result["copied_files"]
    assert result["left_out"] == ["notes.bin"]
    assert len(result["permuted"]) == 8  # 2 layers x q, k x weight, bias
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        shards + ["model.safetensors.index.json"] + result["copied_files"])
    assert (tmp_path / "out" / "model.safetensors.index.json").read_bytes() == \
        (tmp_path / "sharded" / "model.safetensors.index.json").read_bytes()

    # Tensor by tensor, the unsharded file's conversion.
    single = save(model, tmp_path / "single")
    rotary.convert_weights(single, tmp_path / "single.safetensors", tmp_path / "single", to="interleaved")
    expected = load_file(str(tmp_path / "single.safetensors"))
    got = {}
    for shard in shards:
        got.update(load_file(str(tmp_path / "out" / shard)))
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[k], expected[k]) for k in got)

    # from_pretrained reads the new folder: wrong under half-split RoPE, the original with interleaved.
    wrong = logits(model_cls.from_pretrained(tmp_path / "out", dtype=torch.float32).eval(), IDS)
    assert far(wrong, reference), (wrong - reference).abs().max().item()
    interleaved_model = model_cls.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()
    patch_interleaved(monkeypatch, interleaved_model)
    got_logits = logits(interleaved_model, IDS)
    assert close(got_logits, reference), (got_logits - reference).abs().max().item()


def test_cli_sharded_round_trip_gives_every_file_back(tmp_path):
    config_cls, model_cls, kwargs = MODELS["llama"]
    build(config_cls, model_cls, seed=5, **kwargs).save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    command = rotary_command()
    run = subprocess.run([command, "convert-weights", "--config", str(tmp_path / "sharded"), "--to", "gptj",
                          str(tmp_path / "sharded"), str(tmp_path / "mid")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "checkpoint: sharded" in run.stdout and "permuted 8 tensors" in run.stdout
    run = subprocess.run([command, "convert-weights", "--config", str(tmp_path / "mid"), "--to", "neox",
                          str(tmp_path / "mid"), str(tmp_path / "back")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    names = sorted(p.name for p in (tmp_path / "sharded").iterdir())
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == names
    for name in names:
        assert (tmp_path / "back" / name).read_bytes() == (tmp_path / "sharded" / name).read_bytes(), name
    # A refusal exits 2, as every rotary error: the output exists.
    run = subprocess.run([command, "convert-weights", "--config", str(tmp_path / "mid"), "--to", "neox",
                          str(tmp_path / "mid"), str(tmp_path / "back")], capture_output=True, text=True)
    assert run.returncode == 2 and f"OUT {tmp_path / 'back'} exists" in run.stderr, run.stderr
