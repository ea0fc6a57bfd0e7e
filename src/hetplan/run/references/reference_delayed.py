"""Single-process training with the delayed updates of a windowed plan (PipeDream, WSP).

What :class:`hetplan.run.execute.window.WindowExecutor` must equal, computed independently of it:
the
whole model in one process, one weight version per optimizer step (version ``k`` has the
updates of iterations ``0 .. k-1``). Micro-batch ``j`` of pipeline ``r`` reads each parameter
at the version that stage's schedule had when it ran that forward (the optimizer actions of
the stage before the forward in its action order); its gradients, taken at those versions,
count towards its iteration, summed over the replicas; version ``k + 1`` is the optimizer step
of version ``k`` with iteration ``k``'s gradients. Micro-batches are processed in order, which
is always possible: a stage only steps iteration ``k`` after all of its micro-batches.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from hetplan.graph.split import split_program
from hetplan.planspec import Plan
from hetplan.run.setup.data import make_feed
from hetplan.run.setup.model import ModelSource, canonical_names
from hetplan.run.setup.optimizers import make_optimizer
from hetplan.run.setup.precision import LossScaler, autocast
from hetplan.schedule.plan_schedule import device_actions, execution_schedule

Weights = dict[str, torch.Tensor]


def stage_versions(plan: Plan, steps: int) -> list[list[dict[int, int]]]:
    """``[r][s][j]``: the weight version stage ``s`` of pipeline ``r`` uses for micro-batch
    ``j``'s forward in a window of ``steps`` iterations (as the schedule orders it)."""
    sizes = [[[4]] for _ in range(plan.num_stages)]  # one tensor per stage: order only
    schedule = execution_schedule(plan, sizes, steps)
    out: list[list[dict[int, int]]] = []
    for pipe in plan.pipelines:
        per_stage: list[dict[int, int]] = []
        for stage in pipe.stages:
            done, seen = 0, {}
            for act in device_actions(schedule, stage.devices[0]):
                if act.kind == "optimizer":
                    done += 1
                elif act.kind == "fwd":
                    seen[act.microbatch] = done
            per_stage.append(seen)
        out.append(per_stage)
    return out


def reader_stages(model: nn.Module, plan: Plan) -> dict[str, int]:
    """Parameter name (every alias) -> the stage whose program reads it under that name."""
    split = split_program(model, [list(s.layers) for s in plan.pipelines[0].stages])
    out: dict[str, int] = {}
    for s, stage in enumerate(split.stages):
        for name, _ in stage.module.named_parameters(remove_duplicate=False):
            if out.setdefault(name, s) != s:
                raise ValueError(f"{name} is read by stages {out[name]} and {s} (not supported)")
    return out


def delayed_reference_run(
    plan: Plan, source: ModelSource, seed: int = 0, steps: int = 1, lr: float | None = None
) -> list[float]:
    """The global-batch mean loss of every step, with the plan's delayed updates."""
    model = source.build(seed, "cpu")
    optimizer = make_optimizer(plan.optimizer, list(model.parameters()), lr)
    scaler = LossScaler(plan.model.dtype == "fp16")
    canon = canonical_names(model)
    reader = reader_stages(model, plan)
    versions = stage_versions(plan, steps)
    feed = make_feed(plan, source, data=None, seed=seed)
    m = plan.micro_batches
    saved: list[Weights] = [_snapshot(model)]
    grads: list[Weights] = [{} for _ in range(steps)]
    losses = [0.0] * steps
    for j in range(steps * m):
        w = j // m
        for r in range(len(plan.pipelines)):
            needed = max(versions[r][s][j] for s in range(plan.num_stages))
            while len(saved) <= needed:  # every micro-batch of that iteration is done
                k = len(saved) - 1
                _step(model, optimizer, scaler, grads[k])
                saved.append(_snapshot(model))
            x, y = feed.batch(w, r, "cpu")
            xs, ys = torch.tensor_split(x, m)[j % m], torch.tensor_split(y, m)[j % m]
            leaves = {
                name: saved[versions[r][s][j]][canon.get(name, name)].clone().requires_grad_(True)
                for name, s in reader.items()
            }
            with autocast("cpu", plan.model.dtype):
                out = functional_call(model, leaves, (xs,), tie_weights=False, strict=False)
                loss = feed.loss(out, ys) * (xs.shape[0] / plan.global_batch)
            (loss.float() * scaler.scale).backward()
            losses[w] += float(loss.detach())
            for name, t in leaves.items():
                if t.grad is not None:
                    key = canon.get(name, name)
                    grads[w][key] = grads[w][key] + t.grad if key in grads[w] else t.grad
    return losses


def _snapshot(model: nn.Module) -> Weights:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _step(
    model: nn.Module, optimizer: torch.optim.Optimizer, scaler: LossScaler, grads: Weights
) -> None:
    params = dict(model.named_parameters())
    for name, p in params.items():
        p.grad = grads.get(name)
    if scaler.unscale_and_check(list(params.values())):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
