"""A resolved model: how to build it and what its inputs and targets look like."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

Task = Literal["classify", "lm", "regress"]


@dataclass(frozen=True, kw_only=True)
class BuiltModel:
    """Everything needed to build a model and feed it synthetic data.

    ``factory`` builds the module on the current default device (wrap the call in
    ``torch.device("meta")`` for a weightless trace); use :func:`hetplan.graph.build_module`
    for a real, seeded instance.
    """

    name: str
    """The name it was resolved from (zoo name with options, ``file.py:fn`` or ``pkg.mod:fn``)."""
    family: str
    """Zoo family (resnet, vgg, gpt, ...) or ``custom``."""
    dataset: str | None
    """Dataset preset the shapes come from; None for language models and custom modules."""
    factory: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    """Shape of one input sample, without the batch dimension."""
    input_dtype: torch.dtype
    """``torch.long`` for token ids, ``torch.float32`` for images (cast to the training dtype)."""
    input_high: int = 0
    """Exclusive upper bound of integer inputs (the vocabulary size); 0 for float inputs."""
    task: Task = "classify"
    """classify: cross-entropy on (B, C) logits; lm: next-token cross-entropy on (B, T, V)
    logits; regress: mean squared error against a random target of the output's shape."""
    num_classes: int = 0
    """Classes (classify) or vocabulary size (lm); 0 for regress."""
    target_shape: tuple[int, ...] = ()
    """Shape of one target sample: () for classify, (seq,) for lm, the output shape for regress."""
    default_depth: int = 1
    """Module depth of the partitionable layers (1 = top-level children)."""

    @property
    def input_is_float(self) -> bool:
        return bool(self.input_dtype.is_floating_point)
