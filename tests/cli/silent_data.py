"""Models and data that train the wrong thing without a word on an unguarded runtime (issue 28):
``hetplan train --data tests/cli/silent_data.py:<fn>``."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import TensorDataset

SAMPLES = 64
NAN_AT_CALL = 3  # the loss of this call (1-based, per process) is NaN
WARNING = "a warning raised by the user's loss in every call"

_calls = [0]


def model() -> tuple[nn.Module, tuple[int, ...]]:
    """A two-convolution regressor of 1 x 8 x 8 images (no classes: the default loss is MSE)."""
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))
    return net, (1, 8, 8)


def _images(n: int, target: tuple[int, ...] = (1, 8, 8)) -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 1, 8, 8, generator=gen), torch.randn(n, *target))


def broadcast() -> TensorDataset:
    """Targets of shape (8, 8) for (1, 8, 8) outputs: torch's MSE broadcasts them."""
    return _images(SAMPLES, (8, 8))


def tiny() -> TensorDataset:
    """Five samples: fewer than one batch."""
    return _images(5)


def warns() -> tuple[TensorDataset, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """A loss that warns on every call (the same warning on every rank and step)."""

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        warnings.warn(WARNING, UserWarning, stacklevel=1)
        return F.mse_loss(out, target)

    return _images(SAMPLES), loss


def diverges() -> tuple[TensorDataset, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """A loss that is NaN from its :data:`NAN_AT_CALL`-th call in each process on."""

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        _calls[0] += 1
        value = F.mse_loss(out, target)
        return value * float("nan") if _calls[0] >= NAN_AT_CALL else value

    return _images(SAMPLES), loss


def plain() -> TensorDataset:
    """Images and targets of the output's shape: nothing wrong."""
    return _images(SAMPLES)


def wider() -> tuple[nn.Module, tuple[int, ...]]:
    """Another model with the same layer names as :func:`model`."""
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
    return net, (1, 8, 8)
