"""rotary.torch's device seam: which backend computes a call, chosen by the device of its tensors.

A backend is a name, the torch device types it runs on, and one function per op it implements
(apply: rotary::apply_rotary's body; attention: rotary::attention's). Each function takes the
op's own arguments (the tensors, then the rest as the op passes them: _torch_ops._run,
_torch_attention._run) and must run the C++ argument checks before writing a byte: the native
backend's one binding call checks and computes; any other calls the binding's "checks"
implementation first (shapes, strides, overlap, positions, seq_len; no data is read, so the
checks hold for tensors of any device). docs/backends.md describes the seam.

The automatic choice for a device type is its first registered backend that implements the op;
device types without an entry fall back to the backends for any device that holds values (the
pure-torch apply). None left: RotaryError naming the tensor and its device. The Triton backend
(_triton_rope.py) is registered here on first use, through the loader _torch_ops names for it
(register_backend_loader): importing rotary never imports triton. Its automatic choice for CUDA
tensors is made per call in _torch_ops (triton_serves), not by this registry's order.
"""
from __future__ import annotations

from typing import Callable, Iterable, NamedTuple, Optional

from ._rotary import RotaryError

OPS = ("apply", "attention")


class Backend(NamedTuple):
    name: str
    device_types: Optional[frozenset]  # None: any device that holds values (every type but "meta")
    apply: Optional[Callable] = None
    attention: Optional[Callable] = None

    def runs_on(self, device_type: str) -> bool:
        if self.device_types is None:
            return device_type != "meta"
        return device_type in self.device_types


_BACKENDS: dict = {}   # name -> Backend
_BY_DEVICE: dict = {}  # device type -> backend names, preferred first
_ANY_DEVICE: list = []  # backend names for device types without an entry of their own
# (device type, op) -> the automatic choice, found once: a decode step's op body pays one dict read
# here. Emptied whenever the registry changes.
_CHOICES: dict = {}
# name -> a function that registers backend `name` when it is first asked for by name (the
# Triton backend: its module, and triton, load only then).
_LOADERS: dict = {}

# Why a device has no backend, per op, for the error (what the user can do about it).
_NO_BACKEND_HINTS = {
    "apply": "move the tensors to a device with one",
    "attention": "rotary's attention backends run on the CPU (backend 'native'); rotary.torch.attention runs "
                 "CUDA tensors through its Triton kernel (docs/gpu.md): move q, k and v to one of them",
}


def register_backend(name: str, device_types: Optional[Iterable[str]] = None, *, apply: Optional[Callable] = None,
                     attention: Optional[Callable] = None, default_for: Iterable[str] = ()) -> Backend:
    """Adds backend `name`, or gives an existing one more ops (its device types must then agree).
    default_for: device types ("cpu", "cuda", "*" for any device holding values) whose automatic
    choice it becomes, ahead of those registered before."""
    types = None if device_types is None else frozenset(device_types)
    old = _BACKENDS.get(name)
    if old is not None and old.device_types != types:
        raise RotaryError(f"backend {name!r} runs on {_types_text(old.device_types)}; it cannot be registered again "
                          f"for {_types_text(types)}")
    backend = Backend(name, types, apply or (old.apply if old else None),
                      attention or (old.attention if old else None))
    _BACKENDS[name] = backend
    _CHOICES.clear()
    for device_type in default_for:
        order = _ANY_DEVICE if device_type == "*" else _BY_DEVICE.setdefault(device_type, [])
        if name in order:
            order.remove(name)
        order.insert(0, name)
    return backend


def register_backend_loader(name: str, loader: Callable[[], None]) -> None:
    """loader() registers backend `name`; select_backend calls it when `name` is asked for and not
    registered (first use, or after unregister_backend)."""
    _LOADERS[name] = loader


def unregister_backend(name: str) -> None:
    """Removes backend `name` and its automatic choices (tests; a backend that failed to load)."""
    _BACKENDS.pop(name, None)
    _CHOICES.clear()
    for order in (*_BY_DEVICE.values(), _ANY_DEVICE):
        if name in order:
            order.remove(name)


def backends() -> dict:
    """The registered backends by name (a copy)."""
    return dict(_BACKENDS)


def select_backend(tensor, backend: Optional[str] = None, *, op: str = "apply", name: str = "q") -> Backend:
    """The backend that computes `op` for `tensor` (named `name` in errors): `backend` by name
    ("native", "reference", "torch", ...) if given, else the device type's automatic choice."""
    device = tensor.device
    if backend is None:
        chosen = _CHOICES.get((device.type, op))
        if chosen is not None:
            return chosen
    if op not in OPS:
        raise RotaryError(f"op must be one of {', '.join(OPS)} (got {op!r})")
    if backend is not None:
        chosen = _BACKENDS.get(backend)
        if chosen is None and backend in _LOADERS:
            _LOADERS[backend]()
            chosen = _BACKENDS.get(backend)
        if chosen is None or getattr(chosen, op) is None:
            known = ", ".join([repr(n) for n, b in _BACKENDS.items() if getattr(b, op) is not None]
                              + [repr(n) for n in _LOADERS if n not in _BACKENDS and op == "apply"])
            raise RotaryError(f"backend must be one of {known} for {op} (got {backend!r})")
        if not chosen.runs_on(device.type):
            raise RotaryError(f"{name} is on {device} and backend {backend!r} runs on "
                              f"{_types_text(chosen.device_types)} only")
        return chosen
    order = _BY_DEVICE.get(device.type, [])
    if device.type != "meta":
        order = order + _ANY_DEVICE
    for candidate in order:
        chosen = _BACKENDS.get(candidate)
        if chosen is not None and getattr(chosen, op) is not None and chosen.runs_on(device.type):
            _CHOICES[(device.type, op)] = chosen
            return chosen
    raise RotaryError(f"{name} is on {device} and no backend for {device.type} is available for {op}: "
                      f"{_NO_BACKEND_HINTS[op]}")


def check_on_cpu(tensors) -> None:
    """The CPU backends' rule for the tensors besides q: (name, tensor or None) pairs."""
    for name, tensor in tensors:
        if tensor is not None and tensor.device.type != "cpu":
            raise RotaryError(f"{name} must be a CPU tensor: rotary's attention runs on the CPU (got {name} on "
                              f"{tensor.device})")


def _types_text(types: Optional[frozenset]) -> str:
    return "any device holding values" if types is None else ", ".join(sorted(types))
