"""Pickling and copying rotary's specs and tables: a RopeSpec pickles by its fields (bind_spec.cpp,
RopeSpec's py::pickle), a Spec by its native spec and layer specs; Specs and Tables are immutable,
so copy.copy and copy.deepcopy return the object itself (a deep-copied model shares them)."""
import copy
import pickle

import numpy as np
import pytest

import rotary
from rotary import _rotary

GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4,
          "layer_types": ["sliding_attention", "full_attention"],
          "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}


def fields(native) -> tuple:
    """Every field of a RopeSpec, as its pickle state holds them."""
    return native.__getstate__()


@pytest.mark.parametrize("name", [row[0] for row in rotary.presets()])
def test_every_preset_round_trips_through_pickle(name):
    spec = rotary.Spec.preset(name)
    native = pickle.loads(pickle.dumps(spec._native))
    assert isinstance(native, _rotary.RopeSpec) and native is not spec._native
    assert fields(native) == fields(spec._native)
    back = rotary.Spec(native)
    assert repr(back) == repr(spec)
    ours, theirs = back.frequencies(), spec.frequencies()
    assert np.array_equal(ours.inv_freq, theirs.inv_freq) and ours.attention_scaling == theirs.attention_scaling
    assert copy.deepcopy(spec._native).__getstate__() == fields(spec._native)


def test_the_state_holds_every_scaling_field():
    """YaRN's and LongRoPE's own fields come back (not only those Spec.replace can set)."""
    yarn = rotary.Spec.preset("qwen2.5-7b-yarn")._native
    state = fields(yarn)
    assert state[0] == "RopeSpec/1" and state[6] == "neox" and state[7][0] == "yarn" and state[7][1] == 4.0
    assert state[7][2] == 32768
    longrope = rotary.Spec.preset("phi-3-mini-128k")._native
    back = pickle.loads(pickle.dumps(longrope))
    assert back.short_factor == longrope.short_factor and len(back.long_factor) == 48
    assert back.long_factor == longrope.long_factor


def test_a_spec_with_layer_types_pickles_and_copies_are_itself():
    spec = rotary.Spec.from_hf_config(GEMMA3)
    back = pickle.loads(pickle.dumps(spec))
    assert back is not spec and back.layer_type_names == ("full_attention", "sliding_attention")
    assert repr(back.for_layer_type("full_attention")) == repr(spec.for_layer_type("full_attention"))
    assert back.model_type == "gemma3_text" and back._handle != spec._handle  # a handle of its own
    assert copy.deepcopy(spec) is spec and copy.copy(spec) is spec
    table = rotary.Table(spec)
    assert copy.deepcopy(table) is table and copy.copy(table) is table


@pytest.mark.parametrize("state, message", [
    (("RopeSpec/0",), r"cannot unpickle this state \(expected 16 fields starting with 'RopeSpec/1', got 1 fields\)"),
    ("style", r"cannot unpickle style 'sideways'"),
    ("rope_type", r"cannot unpickle rope_type 'warp'"),
])
def test_a_bad_state_is_refused_by_name(state, message):
    good = list(fields(rotary.Spec.preset("llama-3.1-8b")._native))
    if state == "style":
        good[6] = "sideways"
        state = tuple(good)
    elif state == "rope_type":
        good[7] = ("warp",) + tuple(good[7][1:])
        state = tuple(good)
    native = _rotary.RopeSpec.__new__(_rotary.RopeSpec)
    with pytest.raises(rotary.RotaryError, match=message):
        native.__setstate__(state)
