"""The harness of the Hugging Face model tests (test_hf_*.py): tiny random transformers models,
the fixture that puts patch_model's process-wide function replacements back, and the call
counters that prove rotary's code ran (a patch that silently misses a model must not pass as
"bit-identical")."""
import sys

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary.torch as rt  # noqa: E402


def modeling_modules(model):
    """The transformers modeling_* modules of a model's submodules (patch_model patches each)."""
    seen = []
    for module in model.modules():
        name = type(module).__module__
        if name.startswith("transformers.models.") and sys.modules[name] not in seen:
            seen.append(sys.modules[name])
    return seen


@pytest.fixture
def restore_modeling(monkeypatch):
    """Records every apply_* function of a model's modeling modules; monkeypatch restores them
    after the test. Returns the model's modeling modules."""

    def record(model):
        modules = modeling_modules(model)
        for modeling in modules:
            for name in dir(modeling):
                if name.startswith("apply_") and callable(getattr(modeling, name)):
                    monkeypatch.setattr(modeling, name, getattr(modeling, name))
        return modules

    return record


def is_rotary_function(fn) -> bool:
    """An apply function patch_model installed (it keeps transformers' own as rotary_original;
    earlier versions installed functools.partial objects of rotary.torch's functions)."""
    return hasattr(fn, "rotary_original") or getattr(getattr(fn, "func", None), "__module__", "").startswith("rotary")


def counting(monkeypatch, model):
    """Wraps the apply functions patch_model installed (they carry rotary_original) and
    RotaryEmbedding.forward with counters. Eager only: torch.compile would trace the counters."""
    calls = {"embedding": 0, "apply": 0}
    for modeling in modeling_modules(model):
        for name in dir(modeling):
            fn = getattr(modeling, name)
            if name.startswith("apply_") and is_rotary_function(fn):

                def wrapped(*args, _fn=fn, **kwargs):
                    calls["apply"] += 1
                    return _fn(*args, **kwargs)

                monkeypatch.setattr(modeling, name, wrapped)
    # A rounding other than "like_torch" reaches the model through its modules' own copies of
    # their methods (patch_model binds them per instance), which read the apply functions from a
    # namespace of their own: counted there.
    namespaces = {}
    for module in model.modules():
        for value in vars(module).values():
            function = getattr(value, "__func__", None)
            if getattr(function, "rotary_rounding", None) is not None:
                namespaces[id(function.__globals__)] = function.__globals__
    for namespace in namespaces.values():
        for name, fn in list(namespace.items()):
            if name.startswith("apply_") and is_rotary_function(fn):

                def wrapped(*args, _fn=fn, **kwargs):
                    calls["apply"] += 1
                    return _fn(*args, **kwargs)

                monkeypatch.setitem(namespace, name, wrapped)
    forward = rt.RotaryEmbedding.forward

    def counted_forward(self, *args, **kwargs):
        calls["embedding"] += 1
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(rt.RotaryEmbedding, "forward", counted_forward)
    return calls


def kernel_calls(monkeypatch):
    """Counts the calls of rotary's C++ rotation (inside the custom op rotary::apply_cos_sin, which
    runs eagerly under torch.compile too): two per attention layer and forward (q and k)."""
    import rotary._rotary as native

    calls = {"kernel": 0}
    original = native.apply_cos_sin

    def counted(*args, **kwargs):
        calls["kernel"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(native, "apply_cos_sin", counted)
    return calls


def small(config_cls, **kwargs):
    """A tiny config: 2 layers, hidden 64, eager attention."""
    base = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, attn_implementation="eager", pad_token_id=0, bos_token_id=1, eos_token_id=2)
    base.update(kwargs)
    return config_cls(**base)


def _llama():
    return transformers.LlamaForCausalLM, small(transformers.LlamaConfig, max_position_embeddings=256)


def _qwen3():
    return transformers.Qwen3ForCausalLM, small(transformers.Qwen3Config, head_dim=16, max_position_embeddings=256)


def _gemma3(window=4):
    return transformers.Gemma3ForCausalLM, small(
        transformers.Gemma3TextConfig, head_dim=16, sliding_window=window, max_position_embeddings=256,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"], num_hidden_layers=3)


# The attention backends' model families (test_torch_attention.py, test_torch_fused.py): Llama,
# Qwen3 and Gemma 3 with a sliding window of 4 tokens and both layer types. (model class, config).
ATTENTION_FAMILIES = {"llama": _llama, "qwen3": _qwen3, "gemma3": _gemma3}


def prompt(batch=2, seq=12, seed=7):
    """Random token ids [batch, seq] of the tiny vocabulary (3..96: no pad, bos or eos)."""
    return torch.randint(3, 97, (batch, seq), generator=torch.Generator().manual_seed(seed))


def logits(model, ids, **kwargs):
    """A causal LM's float64 logits without autograd."""
    with torch.no_grad():
        return model(ids, **kwargs).logits.double()


def counted_calls(monkeypatch, owner, name):
    """Wraps owner.name with a counter (calls["n"]): a path that silently ran other code must fail."""
    calls = {"n": 0}
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def build(model_cls, config, dtype, seed=0):
    torch.manual_seed(seed)
    return model_cls(config).to(dtype).eval()


def ids(batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, 97, (batch, seq), generator=g)}


def rotary_module(model):
    """The text rotary-embedding module (HF's has a config; a vision tower's does not)."""
    return next(m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")
                and (isinstance(m, rt.RotaryEmbedding) or getattr(m, "config", None) is not None))


def output(model, inputs):
    with torch.no_grad():
        out = model(**inputs)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """These tiny models run ~50x faster on one intra-op thread: with two OpenMP threads on a
    shared 2-core machine every small op pays a thread barrier (a 64x64 matmul: 18 ms instead of
    7 us under load). Bit-identity does not depend on it: each test runs transformers and rotary
    under the same setting. Restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
