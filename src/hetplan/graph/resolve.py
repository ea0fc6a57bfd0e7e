"""Model names -> :class:`BuiltModel`: zoo names, ``path/to/file.py:fn``, ``pkg.module:fn``.

A user function takes no arguments and returns an ``nn.Module``, ``(module, example_input)``
(a batch, batch dimension first) or ``(module, input_shape)`` (one sample, no batch
dimension). A bare module needs ``dataset`` for its input shape. The output decides the loss:
(B, C) logits -> classification; (B, T, V) logits over integer (B, T) inputs -> next-token
language modelling; anything else -> mean squared error against a random target.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

from hetplan.errors import ModelError
from hetplan.graph.built import BuiltModel
from hetplan.graph.zoo import ZOO, zoo_model
from hetplan.graph.zoo.common import get_dataset

EXPECTED = "an nn.Module, (module, example_input) or (module, input_shape)"


@functools.cache
def resolve_model(name: str, dataset: str | None = None) -> BuiltModel:
    """Resolve ``name`` (see module docstring); raises :class:`ModelError` in one line.

    Cached per process: a user file is imported once (edits need a new process)."""
    built = zoo_model(name, dataset)
    if built is not None:
        return built
    where, colon, fn_name = name.rpartition(":")
    if not colon or not where or not fn_name:
        close = difflib.get_close_matches(name, list(ZOO), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ModelError(
            f"unknown model {name!r}{hint}; expected a zoo name (see `hetplan models`), "
            "path/to/file.py:function or package.module:function"
        )
    return _custom(name, load_function(name), dataset)


def load_function(ref: str) -> Callable[..., Any]:
    """The function named by ``path/to/file.py:fn`` or ``package.module:fn``; ModelError (an
    InputError) naming the reference otherwise."""
    where, colon, fn_name = ref.rpartition(":")
    if not colon or not where or not fn_name:
        raise ModelError(f"{ref!r}: expected path/to/file.py:function or package.module:function")
    is_file = where.endswith(".py") or "/" in where or "\\" in where
    module = _load_file(where) if is_file else _import(where)
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ModelError(
            f"{where}: no function {fn_name!r} (callables there: {', '.join(found[:10]) or 'none'})"
        )
    return fn  # type: ignore[no-any-return]


def _load_file(path: str) -> ModuleType:
    file = Path(path)
    if not file.is_file():
        raise ModelError(f"{path}: file not found (expected path/to/file.py:function)")
    digest = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:10]
    mod_name = f"hetplan_user_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, file)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path}: cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[mod_name]
        raise ModelError(f"{path}: importing failed: {_one_line(err)}") from None
    return module


def _import(dotted: str) -> ModuleType:
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as err:
        raise ModelError(f"{dotted}: module not found ({err.name})") from None
    except Exception as err:
        raise ModelError(f"{dotted}: importing failed: {_one_line(err)}") from None


def _call(name: str, fn: Callable[[], Any]) -> tuple[nn.Module, Any]:
    """Call the user function; returns (module, example input or shape or None)."""
    try:
        out = fn()
    except Exception as err:
        raise ModelError(f"{name}: the function raised {_one_line(err)}") from None
    if isinstance(out, nn.Module):
        return out, None
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], nn.Module):
        extra = out[1]
        if isinstance(extra, torch.Tensor) and extra.dim() >= 1:
            return out[0], extra
        if isinstance(extra, tuple | list | torch.Size) and all(isinstance(d, int) for d in extra):
            return out[0], tuple(extra)
    raise ModelError(f"{name}: returned {_describe(out)}; expected {EXPECTED}")


def _custom(name: str, fn: Callable[[], Any], dataset: str | None) -> BuiltModel:
    with torch.device("meta"):
        module, extra = _call(name, fn)
    high = 0
    if isinstance(extra, torch.Tensor):
        shape, dtype = tuple(extra.shape[1:]), extra.dtype
        if not dtype.is_floating_point:
            emb = [m.num_embeddings for m in module.modules() if isinstance(m, nn.Embedding)]
            high = min(emb) if emb else 2
    elif extra is not None:
        shape, dtype = extra, torch.float32
    elif dataset is not None:
        ds = get_dataset(dataset, name)
        shape, dtype = (ds.channels, ds.size, ds.size), torch.float32
    else:
        raise ModelError(
            f"{name}: returned a bare module; give --dataset or return "
            "(module, example_input) or (module, input_shape)"
        )
    out = _probe(name, module, shape, dtype)
    base = BuiltModel(
        name=name,
        family="custom",
        dataset=dataset,
        factory=lambda: _call(name, fn)[0],
        input_shape=shape,
        input_dtype=dtype,
        input_high=high,
    )
    return _with_task(base, out)


def _probe(name: str, module: nn.Module, shape: tuple[int, ...], dtype: torch.dtype) -> Any:
    """Output of a 2-sample forward pass on the meta device (decides the loss)."""
    try:
        return module.to("meta")(torch.empty((2, *shape), dtype=dtype, device="meta"))
    except Exception as err:
        raise ModelError(
            f"{name}: forward on a (2, {', '.join(map(str, shape))}) {dtype} input failed: "
            f"{_one_line(err)}"
        ) from None


def _with_task(base: BuiltModel, out: Any) -> BuiltModel:
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        raise ModelError(f"{base.name}: forward returned {_describe(out)}; expected a float tensor")
    if out.dim() == 2:
        return dataclasses.replace(base, task="classify", num_classes=int(out.shape[1]))
    seq = base.input_shape[:1]
    if out.dim() == 3 and not base.input_is_float and tuple(out.shape[1:2]) == seq:
        vocab = int(out.shape[2])
        return dataclasses.replace(base, task="lm", num_classes=vocab, target_shape=seq)
    return dataclasses.replace(base, task="regress", target_shape=tuple(out.shape[1:]))


def _describe(obj: Any) -> str:
    if isinstance(obj, tuple):
        return f"a tuple of {len(obj)} ({', '.join(type(x).__name__ for x in obj)})"
    name = type(obj).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"
