"""rotary.apply's outputs from NumPy: the fresh arrays it returns without out= or inplace (their
shape, dtype, strides, independence and placement on a 64-byte boundary), the out= path they must
match bit for bit, and out='s checks. docs/performance.md, "Fresh outputs from Python", has why
large fresh outputs are placed and faulted in before the kernel writes them."""
import ml_dtypes
import numpy as np
import pytest

import rotary
from rotary import _apply, _rotary

DTYPES = [np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)]
SPEC = rotary.Spec.preset("llama-3.1-8b")


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def random_qk(rng, dtype, seq, q_heads=8, k_heads=2, layout="bshd"):
    def make(heads):
        shape = (1, seq, heads, 128) if layout == "bshd" else (1, heads, seq, 128)
        return rng.standard_normal(shape, dtype=np.float32).astype(dtype)

    return make(q_heads), make(k_heads)


def assert_fresh(out: np.ndarray, like: np.ndarray, inputs) -> None:
    assert out.shape == like.shape and out.dtype == like.dtype
    assert out.flags.c_contiguous and out.flags.writeable
    assert out.strides == np.empty(like.shape, like.dtype).strides
    for other in inputs:
        assert not np.shares_memory(out, other)


# seq 512 with 8 q heads of 128: q_out is 2 MiB in float32 and 1 MiB in 16 bits, at or over
# PLACED_OUTPUT_BYTES, while k_out (0.5 / 0.25 MiB) stays a plain np.empty; seq 64 keeps both under;
# at seq 4096 (20 MiB of float32 output) the kernels write with non-temporal stores.
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("seq", [64, 512, 4096])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_fresh_outputs_are_new_arrays_equal_bit_for_bit_to_out_and_inplace(rng, dtype, seq, layout):
    q, k = random_qk(rng, dtype, seq, layout=layout)
    q_before, k_before = q.copy(), k.copy()
    positions = rng.integers(0, 100_000, size=(1, seq))
    q_out, k_out = rotary.apply(q, k, positions, SPEC, layout=layout)
    assert_fresh(q_out, q, (q, k, k_out))
    assert_fresh(k_out, k, (q, k, q_out))
    # the inputs are untouched and the outputs are the rotation, not a copy
    assert q.tobytes() == q_before.tobytes() and k.tobytes() == k_before.tobytes()
    assert q_out.tobytes() != q.tobytes() and k_out.tobytes() != k.tobytes()

    q_into, k_into = np.full_like(q, 7), np.full_like(k, 7)
    got = rotary.apply(q, k, positions, SPEC, layout=layout, out=(q_into, k_into))
    assert got[0] is q_into and got[1] is k_into
    assert q_out.tobytes() == q_into.tobytes() and k_out.tobytes() == k_into.tobytes()

    q_in, k_in = q.copy(), k.copy()
    rotary.apply(q_in, k_in, positions, SPEC, layout=layout, inplace=True)
    assert q_out.tobytes() == q_in.tobytes() and k_out.tobytes() == k_in.tobytes()

    # writing the fresh output changes nothing else
    q_out[...] = 0
    assert k_out.tobytes() == k_into.tobytes() and q.tobytes() == q_before.tobytes()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_large_fresh_outputs_start_on_a_cache_line(rng, dtype):
    # NumPy's own block for 2 MiB starts 16 bytes past a page (glibc's chunk header), where the
    # kernels' 64-byte stores straddle lines and cannot stream; the placed output starts on one.
    q, k = random_qk(rng, dtype, 4096)
    assert k.nbytes >= _apply.PLACED_OUTPUT_BYTES
    q_out, k_out = rotary.apply(q, k, None, SPEC, layout="bshd")
    assert address(q_out) % 64 == 0
    assert address(k_out) % 64 == 0
    assert q_out.base is not None and q_out.base.nbytes == q_out.nbytes + 64


def test_a_fresh_output_outlives_everything_else(rng):
    q, _ = random_qk(rng, np.float32, 1024)
    expected = rotary.apply(q, None, None, SPEC, layout="bshd", out=(np.empty_like(q), None))[0].copy()
    q_out, k_out = rotary.apply(q, None, None, SPEC, layout="bshd")
    assert k_out is None
    del q
    filler = [np.ones(1 << 20, np.float32) for _ in range(4)]  # reuse any freed block
    assert q_out.tobytes() == expected.tobytes()
    assert all(float(f[0]) == 1.0 for f in filler)


def test_q_only_fresh_output_matches_out(rng):
    q, _ = random_qk(rng, np.float32, 512)
    positions = np.arange(5, 517)[None]
    q_out, k_out = rotary.apply(q, None, positions, SPEC, layout="bshd")
    q_into = np.empty_like(q)
    got_q, got_k = rotary.apply(q, None, positions, SPEC, layout="bshd", out=(q_into, None))
    assert k_out is None and got_k is None and got_q is q_into
    assert q_out.tobytes() == q_into.tobytes()


def test_out_may_be_strided_views(rng):
    q, k = random_qk(rng, np.float32, 32)
    q_big = np.full((1, 32, 8, 256), 5.0, np.float32)
    k_big = np.full((1, 32, 2, 256), 5.0, np.float32)
    q_into, k_into = q_big[..., :128], k_big[..., 128:]
    rotary.apply(q, k, None, SPEC, layout="bshd", out=(q_into, k_into))
    q_out, k_out = rotary.apply(q, k, None, SPEC, layout="bshd")
    assert np.array_equal(q_into, q_out) and np.array_equal(k_into, k_out)
    assert np.all(q_big[..., 128:] == 5.0) and np.all(k_big[..., :128] == 5.0)


def test_out_exactly_aliasing_the_inputs_is_in_place(rng):
    q, k = random_qk(rng, np.float32, 32)
    q_in, k_in = q.copy(), k.copy()
    rotary.apply(q_in, k_in, None, SPEC, layout="bshd", inplace=True)
    got = rotary.apply(q, k, None, SPEC, layout="bshd", out=(q, k))
    assert got[0] is q and q.tobytes() == q_in.tobytes() and k.tobytes() == k_in.tobytes()


def test_out_errors_name_the_argument_and_value(rng):
    q, k = random_qk(rng, np.float32, 16)
    q_out, k_out = np.empty_like(q), np.empty_like(k)
    with pytest.raises(rotary.RotaryError, match=r"out= and inplace=True exclude each other \(got both\)"):
        rotary.apply(q, k, None, SPEC, layout="bshd", inplace=True, out=(q_out, k_out))
    with pytest.raises(rotary.RotaryError,
                       match=r"out must be a pair of numpy arrays \(q_out, k_out\) \(got \(ndarray, NoneType\)\)"):
        rotary.apply(q, k, None, SPEC, layout="bshd", out=(q_out, None))
    with pytest.raises(rotary.RotaryError,
                       match=r"out must be a pair of numpy arrays \(q_out, None\) when k is None \(got ndarray\)"):
        rotary.apply(q, None, None, SPEC, layout="bshd", out=q_out)
    with pytest.raises(rotary.RotaryError, match=r"k_out must have shape \(1, 16, 2, 128\) and dtype float32 "
                                                 r"\(got shape \(1, 16, 8, 128\), float32\)"):
        rotary.apply(q, k, None, SPEC, layout="bshd", out=(q_out, q_out.copy()))
    with pytest.raises(rotary.RotaryError, match=r"q_out must have shape \(1, 16, 8, 128\) and dtype float32 "
                                                 r"\(got shape \(1, 16, 8, 128\), float16\)"):
        rotary.apply(q, k, None, SPEC, layout="bshd", out=(np.zeros(q.shape, np.float16), k_out))
    read_only = np.empty_like(q)
    read_only.flags.writeable = False
    with pytest.raises(rotary.RotaryError, match=r"q_out must be writable \(got a read-only array\)"):
        rotary.apply(q, k, None, SPEC, layout="bshd", out=(read_only, k_out))
    with pytest.raises(rotary.RotaryError, match="q_out partially overlaps q"):
        shifted = np.empty(q.size + 1, np.float32)
        shifted[1:] = q.ravel()
        rotary.apply(shifted[1:].reshape(q.shape), k, None, SPEC, layout="bshd",
                     out=(shifted[:-1].reshape(q.shape), k_out))


def test_prefault_stays_inside_a_strided_output(rng):
    # The binding's prefault_outputs touches one byte per page of a C-contiguous output; any other
    # view must be left alone, or it would write into the gaps between the view's elements (rows
    # of 384 floats, 1,536 bytes: every 4 KiB step from the start lands at a new column, most of
    # them outside the first 128).
    q, _ = random_qk(rng, np.float32, 1024)
    big = np.full((1, 1024, 8, 384), 3.0, np.float32)
    q_out = big[..., :128]
    native = _apply.resolve(SPEC, None, None, lambda: 1024)[1]
    view = _apply.numpy_view
    _rotary.apply(view(q, "q", "bshd"), None, view(q_out, "q_out", "bshd", writable=True), None, None, None, None,
                  native, "forward", 0, 0, -1, "kernels", True)
    assert np.all(big[..., 128:] == 3.0)
    expected = rotary.apply(q, None, None, SPEC, layout="bshd")[0]
    assert np.array_equal(q_out, expected)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "float16"])
def test_torch_fresh_outputs_match_out_bit_for_bit(rng, dtype_name):
    # 4,096 tokens of 8 q heads: q_out of 8 / 16 MiB, at or over the 4 huge pages from which the
    # eager call faults its fresh outputs in before the kernel (bind_torch_eager.cpp).
    torch = pytest.importorskip("torch")
    import rotary.torch as rt

    dtype = getattr(torch, dtype_name)
    q = torch.from_numpy(rng.standard_normal((1, 4096, 8, 128), dtype=np.float32)).to(dtype)
    k = torch.from_numpy(rng.standard_normal((1, 4096, 2, 128), dtype=np.float32)).to(dtype)
    positions = torch.from_numpy(rng.integers(0, 100_000, size=(1, 4096)))
    q_before, k_before = q.clone(), k.clone()
    q_out, k_out = rt.apply_rotary(q, k, positions, SPEC, layout="bshd")
    assert q_out.shape == q.shape and q_out.dtype == dtype and q_out.is_contiguous()
    assert k_out.shape == k.shape and k_out.dtype == dtype and k_out.is_contiguous()
    assert len({q.data_ptr(), k.data_ptr(), q_out.data_ptr(), k_out.data_ptr()}) == 4
    assert torch.equal(q, q_before) and torch.equal(k, k_before)
    q_into, k_into = torch.full_like(q, 7), torch.full_like(k, 7)
    rt.apply_rotary(q, k, positions, SPEC, layout="bshd", out=(q_into, k_into))
    bits = torch.int32 if dtype_name == "float32" else torch.int16
    assert q_out.view(bits).equal(q_into.view(bits)) and k_out.view(bits).equal(k_into.view(bits))
    assert not torch.equal(q_out, q)
    # and the same bits as the NumPy call's fresh output
    if dtype_name != "bfloat16":
        np_q_out, _ = rotary.apply(q.numpy(), k.numpy(), positions.numpy(), SPEC, layout="bshd")
        assert np_q_out.tobytes() == q_out.numpy().tobytes()
