"""Single-process training of a plan's global batch: what every distributed step must equal.

Mixed precision as the runtime runs it (autocast over fp32 weights, the same loss scale). The
reference cuts each pipeline's batch into the plan's micro-batches and accumulates their
gradients, each loss weighted by its share of the global batch, exactly as the runtime does:
for models whose forward mixes samples (BatchNorm in training mode) the micro-batch is part of
the network's definition, and for all others this equals one pass over the global batch.
"""

from __future__ import annotations

from pathlib import Path

import torch

from hetplan.planspec import Plan
from hetplan.run.setup.checkpoint import CheckpointInfo, load_checkpoint
from hetplan.run.setup.data import make_feed
from hetplan.run.setup.model import ModelSource, canonical_names
from hetplan.run.setup.optimizers import make_optimizer
from hetplan.run.setup.precision import LossScaler, autocast


def reference_run(
    plan: Plan,
    source: ModelSource,
    seed: int = 0,
    steps: int = 1,
    *,
    data: str | None = None,
    resume: Path | None = None,
    lr: float | None = None,
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """(global-batch mean loss of every step, every parameter's gradient at the first step),
    from the start or from checkpoint folder ``resume``, on synthetic data or ``data``."""
    model = source.build(seed, "cpu")
    optimizer = make_optimizer(plan.optimizer, list(model.parameters()), lr)
    scaler = LossScaler(plan.model.dtype == "fp16")
    start = CheckpointInfo(step=0, position=0, seed=seed, model="", optimizer="")
    if resume is not None:
        start = load_checkpoint(resume, model, optimizer, canonical_names(model))
        scaler.scale = start.loss_scale if scaler.enabled else 1.0
    feed = make_feed(
        plan,
        source,
        data=data,
        seed=start.seed,
        start_step=start.step,
        start_position=start.position,
    )
    losses: list[float] = []
    grads: dict[str, torch.Tensor] = {}
    for step in range(start.step, start.step + steps):
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for p in range(len(plan.pipelines)):
            x, y = feed.batch(step, p, "cpu")
            for xs, ys in zip(
                torch.tensor_split(x, plan.micro_batches),
                torch.tensor_split(y, plan.micro_batches),
                strict=True,
            ):
                with autocast("cpu", plan.model.dtype):
                    loss = feed.loss(model(xs), ys) * (xs.shape[0] / plan.global_batch)
                (loss.float() * scaler.scale).backward()
                total += float(loss.detach())
        losses.append(total)
        finite = scaler.unscale_and_check(list(model.parameters()))
        if step == start.step:
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
