"""Single-process training of a plan's global batch: what every distributed step must equal.

Mixed precision as the runtime runs it (autocast over fp32 weights, the same loss scale). The
reference cuts each pipeline's batch into the plan's micro-batches and accumulates their
gradients, each loss weighted by its share of the global batch, exactly as the runtime does:
for models whose forward mixes samples (BatchNorm in training mode) the micro-batch is part of
the network's definition, and for all others this equals one pass over the global batch.
"""

from __future__ import annotations

import torch

from hetplan.plan.types import Plan
from hetplan.run.model import ModelSource, data_seed
from hetplan.run.precision import LossScaler, autocast


def global_batch(
    plan: Plan, source: ModelSource, seed: int, step: int, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of ``step``: every pipeline's samples, in pipeline order."""
    parts = [
        source.batch(pipe.batch, data_seed(seed, step, p), device)
        for p, pipe in enumerate(plan.pipelines)
    ]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def reference_run(
    plan: Plan, source: ModelSource, seed: int = 0, steps: int = 1
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(global-batch mean loss of every step, every parameter's gradient at step 0)."""
    from hetplan.run.worker import make_optimizer  # noqa: PLC0415 (worker imports this module)

    model = source.build(seed, "cpu")
    optimizer = make_optimizer(plan.optimizer, list(model.parameters()))
    scaler = LossScaler(plan.model.dtype == "fp16")
    losses: list[float] = []
    grads: dict[str, torch.Tensor] = {}
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for p, pipe in enumerate(plan.pipelines):
            x, y = source.batch(pipe.batch, data_seed(seed, step, p), "cpu")
            for xs, ys in zip(
                torch.tensor_split(x, plan.micro_batches),
                torch.tensor_split(y, plan.micro_batches),
                strict=True,
            ):
                with autocast("cpu", plan.model.dtype):
                    loss = source.loss(model(xs), ys) * (xs.shape[0] / plan.global_batch)
                (loss.float() * scaler.scale).backward()
                total += float(loss.detach())
        losses.append(total)
        finite = scaler.unscale_and_check(list(model.parameters()))
        if step == 0:
            grads = {
                n: p.grad.detach().clone()
                for n, p in model.named_parameters()
                if p.grad is not None
            }
        if finite:
            optimizer.step()
    return losses, grads


def reference_step(
    plan: Plan, source: ModelSource, seed: int = 0
) -> tuple[float, dict[str, torch.Tensor]]:
    """(mean loss, gradient of every parameter by name) of step 0 in one process."""
    losses, grads = reference_run(plan, source, seed, 1)
    return losses[0], grads
