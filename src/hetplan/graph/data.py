"""Real modules, synthetic batches and the training loss of a :class:`BuiltModel`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from hetplan.graph.built import BuiltModel

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def build_module(
    built: BuiltModel,
    device: str | torch.device = "cpu",
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """Build the real module on ``device`` with parameters seeded by ``seed`` (same seed, same
    weights), optionally cast to ``dtype``; in training mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        module = built.factory()
    if dtype is not None:
        module = module.to(dtype)
    return module.train()


def synthetic_batch(
    built: BuiltModel,
    batch: int,
    device: str | torch.device = "cpu",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reproducible random ``(inputs, targets)`` batch; float inputs are cast to ``dtype``.

    Language-model targets are the inputs shifted by one token (next-token prediction).
    """
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, *built.input_shape)
    if built.input_is_float:
        inputs = torch.randn(shape, generator=gen).to(dtype)
    else:
        inputs = torch.randint(0, max(built.input_high, 1), shape, generator=gen)
    if built.task == "classify":
        targets = torch.randint(0, built.num_classes, (batch,), generator=gen)
    elif built.task == "lm":
        targets = torch.roll(inputs, -1, dims=1)
        targets[:, -1] = torch.randint(0, built.num_classes, (batch,), generator=gen)
    else:
        targets = torch.randn((batch, *built.target_shape), generator=gen).to(dtype)
    return inputs.to(device), targets.to(device)


def loss_function(built: BuiltModel) -> LossFn:
    """Cross-entropy for classifiers, next-token cross-entropy over the sequence for language
    models, mean squared error otherwise; mean over the batch (and sequence)."""
    if built.task == "lm":

        def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

        return lm_loss
    return F.cross_entropy if built.task == "classify" else same_shape_mse


def same_shape_mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of a target shaped as the output. torch's ``mse_loss`` broadcasts
    other shapes (a ``(N,)`` target against an ``(N, 1)`` output averages N x N differences)
    and only warns: as the default loss, hetplan refuses them."""
    if output.shape != target.shape:
        raise ValueError(
            f"the default loss (mean squared error) got targets of shape {tuple(target.shape)} "
            f"for outputs of shape {tuple(output.shape)}: reshape the targets in the dataset, "
            "or return (dataset, loss_fn) from the data function"
        )
    return F.mse_loss(output, target)
