"""Structural signatures of layers: equal signatures mean the layers compute the same thing."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from torch import nn

_PLAIN = (int, float, str, bool, type(None), torch.dtype, torch.device)


def _value_sig(value: Any) -> Hashable:
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, tuple | list):
        return tuple(_value_sig(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, tuple(value.stride()))
    if callable(value):
        return ("callable", id(value))
    return ("object", type(value).__qualname__)


def _module_sig(m: nn.Module) -> Hashable | None:
    if "forward" in m.__dict__ or m._forward_hooks or m._forward_pre_hooks:
        return None
    if m._backward_hooks or m._backward_pre_hooks:
        return None
    attrs = tuple((k, _value_sig(v)) for k, v in sorted(vars(m).items()) if not k.startswith("_"))
    return (type(m), m.training, attrs)


def layer_signature(module: nn.Module) -> Hashable | None:
    """Everything that decides what a layer computes, or None if it cannot be compared."""
    subs = [_module_sig(m) for m in module.modules()]
    if any(s is None for s in subs):
        return None
    named = [*module.named_parameters(), *module.named_buffers()]
    tensors = tuple((n, _value_sig(t), t.requires_grad) for n, t in named)
    return (repr(module), tuple(subs), tensors)


def signatures(layers: list[nn.Module]) -> list[Hashable | None]:
    """:func:`layer_signature` of each layer; None for one sharing a parameter with another."""
    owners: dict[int, int] = {}
    for pos, m in enumerate(layers):
        for p in m.parameters():
            owners[id(p)] = -1 if owners.get(id(p), pos) != pos else pos
    return [
        None if any(owners[id(p)] < 0 for p in m.parameters()) else layer_signature(m)
        for m in layers
    ]


def stand_in_candidates(sigs: list[Hashable | None]) -> set[int]:
    """Positions whose two predecessors and successor (in module order) are identical."""
    return {
        pos
        for pos in range(2, len(sigs) - 1)
        if sigs[pos] is not None and sigs[pos - 2] == sigs[pos - 1] == sigs[pos] == sigs[pos + 1]
    }
