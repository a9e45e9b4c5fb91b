"""rotary.torch.patch_model, unpatch_model and patched: a transformers model's rotary-embedding
modules, GPT-J's position tables and its modeling modules' apply functions replaced by rotary's,
each after a probe shows it gives transformers' bits. The public names are re-exported by
rotary.torch (python/rotary/torch.py).
"""
from __future__ import annotations

import copy
import gc
import inspect
import itertools
import sys
import types
import weakref
from typing import Optional

import torch

from ._rotary import RotaryError
from ._spec import Spec
from ._hf_apply_variants import _Refusal, _function_candidates, _pick_function, _same
from ._hf_rotary_embedding import (COS_SIN_LAYOUTS, RotaryEmbedding, _exact_sinusoidal_positions,
                                   _hf_sinusoidal_positions, _layer_spec)
from ._torch_cos_sin import ROUNDINGS
from ._torch_fused_wrapper import _make_wrapper, drop_unused_wrapper

# ---- patch_model ------------------------------------------------------------------------------------------
_APPLY_NAMES = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave", "apply_multimodal_rotary_pos_emb")
# Probe positions: short, past every context a test or real model trains at (dynamic NTK grows,
# LongRoPE takes its long factors), short again (dynamic NTK resets, LongRoPE back to short).
_PROBE_STARTS = (0, 100_000, 3)
_PROBE_SEQ = 9
_PROBE_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _forward_parameters(module) -> tuple:
    """The names of forward's parameters after self (decorators followed through __wrapped__)."""
    try:
        parameters = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(name for name in parameters if name != "self")


def _hf_layer_types(module) -> tuple:
    """The layer types a per-layer-type module (Gemma3RotaryEmbedding and its kin) serves: those
    with their own rope_parameters (transformers keeps a rope_type for each)."""
    rope_type = getattr(module, "rope_type", None)
    return tuple(sorted(rope_type)) if isinstance(rope_type, dict) else ()


def _probe_positions(spec: Spec, start: int) -> torch.Tensor:
    """[2, seq] positions from start (row 1 three later), [3, 2, seq] for M-RoPE (h, w ahead of t)."""
    base = torch.arange(_PROBE_SEQ, dtype=torch.int64) + start
    rows = torch.stack((base, base + 3))
    if spec.axes == "mrope":
        return torch.stack((rows, rows + 1, rows + 2))
    return rows


def _carry_buffers(new: RotaryEmbedding, old, prefix: str) -> None:
    """new's inv_freq buffers in the dtype and on the device of old's (prefix: Gemma 3's per-type names)."""
    for name in ("inv_freq", "original_inv_freq"):
        given = getattr(old, prefix + name, None)
        if isinstance(given, torch.Tensor):
            setattr(new, name, getattr(new, name).to(device=given.device, dtype=given.dtype))


def _build_embedding(source, layer_types, old, precision, layout, cos_sin_dtype):
    """source: transformers' config (per layer type: each type's spec as transformers reads it) or
    a single-RoPE spec. The inv_freq buffers take the dtype and device of old's."""
    new = RotaryEmbedding(source, precision=precision, cos_sin_layout=layout, cos_sin_dtype=cos_sin_dtype)
    if layer_types:
        for name in layer_types:
            _carry_buffers(new.layers[name], old, f"{name}_")
    else:
        _carry_buffers(new, old, "")
    return new


def _probe_embedding(source, probe_spec, layer_types, old, layout, cos_sin_dtype):
    """Runs a fresh copy of transformers' module and rotary's precision="hf" reproduction on the
    probe positions in every dtype, per layer type; raises _Refusal at the first difference."""
    theirs = copy.deepcopy(old)
    ours = _build_embedding(source, layer_types, old, "hf", layout, cos_sin_dtype)
    device = next((b.device for b in old.buffers()), torch.device("cpu"))
    for x_dtype in _PROBE_X_DTYPES:
        x = torch.zeros(1, dtype=x_dtype, device=device)
        for start in _PROBE_STARTS:
            position_ids = _probe_positions(probe_spec, start).to(device)
            for layer_type in layer_types or (None,):
                args = (x, position_ids) if layer_type is None else (x, position_ids, layer_type)
                what = f"cos/sin at positions {start}..{start + _PROBE_SEQ + 2} ({x_dtype}" + \
                       (f", layer type {layer_type!r})" if layer_type else ")")
                try:
                    expected = theirs(*args)
                except Exception as error:  # transformers' own module fails: nothing to reproduce
                    raise _Refusal(f"{what}: transformers' module raises {type(error).__name__}: {error}") from None
                try:
                    got = ours(*args)
                except Exception as error:
                    raise _Refusal(f"{what}: rotary raises {type(error).__name__}: {error}") from None
                _same(expected, got, what)


def _plan_embedding(model_name, path, module, precision):
    """The RotaryEmbedding replacing transformers' module at path and the specs it serves, or RotaryError."""
    where = f"patch_model: cannot serve {model_name} exactly: {path} ({type(module).__name__})"
    parameters = _forward_parameters(module)
    if parameters[:2] != ("x", "position_ids") or len(parameters) > 3 or (
            len(parameters) == 3 and parameters[2] != "layer_type"):
        raise RotaryError(f"{where} has forward({', '.join(parameters)}); rotary serves forward(x, position_ids) "
                          "and forward(x, position_ids, layer_type); nothing was patched")
    try:
        spec = Spec.from_hf_config(module.config)
    except RotaryError as error:
        raise RotaryError(f"{where}: rotary cannot read its config: {error}; nothing was patched") from None
    layer_types = _hf_layer_types(module) if len(parameters) == 3 else ()
    missing = [name for name in layer_types if name not in spec.layer_type_names]
    if missing:
        raise RotaryError(f"{where} has RoPE parameters for layer types {', '.join(layer_types)}, rotary's config "
                          f"reader finds {', '.join(spec.layer_type_names) or 'none'} (missing "
                          f"{', '.join(missing)}); nothing was patched")
    if layer_types:
        source = module.config  # each layer type's spec as transformers' module reads it (_layer_spec)
        try:
            probe_spec = _layer_spec(module.config, spec, layer_types[0])
        except (RotaryError, ValueError) as error:
            raise RotaryError(f"{where}: rotary cannot read layer type {layer_types[0]!r}: {error}; "
                              "nothing was patched") from None
    else:
        # One RoPE for every layer: the config's main parameters, without any per-type ones.
        source = probe_spec = spec.replace() if spec.layer_type_names else spec
    # Candidates: the layout of the spec's pair style first, then the others; cos/sin in x's dtype
    # first, then float32 (OLMo 3). The first that reproduces transformers' module bit for bit wins.
    layouts = [probe_spec.style] + [name for name in COS_SIN_LAYOUTS if name != probe_spec.style]
    reasons = []
    for layout, cos_sin_dtype in itertools.product(layouts, (None, torch.float32)):
        try:
            _probe_embedding(source, probe_spec, layer_types, module, layout, cos_sin_dtype)
        except _Refusal as refusal:
            reasons.append(f"as {layout!r}{'' if cos_sin_dtype is None else ' float32'}: {refusal}")
            continue
        except (RotaryError, ValueError) as error:
            reasons.append(f"as {layout!r}: {error}")
            continue
        new = _build_embedding(source, layer_types, module, precision, layout, cos_sin_dtype)
        return new, [new.layers[t].spec for t in layer_types] if layer_types else [new.spec]
    raise RotaryError(f"{where}: its cos/sin are not rotary's ({reasons[0]}); nothing was patched")


def _plan_position_tables(model_name, model, precision):
    """GPT-J and CodeGen keep a sin | cos table per attention layer (embed_positions, from
    create_sinusoidal_positions) instead of a rotary-embedding module: [(module, new table)], the
    spec, or ([], None) for models without one."""
    holders = [(path, m) for path, m in model.named_modules() if isinstance(getattr(m, "embed_positions", None),
                                                                           torch.Tensor)
               and hasattr(sys.modules[type(m).__module__], "create_sinusoidal_positions")]
    if not holders:
        return [], None
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    where = f"patch_model: cannot serve {model_name} exactly"
    try:
        spec = Spec.from_hf_config(config)
    except RotaryError as error:
        raise RotaryError(f"{where}: rotary cannot read its config: {error}; nothing was patched") from None
    plans, mirrors = [], {}
    for path, holder in holders:
        table = holder.embed_positions
        rows = table.shape[0]
        if rows not in mirrors:
            mirrors[rows] = _hf_sinusoidal_positions(spec, rows)
        mirror = mirrors[rows].to(device=table.device, dtype=table.dtype)
        try:
            _same(table, mirror, f"{path}.embed_positions")
        except _Refusal as refusal:
            raise RotaryError(f"{where}: {refusal} (rotary's spec: {spec!r}); nothing was patched") from None
        if precision == "exact":
            key = ("exact", rows)
            if key not in mirrors:
                mirrors[key] = _exact_sinusoidal_positions(spec, rows)
            mirror = mirrors[key].to(device=table.device, dtype=table.dtype)
        plans.append((path, holder, mirror))
    return plans, spec


def _modeling_modules(model) -> list:
    """The transformers modeling_* modules that define the model's submodules (a composite model's
    language model may live in another file than the model class)."""
    seen = []
    for module in model.modules():
        name = type(module).__module__
        if name.startswith("transformers.models.") and sys.modules.get(name) not in seen:
            seen.append(sys.modules[name])
    return seen


def _marked(function, original, description, rounding):
    function.rotary_original = original
    function.rotary_variant = description
    function.rotary_rounding = rounding
    return function


def _own_function(name, original, description, rounding):
    """The variant _pick_function chose for transformers' `original` (by its description), with
    another rounding: what the patched model's own methods call (_plan_own_methods). An
    apply_rotary_pos_emb(q, k, cos, sin, ...) is wrapped as fuse_rope wraps the module-level one,
    so that fusing the patched model intercepts its calls too."""
    parameters = tuple(inspect.signature(original).parameters)
    function = dict(_function_candidates(name, parameters, rounding))[description]
    if name == "apply_rotary_pos_emb" and parameters[:4] == ("q", "k", "cos", "sin"):
        function = _make_wrapper(function)
    return _marked(function, original, description, rounding)


def _refers_to(code, names) -> bool:
    """Whether code, or code nested in it, names one of `names` (a global it loads)."""
    return any(name in names for name in code.co_names) or any(
        isinstance(const, types.CodeType) and _refers_to(const, names) for const in code.co_consts)


class _OwnScopes:
    """Copies of transformers' functions that read the apply functions from a namespace of the
    patched model's own instead of their modeling module's globals: a copy of the module's dict
    with the apply names bound to rotary's functions of the model's rounding, and the module-level
    helpers that call them (Gemma 4's apply_multidimensional_rope) copied into it too.
    The namespace has no __name__: Dynamo (torch 2.13) looks the globals of a function whose
    namespace has a __name__ up in the module of that name, so with it a compiled model would call
    the module's function instead (test_patch_isolation.py compiles both side by side)."""

    def __init__(self, own: dict):
        self.own = own  # modeling module name -> {apply name: function}
        self.scopes: dict = {}  # modeling module name -> namespace
        self.copies: dict = {}  # id(transformers' function) -> its copy, or itself when unchanged

    def scope(self, fn):
        """The namespace replacing fn's globals, or None when fn's module has no rotary functions."""
        name = fn.__globals__.get("__name__")
        if name not in self.own or sys.modules.get(name) is None or fn.__globals__ is not vars(sys.modules[name]):
            return None
        if name not in self.scopes:
            namespace = {key: value for key, value in fn.__globals__.items() if key != "__name__"}
            namespace.update(self.own[name])
            self.scopes[name] = namespace
            for key, value in list(namespace.items()):
                if isinstance(value, types.FunctionType) and key not in self.own[name]:
                    namespace[key] = self.copy(value)
        return self.scopes[name]

    def copy(self, fn):
        """fn copied to run in its scope, with the functions it closes over (a decorator's wrapped
        method) copied the same way; fn itself if none of it calls a rotary function."""
        if id(fn) in self.copies:
            return self.copies[id(fn)]
        self.copies[id(fn)] = fn  # a function reached again while being copied stays itself
        cells, changed = [], False
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                value = None
            new = self.copy(value) if isinstance(value, types.FunctionType) else value
            changed |= new is not value
            cells.append(types.CellType(new) if new is not value else cell)
        scope = self.scope(fn)
        own = scope is not None and _refers_to(fn.__code__, self.own[fn.__globals__["__name__"]])
        if not own and not changed:
            return fn
        result = types.FunctionType(fn.__code__, scope if own else fn.__globals__, fn.__name__, fn.__defaults__,
                                    tuple(cells) if fn.__closure__ is not None else None)
        result.__kwdefaults__ = fn.__kwdefaults__
        result.__dict__.update(fn.__dict__)
        result.__qualname__, result.__module__, result.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
        self.copies[id(fn)] = result
        return result


def _plan_own_methods(model_name, model, own: dict) -> list:
    """own: modeling module name -> {apply name: rotary's function with the model's rounding}.
    [(module path, attribute, copy)]: each method of the model's modules that calls those
    functions (the attention forwards), copied by _OwnScopes, to be bound to that module alone.
    So a rounding other than transformers' reaches this model only: the module-level functions
    stay rounding "like_torch", transformers' bits, for every other model of the class. A module
    that already has its own attribute of that name (a hook's forward) is refused (RotaryError,
    nothing patched): replacing it would drop the hook, keeping it would bypass the rounding."""
    if not own:
        return []
    scopes = _OwnScopes(own)
    rounding = next(f for functions in own.values() for f in functions.values()).rotary_rounding
    plans = []
    for path, module in model.named_modules():
        seen = set()
        for klass in type(module).__mro__:
            if klass in (torch.nn.Module, object):
                continue
            for attr, value in vars(klass).items():
                if attr in seen or attr.startswith("__"):
                    continue
                seen.add(attr)
                if not isinstance(value, types.FunctionType):
                    continue
                new = scopes.copy(value)
                if new is value:
                    continue
                if attr in module.__dict__:
                    raise RotaryError(
                        f"patch_model: cannot serve {model_name} with rounding {rounding!r}: {path or '<model>'} "
                        f"({type(module).__name__}) has its own {attr} attribute (a hook's?), and rotary binds its "
                        f"copy of {type(module).__name__}.{attr} there to give this model alone that rounding; "
                        "nothing was patched")
                new.rotary_rounding = rounding
                plans.append((path, attr, new))
    return plans


def patch_model(model, *, precision: str = "hf", rounding: Optional[str] = None):
    """Replaces a transformers model's RoPE by rotary's: every rotary-embedding module (with its
    config) by a RotaryEmbedding, GPT-J's / CodeGen's position tables by rotary's, and the apply
    functions of the model's modeling_* modules (apply_rotary_pos_emb, apply_rotary_pos_emb_interleave,
    apply_multimodal_rotary_pos_emb) by rotary's kernel with rounding 'like_torch'. Returns the list
    of what was replaced. rounding (default 'like_torch' for precision 'hf', 'once' for 'exact'):
    a rounding other than 'like_torch' reaches this model alone, through copies of its modules'
    methods that call the apply functions (the attention forwards), bound to those modules and
    reading rotary's functions of that rounding from a namespace of their own (_plan_own_methods).

    Nothing is replaced on trust. Each piece is first run against rotary's precision="hf"
    reproduction on probe inputs (positions 0..., 100000... and back, float32 / bfloat16 /
    float16, every layer type; random q, k, cos, sin in every dtype combination) and must give
    transformers' bits; rotary picks, among its variants with the piece's call signature, the one
    that does. A piece that none reproduces is a RotaryError that names the model class, the module
    path or function and what differs, raised before anything is changed (nothing is patched).
    Per-layer RoPE (Gemma 3, forward(x, position_ids, layer_type)) becomes one RotaryEmbedding per
    layer type. The inv_freq buffers keep the dtype model.to(dtype) gave transformers' (dtype rule:
    RotaryEmbedding). Rotary-embedding modules without a config (vision towers' position embeddings,
    forward(seqlen)) are left as they are. The module-level functions are replaced in the modeling
    module, so every model of those classes in the process uses them, until unpatch_model (or the
    `patched` context manager) undoes the patch of the last model that uses them; since they
    round 'like_torch', which the probe shows gives transformers' bits, models that were not
    patched keep transformers' results whatever precision other models of the class were patched
    with. A module that already has its own attribute in place of a method rotary would copy (a
    hook's forward) is a RotaryError for a rounding other than 'like_torch' (nothing is patched)."""
    if precision not in ("hf", "exact"):
        raise RotaryError(f"precision must be 'hf' or 'exact' (got {precision!r})")
    if rounding is not None and rounding not in ROUNDINGS:
        raise RotaryError(f"rounding must be None, 'like_torch' or 'once' (got {rounding!r})")
    rounding = rounding or ("like_torch" if precision == "hf" else "once")
    model_name = type(model).__name__
    done = [path for path, m in model.named_modules() if isinstance(m, RotaryEmbedding)]
    if done:
        raise RotaryError(f"patch_model: {model_name} is already patched (rotary modules at "
                          f"{', '.join(p or '<model>' for p in done)}); patch a fresh model")
    # 1. Plan everything (probes, no change to the model or to any module).
    embeddings, specs = [], []
    for path, module in model.named_modules():
        if not type(module).__name__.endswith("RotaryEmbedding") or getattr(module, "config", None) is None:
            # Not a text rotary-embedding module built from a config: e.g. Qwen2-VL's
            # VisionRotaryEmbedding(dim, theta), forward(seqlen). Left as it is.
            continue
        new, new_specs = _plan_embedding(model_name, path, module, precision)
        embeddings.append((path, new))
        specs.extend(new_specs)
    tables, table_spec = _plan_position_tables(model_name, model, precision)
    if table_spec is not None:
        specs.append(table_spec)
    if not embeddings and not tables:
        raise RotaryError(f"patch_model: {model_name} has no rotary-embedding module built from a config and no "
                          "GPT-J position table: nothing rotary can serve; nothing was patched")
    functions, own = [], {}
    for modeling in _modeling_modules(model):
        for name in _APPLY_NAMES:
            current = _function_slot(modeling, name)[1]
            if not callable(current):
                continue
            original = getattr(current, "rotary_original", current)  # patched before: probe transformers' own
            # The module-level function serves every model of the module, patched or not: always
            # rounding "like_torch", which the probe shows gives transformers' bits.
            description, function = _pick_function(model_name, modeling, name, original, specs, "like_torch")
            functions.append((modeling, name, _marked(function, original, description, "like_torch")))
            if rounding != "like_torch":
                own.setdefault(modeling.__name__, {})[name] = _own_function(name, original, description, rounding)
    methods = _plan_own_methods(model_name, model, own)
    # 2. Apply, keeping what unpatch_model needs to put everything back.
    replaced = []
    undo = _PatchRecord()
    for path, new in embeddings:
        parent_name, _, attr = path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        undo.modules.append((parent_name, attr, getattr(parent, attr)))
        setattr(parent, attr, new)
        replaced.append(path)
    for path, holder, table in tables:
        undo.buffers.append((path, holder.embed_positions, "embed_positions" not in holder._non_persistent_buffers_set))
        holder.register_buffer("embed_positions", table, persistent=False)
        replaced.append(f"{path}.embed_positions")
    for path, attr, function in methods:
        module = model.get_submodule(path)
        module.__dict__[attr] = types.MethodType(function, module)  # found before the class's
        undo.methods.append((path, attr))
    for modeling, name, function in functions:
        key = (modeling.__name__, name)
        original, users = _FUNCTION_USERS.setdefault(key, (function.rotary_original, weakref.WeakSet()))
        users.add(undo)
        undo.functions.append(key)
        holder, _ = _function_slot(modeling, name)
        setattr(holder, "rotary_fused_inner" if holder is not modeling else name, function)
        replaced.append(f"{modeling.__name__}.{name}")
    model._rotary_patch = undo
    return replaced


def _function_slot(modeling, name):
    """(holder, function): where the module-level function `name` lives. fuse_rope's wrapper
    (rotary/_torch_fused_wrapper.py) stands in the module and calls its rotary_fused_inner: patching
    replaces that inner, so that the wrapper (and the fused models relying on it) stays."""
    current = getattr(modeling, name, None)
    inner = getattr(current, "rotary_fused_inner", None)
    if inner is not None and name == "apply_rotary_pos_emb":
        if drop_unused_wrapper(modeling):
            return modeling, getattr(modeling, name, None)
    return (current, inner) if inner is not None else (modeling, current)


class _PatchRecord:
    """What patch_model replaced in one model: (parent path, attribute, old module), (holder path,
    old buffer, persistent) and the module-level functions' keys. Kept on the model as
    model._rotary_patch (a plain attribute: not a submodule, not in the state dict); paths, not
    modules, so that the record makes no reference cycle through the model."""

    def __init__(self):
        self.modules: list = []
        self.buffers: list = []
        self.functions: list = []
        self.methods: list = []  # (module path, attribute): _plan_own_methods' copies, bound per instance

    def __deepcopy__(self, memo):
        """copy.deepcopy of a patched model copies its record: the copy counts as a user of the
        patched functions (unpatching the original does not take them from the copy)."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        for key in new.functions:
            entry = _FUNCTION_USERS.get(key)
            if entry is not None:
                entry[1].add(new)
        return new


# Module-level functions are process-wide: every patched model of a modeling module shares them.
# (module name, function name) -> (transformers' original, the _PatchRecords of the live patched
# models using it: each model holds its record);
# the original goes back when the last of those models is unpatched (a model that was dropped
# without unpatch_model stops counting once it is collected).
_FUNCTION_USERS: dict = {}


def unpatch_model(model) -> list:
    """Undoes patch_model(model): puts back the model's own rotary-embedding modules and position
    tables, and transformers' apply functions in the modeling modules once no other patched model
    uses rotary's (they are process-wide). Returns the list of what was restored. A model that
    patch_model did not patch is a RotaryError."""
    undo = getattr(model, "_rotary_patch", None)
    if not isinstance(undo, _PatchRecord):
        raise RotaryError(f"unpatch_model: {type(model).__name__} was not patched by rotary.torch.patch_model "
                          "(nothing to undo)")
    restored = []
    for parent_name, attr, old in undo.modules:
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, old)
        restored.append(f"{parent_name}.{attr}" if parent_name else attr)
    for path, attr in getattr(undo, "methods", ()):
        module = model.get_submodule(path)
        bound = module.__dict__.get(attr)
        if getattr(getattr(bound, "__func__", None), "rotary_rounding", None) is not None:
            del module.__dict__[attr]  # the class's method again
    for path, old, persistent in undo.buffers:
        model.get_submodule(path).register_buffer("embed_positions", old, persistent=persistent)
        restored.append(f"{path}.embed_positions")
    collected = False
    for key in undo.functions:
        entry = _FUNCTION_USERS.get(key)
        if entry is None:
            continue
        original, users = entry
        users.discard(undo)
        if users and not collected:
            gc.collect()  # patched models dropped in a reference cycle no longer count
            collected = True
        if users:
            continue
        module = sys.modules.get(key[0])
        holder, current = _function_slot(module, key[1]) if module is not None else (None, None)
        if module is not None and getattr(current, "rotary_original", None) is original:
            # only rotary's own replacement is taken back
            setattr(holder, "rotary_fused_inner" if holder is not module else key[1], original)
            restored.append(f"{key[0]}.{key[1]}")
        del _FUNCTION_USERS[key]
    del model._rotary_patch
    return restored


class patched:
    """patch_model as a context manager: ``with rotary.torch.patched(model): ...`` runs the block
    on rotary's RoPE and undoes the patch on exit (also when the block raises). Takes
    patch_model's arguments; `as` gives the list of what was replaced."""

    def __init__(self, model, **kwargs):
        self._model = model
        self._kwargs = kwargs

    def __enter__(self) -> list:
        return patch_model(self._model, **self._kwargs)

    def __exit__(self, *exc) -> None:
        unpatch_model(self._model)
