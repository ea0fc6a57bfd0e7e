"""Per-op helpers of the tracer: tensor identity, argument flattening, kernel test."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_leaves


def storage_key(t: torch.Tensor) -> int:
    """Identity of the memory behind ``t`` (shared by all its views)."""
    return int(t.untyped_storage()._cdata)


# Ops that only make metadata (no kernel, no memory traffic) besides true views.
_NO_KERNEL = {torch.ops.aten._unsafe_view.default, torch.ops.aten.detach.default}
_KERNEL: dict[Any, bool] = {}
"""Per operator: does it launch a kernel (cached: looked up for every op traced)."""


def is_kernel(func: Any) -> bool:
    kernel = _KERNEL.get(func)
    if kernel is None:
        kernel = _KERNEL[func] = not getattr(func, "is_view", False) and func not in _NO_KERNEL
    return kernel


def output_tensors(obj: Any) -> list[torch.Tensor]:
    """Tensors in a module's output (any pytree: dataclasses, model-output classes...)."""
    return [x for x in tree_leaves(obj) if isinstance(x, torch.Tensor)]


def tensors(obj: Any) -> list[torch.Tensor]:
    """Tensors in nested tuples, lists and dicts (aten op arguments: cheaper than pytree)."""
    out: list[torch.Tensor] = []
    _collect(obj, out)
    return out


def _collect(obj: Any, out: list[torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, tuple | list):
        for x in obj:
            _collect(x, out)
    elif isinstance(obj, dict):
        for x in obj.values():
            _collect(x, out)


Desc = tuple[int, int, tuple[int, ...]]


def describe(ts: list[torch.Tensor]) -> list[Desc]:
    return [(storage_key(t), t.nbytes, tuple(t.shape)) for t in ts]
