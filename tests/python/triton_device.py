"""Where the Triton tests run (test_triton_rope.py, test_triton_attention.py): CPU tensors in
Triton's interpreter by default, or a GPU with ROTARY_TEST_DEVICE=cuda (scripts/gpu-check.sh).
The interpreter is switched on per test, before any launch: triton.jit reads TRITON_INTERPRET
when a kernel module is first imported."""
import os

import pytest
import torch

DEVICE = os.environ.get("ROTARY_TEST_DEVICE", "cpu")
if DEVICE != "cpu" and not (DEVICE == "cuda" and torch.cuda.is_available()):
    raise RuntimeError(f"ROTARY_TEST_DEVICE must be 'cpu' or 'cuda' with a GPU torch can see (got {DEVICE!r})")


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def dev(t):
    """t on the device the triton calls run on (the same tensor on the CPU); None stays None."""
    return None if t is None else t.to(DEVICE)
