"""The optimizers a rank steps: torch's, built from the plan's optimizer name; ZeRO-1's
``ZeroRedundancyOptimizer`` over them; and what a checkpoint reads of either."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

# Default learning rates (``--lr`` overrides them): the usual defaults of SGD and Adam in the
# papers' set-ups, stable for the zoo's models.
SGD_LR = 0.01  # dimensionless
MOMENTUM = 0.9  # dimensionless
ADAM_LR = 1e-3  # dimensionless


def optimizer_recipe(
    name: str, lr: float | None = None
) -> tuple[type[torch.optim.Optimizer], dict[str, float]]:
    """The optimizer class and keyword arguments of optimizer ``name``."""
    if name == "adam":
        return torch.optim.Adam, {"lr": ADAM_LR if lr is None else lr}
    momentum = MOMENTUM if name == "momentum" else 0.0
    return torch.optim.SGD, {"lr": SGD_LR if lr is None else lr, "momentum": momentum}


def make_optimizer(
    name: str, params: list[nn.Parameter], lr: float | None = None
) -> torch.optim.Optimizer:
    kind, kwargs = optimizer_recipe(name, lr)
    return kind(params, **kwargs)


def zero_optimizer(
    name: str, params: list[nn.Parameter], lr: float | None, group: Any
) -> torch.optim.Optimizer:
    """ZeRO-1 over the replicas' ``group``: torch's ``ZeroRedundancyOptimizer``, which keeps
    optimizer ``name``'s state for the parameters this rank owns (torch's partition: largest
    tensors first, each to the rank with the fewest elements so far) and broadcasts them after
    stepping, one flat bucket per owner (``parameters_as_bucket_view``)."""
    kind, kwargs = optimizer_recipe(name, lr)
    return ZeroRedundancyOptimizer(
        params, optimizer_class=kind, process_group=group, parameters_as_bucket_view=True,
        **kwargs,
    )  # fmt: skip


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer holding this rank's state: ZeRO-1's local optimizer (of the parameters
    the rank owns), else ``optimizer`` itself."""
    if isinstance(optimizer, ZeroRedundancyOptimizer):
        local: torch.optim.Optimizer = optimizer.optim
        return local
    return optimizer


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the tensors in this rank's optimizer state (slots and scalars)."""
    return sum(
        int(v.numel() * v.element_size())
        for slots in local_optimizer(optimizer).state.values()
        for v in slots.values()
        if isinstance(v, torch.Tensor)
    )
