"""rotary.experiments length-generalization: its tasks, encodings and outputs, and that its tiny
models learn (so that what the full run measures past the trained length means something)."""
import io
import json
import math

import numpy as np
import pytest
import torch

import rotary
from rotary.experiments import length_generalization as lg
from rotary.experiments.__main__ import main

TINY = lg.Config(train_len=8, vocab=16, d_model=16, heads=4, kv_heads=2, layers=1, steps=3, batch=4,
                 eval_batches=1, eval_batch=2, copy_offset=2, seeds=(0,), multipliers=(1, 2))
CHAIN = torch.randint(0, 16, (16, 16), generator=torch.Generator().manual_seed(7))


def test_alibi_slopes_are_the_papers():
    """Press et al., section 3: 2^(-8/n), 2^(-16/n), ... for n a power of two; for 12 heads the 8
    slopes of 8 heads, then every other slope of 16 heads."""
    assert lg.alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    assert lg.alibi_slopes(16).tolist() == pytest.approx([2.0 ** (-k / 2) for k in range(1, 17)], rel=1e-6)
    twelve = lg.alibi_slopes(12).tolist()
    assert twelve[:8] == [2.0 ** -k for k in range(1, 9)]
    assert twelve[8:] == pytest.approx([2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5], rel=1e-6)


def test_tasks_have_the_targets_they_claim():
    g = torch.Generator().manual_seed(1)
    tokens, targets = lg.make_batch("copy", TINY, 20, 3, g, CHAIN)
    k = TINY.copy_offset
    for t in range(k - 1, 19):
        assert torch.equal(targets[:, t], tokens[:, t - k + 1])
    assert (targets[:, : k - 1] == -100).all() and (targets[:, -1] == -100).all()
    tokens, targets = lg.make_batch("local", TINY, 200, 2, g, CHAIN)
    follows = (tokens[:, 2:] == CHAIN[tokens[:, :-2], tokens[:, 1:-1]]).float().mean()
    assert 0.85 < float(follows) <= 1.0  # 90% of tokens follow the chain, the rest are random
    assert torch.equal(targets[:, :-1], tokens[:, 1:])
    tokens, targets = lg.make_batch("recall", TINY, 64, 2, g, CHAIN)
    scored = (targets != -100).nonzero().tolist()
    assert scored, "recall asks about earlier keys"
    for b, t in scored:
        key = int(tokens[b, t])
        earlier = [int(tokens[b, s + 1]) for s in range(0, t - 1, 2) if int(tokens[b, s]) == key]
        assert earlier and int(targets[b, t]) == earlier[0]  # the value the key was first given


def test_rope_specs_scale_by_the_length_ratio():
    assert lg.rope_spec(TINY, "rope", 64).rope_type == "default"
    linear = lg.rope_spec(TINY, "linear", 64)
    assert (linear.rope_type, linear.factor) == ("linear", 8.0)
    yarn = lg.rope_spec(TINY, "yarn", 32)
    assert (yarn.rope_type, yarn.factor, yarn.original_max_position_embeddings) == ("yarn", 4.0, 8)
    assert lg.rope_spec(TINY, "ntk", 16).rope_type == "ntk_alpha"
    assert lg.rope_spec(TINY, "dynamic", 64).rope_type == "dynamic"
    assert lg.rope_spec(TINY, "linear", 8).rope_type == "default"  # factor 1 at the trained length


@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_the_tiny_models_learn_the_copy_task(encoding):
    config = lg.Config(train_len=16, vocab=16, d_model=32, layers=2, steps=150, batch=16, eval_batches=1,
                       eval_batch=8, copy_offset=2, lr=1e-2, seeds=(0,))
    torch.set_num_threads(1)
    model = lg.train(config, "copy", encoding, 0, CHAIN, lg.Progress(config.steps, io.StringIO()))
    spec = lg.rope_spec(config, "rope", 16) if encoding == "rope" else None
    result = lg.evaluate(model, config, "copy", spec, 16, 0, CHAIN)
    assert result["mean_accuracy"] > 0.7, result["mean_accuracy"]  # chance is 1/16


def test_a_run_writes_results_and_plots(tmp_path):
    stream = io.StringIO()
    results = lg.run(TINY, str(tmp_path), stream=stream)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["config"]["train_len"] == 8 and written["versions"]["rotary"] == rotary.__version__
    variants = {(r["encoding"], r["variant"]) for r in written["runs"]}
    assert ("rope", "yarn") in variants and ("alibi", "alibi") in variants and ("none", "none") in variants
    assert len(written["runs"]) == 3 * (4 + 5) * 2  # tasks x (4 encodings + RoPE's 5 variants) x lengths
    for run in written["runs"]:
        assert 0.0 <= run["mean_accuracy"] <= 1.0 and math.isfinite(run["mean_loss"])
        assert sum(run["attention_mass_by_distance"]["mass"]) == pytest.approx(1.0, abs=1e-6)
    for name in ("accuracy_by_length.svg", "rope_scaling.svg", "loss_by_position.svg"):
        assert (tmp_path / name).read_bytes().startswith(b"<?xml")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert "step 45/45" in stream.getvalue()  # 3 tasks x 5 encodings x 3 steps: the progress reached the end
    assert len(results["summary"]) == 3 * 9 * 2


def test_the_command_refuses_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["length-generalization", "--seeds", "0"])
    assert exit_info.value.code == 2
    assert "--seeds must be >= 1 (got 0)" in capsys.readouterr().err
