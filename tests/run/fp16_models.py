"""Models for the fp16 tests (loaded as ``file.py:function``)."""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 8
CLASSES = 4
GAIN = 64.0
"""Logit gain of :class:`Hot`: the loss's fp16 gradient is about ``0.1 * GAIN * scale``,
past fp16's 65504 until the scale has backed off from 2**16 to about 2**13."""


class Hot(nn.Module):
    """A small MLP whose logits are ``GAIN`` times larger: at ``torch.amp.GradScaler``'s
    initial scale its fp16 gradients overflow, so the first steps are skipped."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.l1(x))) * GAIN


def hot() -> tuple[nn.Module, tuple[int, ...]]:
    return Hot(), (WIDTH,)
