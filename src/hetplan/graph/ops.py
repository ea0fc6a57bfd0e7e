"""Per-op helpers of the tracer: tensor identity, argument flattening, kernel test, operation
classes (:data:`hetplan.graph.types.OP_CLASSES`) and our convolution FLOP counts."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from hetplan.graph.conv_flops import ConvArgs, conv_backward_flops, conv_forward_flops


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


# Fused scaled-dot-product attention kernels, forward and backward (flash, memory-efficient,
# cuDNN, CPU flash, backend-overridable): the tracer runs SDPA as the flash kernel
# (:mod:`hetplan.graph.attention`); a masked SDPA it leaves to the math path decomposes into
# bmm and softmax ops, classed as matmul and memory.
_ATTENTION_PREFIXES = (
    "aten::_scaled_dot_product_",
    "aten::_flash_attention",
    "aten::_efficient_attention",
)
_KIND: dict[Any, str] = {}
"""Per operator: ``conv``, ``attention`` or ``other`` (cached like ``_KERNEL``)."""


def _kind(func: Any) -> str:
    kind = _KIND.get(func)
    if kind is None:
        kind = "other"
        if is_conv(func):
            kind = "conv"
        elif func.name().startswith(_ATTENTION_PREFIXES):
            kind = "attention"
        _KIND[func] = kind
    return kind


def op_class(func: Any, flops: int, groups: int = 1) -> str:
    """Operation class of an op (:data:`hetplan.graph.types.OP_CLASSES`): convolutions by
    ``groups``, fused attention by name, any other op by whether it counts FLOPs (torch counts
    them only for matmul-like ops: mm, bmm, addmm, baddbmm...)."""
    kind = _kind(func)
    if kind == "conv":
        return "conv_grouped" if groups > 1 else "conv"
    if kind == "attention":
        return "attention"
    return "matmul" if flops > 0 else "memory"


_ARG_NAMES: dict[Any, tuple[str, ...]] = {}
"""Per operator: its schema's argument names (cached)."""


def _bind(func: Any, args: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """An op's arguments by schema name (dispatch passes most of them positionally)."""
    names = _ARG_NAMES.get(func)
    if names is None:
        names = _ARG_NAMES[func] = tuple(a.name for a in func._schema.arguments)
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


def _per_dim(value: Any, dims: int, default: int) -> tuple[int, ...]:
    """A per-spatial-dimension argument, expanded as aten does (one value for all dims)."""
    if value is None:
        return (default,) * dims
    values = [int(v) for v in value] if isinstance(value, list | tuple) else [int(value)]
    return tuple(values * dims) if len(values) == 1 else tuple(values)


def conv_work(func: Any, args: Any, kwargs: dict[str, Any], counted: int) -> tuple[int, int]:
    """FLOPs (:mod:`hetplan.graph.conv_flops`) and groups of a convolution op.

    Ops with ``aten.convolution``'s or ``aten.convolution_backward``'s argument names (those,
    ``_convolution`` and the ``*_overrideable`` ones: all a meta-device trace runs) get our
    count; any other (a backend kernel with its own signature) keeps ``counted``, torch's.
    """
    a = _bind(func, args, kwargs)
    groups = int(a.get("groups", 1))
    x, w = a.get("input"), a.get("weight")
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or "stride" not in a:
        return counted, groups
    dims = w.dim() - 2
    conv = ConvArgs(
        stride=_per_dim(a["stride"], dims, 1),
        padding=_per_dim(a.get("padding"), dims, 0),
        dilation=_per_dim(a.get("dilation"), dims, 1),
        transposed=bool(a.get("transposed", False)),
        output_padding=_per_dim(a.get("output_padding"), dims, 0),
    )
    grad = a.get("grad_output")
    if not isinstance(grad, torch.Tensor):
        return conv_forward_flops(x.shape, w.shape, conv), groups
    mask = a.get("output_mask") or (True, True, True)
    return conv_backward_flops(grad.shape, x.shape, w.shape, conv, mask), groups


CAUSAL_ATTENTION_SHARE = 0.5
"""Share of the full score matrix a causal fused-attention kernel computes (dimensionless):
flash and memory-efficient kernels skip the tiles above the diagonal, about half of them
for long sequences (FlashAttention-2, Dao 2023, counts causal FLOPs as half; torch's
``FlopCounterMode`` counts the whole matrix). On the H100 (``shared/gpu-truth``), gpt2's
causal blocks counted at the full matrix were priced 13% (forward) and 24% (backward) too
slow by what bert-base's non-causal blocks taught (median, fp32)."""


def attention_share(func: Any, args: Any, kwargs: dict[str, Any]) -> float:
    """The part of torch's FLOP count a fused attention op really computes: the causal share
    for an attention kernel run with ``is_causal``; 1 for every other op."""
    if _kind(func) != "attention":
        return 1.0
    return CAUSAL_ATTENTION_SHARE if _bind(func, args, kwargs).get("is_causal") else 1.0


CONV_PROBE_TAPS = 9
"""Kernel taps of the calibration's convolution probes (3x3, ``profile.calibrate._conv``)."""


def conv_probe_intensity(func: Any, args: Any, kwargs: dict[str, Any]) -> float:
    """FLOPs per byte of the 3x3 calibration probe (``C`` channels in and out) whose implicit
    GEMM is shaped like this convolution's: ``C = sqrt(N K / 9)``, ``N`` its output channels
    per group, ``K`` its reduction (input channels per group x taps); that probe does
    ``9 C / element size`` FLOPs per byte. A 1x1 convolution 256 -> 64 in bf16 moves 51 FLOPs
    per byte, as a 3x3 probe of 11 channels that tensor cores run at a few percent of peak,
    while cuDNN runs it as a GEMM of K = 256: matched on shape it is the probe of 43 channels.
    0 where the op's weight is not known."""
    a = _bind(func, args, kwargs)
    x, w = a.get("input"), a.get("weight")
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or w.dim() < 3:
        return 0.0
    groups = max(int(a.get("groups", 1)), 1)
    taps = math.prod(w.shape[2:])
    if a.get("transposed", False):
        n, k = w.shape[1], w.shape[0] // groups * taps
    else:
        n, k = w.shape[0] // groups, w.shape[1] * taps
    channels = math.sqrt(max(n * k, 1) / CONV_PROBE_TAPS)
    return float(CONV_PROBE_TAPS * channels / x.element_size())


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


# Backward ops that move a parameter's gradient without mixing in anything else (names without
# the overload): autograd sums a tied weight's partial gradients with ``add`` (``add_`` when
# it may reuse a buffer), ``AccumulateGrad`` copies the total into ``.grad`` (an empty tensor
# and ``copy_``, or ``clone``), a cast weight's gradient is cast back (``_to_copy``). An add is
# a *sum* of gradients of one parameter only when its result is one; any copy of a parameter
# gradient is one, and so is its source.
_GRAD_SUMS = frozenset({"aten::add", "aten::add_"})
_GRAD_COPIES = frozenset(
    {
        "aten::copy_",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::clone",
        "aten::_to_copy",
        "aten::detach",
        "aten::alias",
        "aten::lift_fresh_copy",
    }
)


def grad_flow(name: str) -> str:
    """How a backward op's parameter-gradient status passes through it, from its aten name
    (``aten::add.Tensor``): ``sum`` (a parameter gradient's summands are ones too), ``copy``
    (all its tensors are one if any is) or ``other``."""
    base = name.split(".", 1)[0]
    if base in _GRAD_SUMS:
        return "sum"
    return "copy" if base in _GRAD_COPIES else "other"


Desc = tuple[int, int, tuple[int, ...]]


def describe(ts: list[torch.Tensor]) -> list[Desc]:
    return [(storage_key(t), t.nbytes, tuple(t.shape)) for t in ts]
