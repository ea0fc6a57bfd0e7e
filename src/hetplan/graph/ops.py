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


# Convolution operators (forward and backward): cuDNN runs them on TF32 tensor cores in fp32
# by default, unlike matmuls (see ``hetplan.cost.compute.CONV_TF32_DEFAULT``). Names, not
# objects: some exist only on some backends or torch versions.
_CONV_NAMES = frozenset(
    f"aten::{name}"
    for name in (
        "convolution",
        "_convolution",
        "convolution_overrideable",
        "convolution_backward",
        "convolution_backward_overrideable",
        "cudnn_convolution",
        "cudnn_convolution_transpose",
        "mkldnn_convolution",
        "miopen_convolution",
        "miopen_convolution_transpose",
        "miopen_depthwise_convolution",
        "_slow_conv2d_forward",
        "_slow_conv2d_backward",
        "slow_conv3d_forward",
        "slow_conv_dilated2d",
        "slow_conv_dilated3d",
        "slow_conv_transpose2d",
        "slow_conv_transpose3d",
        "_conv_depthwise2d",
        "conv_depthwise3d",
    )
)
_CONV: dict[Any, bool] = {}
"""Per operator: is it a convolution (cached like ``_KERNEL``)."""


def is_conv(func: Any) -> bool:
    conv = _CONV.get(func)
    if conv is None:
        conv = _CONV[func] = func.name() in _CONV_NAMES
    return conv


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
