"""The device seam of rotary.torch (python/rotary/_backends.py, docs/backends.md): which backend
computes a call, by the device type of its tensors; the named error for a device without one; a
registered backend receives the op's tensors. No GPU here: devices are the meta device, or
stand-ins whose .device is cuda:0 (select_backend reads nothing else)."""
import pytest

import rotary

import torch  # required: a missing dependency fails, never skips
import rotary.torch as rt  # noqa: E402,F401  (registers the native, reference, shapes and torch backends)
from rotary import _backends

SPEC = rotary.Spec.preset("llama-3.1-8b")


class OnDevice:
    """A stand-in for a tensor on a device this machine lacks."""

    def __init__(self, device):
        self.device = torch.device(device)


@pytest.fixture
def registry():
    """The registry as it was, restored after the test."""
    saved = (dict(_backends._BACKENDS), {t: list(o) for t, o in _backends._BY_DEVICE.items()},
             list(_backends._ANY_DEVICE))
    yield _backends
    _backends._BACKENDS.clear()
    _backends._BACKENDS.update(saved[0])
    _backends._BY_DEVICE.clear()
    _backends._BY_DEVICE.update(saved[1])
    _backends._ANY_DEVICE[:] = saved[2]
    _backends._CHOICES.clear()


def test_the_automatic_choice_per_device_type():
    cpu = torch.zeros(1)
    assert _backends.select_backend(cpu).name == "native"
    assert _backends.select_backend(cpu, op="attention").name == "native"
    assert _backends.select_backend(cpu, "reference").name == "reference"
    # CUDA (and every device holding values) keeps the pure-torch apply it had before the seam.
    assert _backends.select_backend(OnDevice("cuda:0")).name == "torch"
    assert _backends.select_backend(torch.empty(1, device="meta")).name == "shapes"


def test_attention_on_a_device_without_a_backend_is_refused_by_name():
    with pytest.raises(rotary.RotaryError) as error:
        _backends.select_backend(OnDevice("cuda:0"), op="attention")
    assert str(error.value) == (
        "q is on cuda:0 and no backend for cuda is available for attention: rotary's attention backends run on the "
        "CPU (backend 'native'); rotary.torch.attention runs CUDA tensors through its Triton kernel (docs/gpu.md): "
        "move q, k and v to one of them")
    with pytest.raises(rotary.RotaryError, match=r"^k is on meta and no backend for meta is available for attention"):
        _backends.select_backend(torch.empty(1, device="meta"), op="attention", name="k")


def test_a_named_backend_must_exist_and_run_on_the_device():
    with pytest.raises(rotary.RotaryError) as error:
        _backends.select_backend(OnDevice("cuda:1"), "native")
    assert str(error.value) == "q is on cuda:1 and backend 'native' runs on cpu only"
    with pytest.raises(rotary.RotaryError) as error:
        _backends.select_backend(torch.zeros(1), "cuda-graphs")
    # 'triton' is named too: it registers on first use (its loader), without importing triton before.
    assert str(error.value) == ("backend must be one of 'native', 'reference', 'shapes', 'torch', 'triton' for "
                                "apply (got 'cuda-graphs')")
    with pytest.raises(rotary.RotaryError, match=r"^op must be one of apply, attention \(got 'rotate'\)$"):
        _backends.select_backend(torch.zeros(1), op="rotate")


def test_a_registered_backend_becomes_its_devices_choice_and_leaves_cleanly(registry):
    registry.register_backend("fake-gpu", {"cuda"}, apply=lambda *args: None, default_for=("cuda",))
    assert registry.select_backend(OnDevice("cuda:0")).name == "fake-gpu"
    assert registry.select_backend(torch.zeros(1)).name == "native"  # the CPU is untouched
    registry.unregister_backend("fake-gpu")
    assert registry.select_backend(OnDevice("cuda:0")).name == "torch"
    with pytest.raises(rotary.RotaryError, match=r"^backend 'native' runs on cpu; it cannot be registered again for "
                                                 r"cuda$"):
        registry.register_backend("native", {"cuda"}, apply=lambda *args: None)


# offsets= takes apply_rotary's Python path (the one-call eager fast path, _rotary.torch_apply_eager,
# is the native backend in C++ and takes positions only).
def test_apply_rotary_hands_the_call_to_the_backend_of_its_device(registry):
    calls = []
    registry.register_backend("fake", {"cpu"}, apply=lambda *args: calls.append(args), default_for=("cpu",))
    q, k = torch.ones(2, 5, 32, 128), torch.ones(2, 5, 8, 128)
    offsets = torch.tensor([0, 7])
    got_q, got_k = rt.apply_rotary(q, k, None, SPEC, offsets=offsets, layout="bshd")
    assert len(calls) == 1
    called = calls[0]
    assert called[0] is q and called[1] is k and called[4] is None and called[5] is offsets
    assert called[2] is got_q and called[3] is got_k  # the fresh outputs of q's and k's shapes
    assert got_q.shape == q.shape and got_k.shape == k.shape
    assert called[11] == "bshd" and called[12] == "forward"  # layout, direction: _run's arguments in order
    registry.unregister_backend("fake")
    got_q, _ = rt.apply_rotary(q, k, None, SPEC, offsets=offsets, layout="bshd")
    assert len(calls) == 1 and torch.equal(got_q[0, 0], q[0, 0])  # native again: position 0 is the identity


def test_apply_rotary_on_a_device_without_a_backend_is_refused_by_name(registry):
    registry.unregister_backend("native")
    registry.unregister_backend("torch")
    q = torch.ones(2, 5, 32, 128)
    with pytest.raises(rotary.RotaryError) as error:
        rt.apply_rotary(q, None, None, SPEC, offsets=torch.tensor([0, 7]), layout="bshd")
    assert str(error.value) == ("q is on cpu and no backend for cpu is available for apply: move the tensors to a "
                                "device with one")


def test_attention_hands_the_call_to_the_backend_of_its_device(registry):
    calls = []
    registry.register_backend("fake", {"cpu"}, attention=lambda *args: calls.append(args), default_for=("cpu",))
    q, k, v = torch.ones(1, 2, 3, 8), torch.ones(1, 2, 4, 8), torch.ones(1, 2, 4, 8)
    out = rt.attention(q, k, v, causal=True)
    assert len(calls) == 1 and calls[0][0] is q and calls[0][1] is k and calls[0][2] is v and calls[0][3] is out
    assert calls[0][15] is True  # causal, in _torch_attention._run's order
    assert registry.select_backend(q).name == "native"  # apply still has the native backend
    registry.unregister_backend("fake")
    registry.unregister_backend("native")
    with pytest.raises(rotary.RotaryError, match=r"^q is on cpu and no backend for cpu is available for attention"):
        rt.attention(q, k, v)


def test_the_real_backends_still_compute():
    q = torch.arange(2 * 3 * 2 * 128, dtype=torch.float32).reshape(2, 3, 2, 128) / 256
    positions = torch.tensor([[0, 1, 2], [3, 4, 5]])
    native, _ = rt.apply_rotary(q, None, positions, SPEC, layout="bshd")
    pure, _ = rt.apply_rotary(q, None, positions, SPEC, layout="bshd", backend="torch")
    assert torch.equal(native[0, 0], q[0, 0])  # position 0: the identity
    assert torch.allclose(native, pure, rtol=0, atol=1e-6)
    assert not torch.equal(native[1], q[1])


def test_a_cuda_descriptor_is_checked_then_refused_by_the_library():
    """The tensor descriptor's optional sixth field, the device (src/python/tensor_arg.hpp): the C++
    checks hold for a CUDA view (no data read), compare devices, and the kernels refuse it by name.
    The "CUDA" memory here is a CPU tensor's, so a kernel that ran anyway would overwrite q_out."""
    from rotary import _rotary, _torch_ops
    q = torch.ones(1, 3, 32, 128)
    q_out = torch.full_like(q, 7.0)
    call = _torch_ops._prepare(q, None, q_out, None, None, None, None, SPEC._handle, "", "", -1, "bshd", "forward",
                               0, 0)
    rest = call.args[4:]

    def on(descriptor, device):
        return descriptor + (device,)

    cuda_call = (on(call.args[0], "cuda:0"), None, on(call.args[2], "cuda:0"), None) + rest
    _rotary.apply(*cuda_call, "checks")
    with pytest.raises(rotary.RotaryError, match=r"apply: q is on cuda:0; this build has no backend for cuda \(the "
                                                 r"GPU path is in the Python package: rotary.torch\)"):
        _rotary.apply(*cuda_call, "kernels")
    with pytest.raises(rotary.RotaryError, match=r"apply \(reference\): q is on cuda:0; the float64 reference"):
        _rotary.apply(*cuda_call, "reference")
    mixed = (on(call.args[0], "cuda:1"), None, call.args[2], None) + rest
    with pytest.raises(rotary.RotaryError, match=r"apply: q_out is on cpu but q is on cuda:1"):
        _rotary.apply(*mixed, "checks")
    with pytest.raises(rotary.RotaryError, match=r"q device must be cpu, cuda or cuda:<index> \(got mps:0\)"):
        _rotary.apply(on(call.args[0], "mps:0"), None, call.args[2], None, *rest, "checks")
    assert torch.all(q_out == 7.0)
    # CPU tensors keep the five-field descriptor, and CPU calls compute.
    assert len(call.args[0]) == 5
    _rotary.apply(*call.args, "kernels")
    assert torch.equal(q_out[0, 0], q[0, 0])
