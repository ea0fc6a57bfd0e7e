"""Single-process training on the global batch: what every distributed step must equal."""

from __future__ import annotations

import torch

from hetplan.plan.types import Plan
from hetplan.run.model import ModelSource, data_seed


def global_batch(
    plan: Plan, source: ModelSource, seed: int, step: int, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step``: every pipeline's samples, in pipeline order."""
    parts = [
        source.batch(pipe.batch, data_seed(seed, step, p), device)
        for p, pipe in enumerate(plan.pipelines)
    ]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def reference_step(
    plan: Plan, source: ModelSource, seed: int = 0
) -> tuple[float, dict[str, torch.Tensor]]:
    """(mean loss, gradient of every parameter by name) of step 0 in one process."""
    model = source.build(seed, "cpu")
    x, y = global_batch(plan, source, seed, 0)
    loss = source.loss(model(x), y)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads
