"""Attention as real devices run it, for tracing on the meta device."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Trace ``F.scaled_dot_product_attention`` on meta tensors as the fused flash kernel.

    On the meta device torch picks the math path, which materialises and saves the (T, T)
    score matrices; the fused kernels that real devices run (flash/efficient on GPU, flash on
    CPU) save only q, k, v, the output and the row log-sum-exp. FLOPs are the same. The module
    attribute is swapped (not a TorchFunctionMode) so that calls from inside other functions,
    such as ``F.multi_head_attention_forward``, are caught too.
    """
    original = F.scaled_dot_product_attention

    def sdpa(*args: Any, **kwargs: Any) -> Any:
        fused = _flash(*args, **kwargs)
        return original(*args, **kwargs) if fused is None else fused

    F.scaled_dot_product_attention = sdpa
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _flash(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor | None:
    plain = attn_mask is None and not enable_gqa and q.dim() == 4 and q.shape[1] == k.shape[1]
    if not plain or q.device.type != "meta":
        return None
    try:
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale
        )
    except Exception:  # no meta kernel in this torch: keep the math path
        return None
    result: torch.Tensor = out[0]
    return result
