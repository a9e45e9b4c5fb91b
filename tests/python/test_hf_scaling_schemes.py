"""Every scaling scheme the C++ library knows has a Hugging Face float32 chain in Python.

The schemes are one list in C++ (src/core/scaling/registry.cpp, exposed as _rotary.scaling_types());
rotary.torch.hf_inv_freq dispatches on HF_INV_FREQ_CHAINS (python/rotary/_hf_rotary_embedding.py).
A scheme added in C++ without its Python chain, or without a config here, fails this file.
"""
import numpy as np
import pytest

import torch  # required: a missing dependency fails, never skips
import rotary
import rotary.torch as rt
from rotary import _rotary
from rotary._hf_rotary_embedding import HF_INV_FREQ_CHAINS

U = 2.0**-24  # float32 unit roundoff

# One config.json per scheme, with the scheme's own keys set.
CONFIGS = {
    "default": {},
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.5},
    "ntk_alpha": {"rope_type": "ntk_alpha", "alpha": 1000.0},
    "yarn": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0,
             "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 0.5},
    "longrope": {"rope_type": "longrope", "factor": 32.0, "original_max_position_embeddings": 4096,
                 "short_factor": [1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0],
                 "long_factor": [1.0, 1.5, 2.25, 4.0, 8.5, 16.0, 24.0, 31.5]},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
               "low_freq_factor": 1.5, "high_freq_factor": 3.0},
    "proportional": {"rope_type": "proportional", "factor": 2.0},
}


def spec_for(name):
    config = {"head_dim": 16, "num_attention_heads": 4, "max_position_embeddings": 131072, "rope_theta": 500000.0,
              "rope_scaling": CONFIGS[name]}
    if name == "proportional":
        config["partial_rotary_factor"] = 0.25
    return rotary.Spec.from_hf_config(config)


def test_the_cpp_registry_lists_the_schemes():
    assert _rotary.scaling_types() == ["default", "linear", "dynamic", "ntk_alpha", "yarn", "longrope", "llama3",
                                       "proportional"]


@pytest.mark.parametrize("name", _rotary.scaling_types())
def test_every_cpp_scheme_has_a_python_chain(name):
    assert name in HF_INV_FREQ_CHAINS, f"python/rotary/_hf_rotary_embedding.py has no float32 chain for {name!r}"
    assert name in CONFIGS, f"tests/python/test_hf_scaling_schemes.py has no config for {name!r}"
    spec = spec_for(name)
    assert spec.rope_type == name
    for seq_len in (None, 1 << 20):
        inv = rt.hf_inv_freq(spec, seq_len)
        assert inv.dtype == torch.float32 and inv.shape == (8,)
        exact = spec.frequencies(seq_len).inv_freq
        # transformers' float32 chain is a few float32 roundings from the exact value (Llama 3's
        # blended pairs measured at 6 ulps; tests/python/test_hf_frequencies.py derives the bounds).
        np.testing.assert_allclose(inv.double().numpy(), exact, rtol=16 * U, atol=0)


def test_python_has_no_chain_the_cpp_lacks():
    assert set(HF_INV_FREQ_CHAINS) == set(_rotary.scaling_types())


def test_an_unknown_rope_type_raises_naming_it():
    spec = spec_for("default")

    class Renamed:
        def __getattr__(self, attribute):
            return "ntk" if attribute == "rope_type" else getattr(spec, attribute)

    with pytest.raises(rotary.RotaryError, match="hf_inv_freq: rope_type 'ntk' has no Hugging Face float32 chain"):
        rt.hf_inv_freq(Renamed())
