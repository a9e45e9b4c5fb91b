"""llama.cpp on SmolLM2-135M's own weights (scripts/llama_cpp_peer.py; docs/interop.md, "llama.cpp
on the same weights").

- The float32 GGUF the comparison runs llama.cpp on holds the Q4_1 file's tensors dequantized
  (the values transformers loads), every one as F32, with the metadata copied. This needs only
  the gguf package, so it runs in `make test`.
- With llama-cpp-python installed (`make peers`, not part of `make test`): llama.cpp's logits at
  positions 0.. and 100000.., against transformers and rotary. Skipped without it.
"""
import importlib.util

import numpy as np
import pytest

from conftest import ROOT
from real_model import smollm2


def load_peer():
    spec = importlib.util.spec_from_file_location("llama_cpp_peer", ROOT / "scripts" / "llama_cpp_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_float32_gguf_holds_the_dequantized_tensors():
    gguf = pytest.importorskip("gguf")
    peer = load_peer()
    loaded = smollm2()
    path = peer.f32_gguf(loaded)
    assert peer.f32_gguf(loaded) == path  # written once, then reused
    source, written = gguf.GGUFReader(loaded.gguf_file), gguf.GGUFReader(path)
    assert [t.name for t in written.tensors] == [t.name for t in source.tensors]
    assert len(written.tensors) == 272
    kinds = {t.tensor_type for t in source.tensors}
    assert gguf.GGMLQuantizationType.Q4_1 in kinds  # the source really is quantized
    for new, old in zip(written.tensors, source.tensors):
        assert new.tensor_type == gguf.GGMLQuantizationType.F32, new.name
        want = gguf.quants.dequantize(old.data, old.tensor_type)
        assert np.array_equal(np.asarray(new.data).reshape(want.shape), want), new.name
    skipped = ("GGUF.", "general.file_type")
    old_fields = {k: f.contents() for k, f in source.fields.items() if not k.startswith(skipped)}
    new_fields = {k: f.contents() for k, f in written.fields.items() if not k.startswith(skipped)}
    assert new_fields == old_fields
    assert written.fields["general.file_type"].contents() == int(gguf.LlamaFileType.ALL_F32)
    assert written.fields["llama.rope.freq_base"].contents() == 100000.0


# Measured (docs/interop.md): max |logit difference| at 0..31 is 3.4e-5 to 8.2e-5 between any two
# of llama.cpp, transformers, rotary and the float64 truth (float32 summed in different orders);
# at 100000..100031 llama.cpp is 2.9e-2 from transformers and 4.2e-2 from the truth, and rotary's
# table in llama.cpp's numerics ("ggml") 6.2e-5 from llama.cpp. Asserted with margin: "ggml"
# within FLOOR_FACTOR of the floor at 0, transformers and the truth SEPARATION times further.
FLOOR_FACTOR = 3.0
SEPARATION = 100.0


def test_llama_cpp_far_out_is_rotary_ggml_table():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (`make peers` builds it)")
    peer = load_peer()
    smollm2()  # skip without the model's wheel
    rows = peer.compare(tokens_count=32, far=100_000, threads=2)
    near, far = rows[0], rows[100_000]
    floor = max(v for v in near.values() if isinstance(v, float))
    assert floor < 2e-4, near
    assert near["greedy tokens equal (llama.cpp, transformers)"]
    assert far["llama.cpp vs rotary ggml"] < FLOOR_FACTOR * floor, (far, floor)
    assert far["llama.cpp vs transformers"] > SEPARATION * far["llama.cpp vs rotary ggml"], far
    assert far["llama.cpp vs float64 truth"] > SEPARATION * far["llama.cpp vs rotary ggml"], far
    assert far["float64 truth vs rotary exact"] < FLOOR_FACTOR * floor, far
