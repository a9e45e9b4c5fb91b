"""The tensor descriptor protocol at its one C++ entry (src/python/tensor_arg.cpp), called straight
through rotary._rotary: a hand-built (address, dtype, layout, shape, strides) tuple is read with
its strides in elements, an (address, count) tuple as int64 positions, and each malformed part is
a RotaryError naming the argument and the value. A replacement protocol (the buffer protocol,
DLPack) has to pass these unchanged."""
import re

import numpy as np
import pytest

from rotary import RotaryError, _rotary

SPEC = _rotary.preset("llama-3.1-8b")["spec"]
TABLE = _rotary.CosSinTable(SPEC, "exact", "stored", 0, 16, [], 1 << 30)
HALF = SPEC.head_dim // 2  # 64 pairs, half-split (neox): pair i is dims i and i + 64


def descriptor(array, layout="bshd"):
    return (array.__array_interface__["data"][0], "float32", layout, array.shape,
            tuple(s // array.itemsize for s in array.strides))


def ints(array):
    return (array.__array_interface__["data"][0], array.size)


def rotated(q, positions):
    """q [batch, seq, heads, dim] rotated by the table's float64 frequencies, in float64."""
    inv_freq = np.frombuffer(TABLE.inv_freq, dtype=np.float64)
    angle = np.asarray(positions, dtype=np.float64).reshape(1, -1, 1, 1) * inv_freq
    x1, x2 = q[..., :HALF].astype(np.float64), q[..., HALF:].astype(np.float64)
    return np.concatenate([x1 * np.cos(angle) - x2 * np.sin(angle), x2 * np.cos(angle) + x1 * np.sin(angle)], -1)


def apply(q, q_out, per_token=None, q_descriptor=None):
    _rotary.apply(descriptor(q) if q_descriptor is None else q_descriptor, None, descriptor(q_out), None,
                  None if per_token is None else ints(per_token), None, None, TABLE, "forward", 0, 0, -1, "kernels")


def q_values(shape=(1, 3, 2, 2 * HALF)):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_hand_built_descriptor_rotates_by_position():
    q = q_values()
    out = np.zeros_like(q)
    apply(q, out)
    assert TABLE.attention_scaling == 1.0
    np.testing.assert_array_equal(out[:, 0], q[:, 0])  # position 0: cos 1, sin 0
    np.testing.assert_allclose(out, rotated(q, [0, 1, 2]), rtol=0, atol=2e-6)


def test_strides_are_read_in_elements():
    wide = q_values((1, 6, 2, 2 * HALF))
    q = wide[:, ::2]  # every other token: a seq stride of 2 * 2 * 128 = 512 elements
    assert descriptor(q)[4] == (1536, 512, 128, 1)
    out = np.zeros(q.shape, dtype=np.float32)
    apply(q, out)
    np.testing.assert_allclose(out, rotated(np.ascontiguousarray(q), [0, 1, 2]), rtol=0, atol=2e-6)


def test_int64_buffer_gives_per_token_positions():
    q = q_values()
    out = np.zeros_like(q)
    apply(q, out, per_token=np.array([5, 7, 11], dtype=np.int64))
    np.testing.assert_allclose(out, rotated(q, [5, 7, 11]), rtol=0, atol=2e-6)


@pytest.mark.parametrize("change, message", [
    (lambda d: d[:4], "q: internal descriptor must have 5 or 6 fields"),
    (lambda d: (d[0], "int8") + d[2:], "q dtype must be float32, bfloat16, float16 or float64 (got int8)"),
    (lambda d: d[:2] + ("bsdh",) + d[3:], "layout must be bshd, bhsd, sbhd or thd (got bsdh)"),
    (lambda d: d[:3] + (d[3][1:], d[4][1:]), "q must have 4 dimensions for layout bshd (got 3)"),
    (lambda d: d[:3] + (d[3][:3] + (1, 2 * HALF), d[4]), "q must have 4 dimensions for layout bshd (got 5)"),
])
def test_malformed_descriptor_is_refused_by_name(change, message):
    q = q_values()
    out = np.zeros_like(q)
    with pytest.raises(RotaryError, match="^" + re.escape(message) + "$"):
        apply(q, out, q_descriptor=change(descriptor(q)))
    assert not out.any()  # refused before any byte is written
