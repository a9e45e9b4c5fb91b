"""scripts/bench_real_model.py (docs/real-model.md, "Speed per token") in its quick form: every
path and case times a real forward of SmolLM2-135M, the shares are parts of the step, and the JSON
it writes holds the rows and the CPU. The full run (9 minutes) is for the docs, not the tests."""
import importlib.util
import json

from transformers import AttentionInterface
from transformers.models.llama import modeling_llama

from conftest import ROOT
from real_model import smollm2


def test_the_quick_form_times_every_path(tmp_path):
    smollm2()  # skip without the model's wheel
    spec = importlib.util.spec_from_file_location("bench_real_model", ROOT / "scripts" / "bench_real_model.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "speed.json"
    functions = (modeling_llama.apply_rotary_pos_emb, modeling_llama.eager_attention_forward)
    interface = dict(AttentionInterface._global_mapping)
    results = bench.main(["--quick", "--dtypes", "float32", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(results))
    cases = {f"prefill {bench.QUICK['prefill']}"} | {f"decode at {n}" for n in bench.QUICK["contexts"]}
    rows = {(row["path"], row["case"]): row for row in results["rows"]}
    assert set(rows) == {(path, case) for path in bench.PATHS for case in cases}
    for (path, case), row in rows.items():
        assert 0 < row["seconds"] < 60 and row["tokens_per_s"] > 0, row
        if case.startswith("decode"):
            assert 0 < row["attention_share"] < 1 and 0 <= row["rope_share"] < 1, row
            if path != "fused":  # fused RoPE runs inside the attention kernel
                assert row["rope_share"] > 0, row
    assert results["environment"]["cpu"] and results["environment"]["torch_threads"] >= 1
    assert not list(tmp_path.glob("*.tmp"))
    # What the timers and fuse_rope replaced is back: later tests and models see transformers'.
    assert (modeling_llama.apply_rotary_pos_emb, modeling_llama.eager_attention_forward) == functions
    assert {k: v for k, v in AttentionInterface._global_mapping.items() if k in interface} == interface
