"""Single-process replay of an asynchronous parameter-server run from its logs.

The run's order is not fixed in advance (pushes are applied as they arrive), so the reference
takes what the run recorded (:mod:`hetplan.run.execute.ps_async`): each server's order of applied
pushes and each worker's pulled weight versions. It rebuilds every host's weight versions in
that order with its own optimizer, computes each push's gradient on the versions the worker
pulled, and returns every worker's loss at every step: what the run must have measured if each
update was applied exactly once, to the weights the logs say.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from hetplan.planspec import Plan
from hetplan.run.execute.ps import hosted_params
from hetplan.run.loop.rank_setup import one_stage_params
from hetplan.run.setup.data import Feed, make_feed
from hetplan.run.setup.model import ModelSource
from hetplan.run.setup.optimizers import make_optimizer

Key = tuple[int, int]  # (worker, iteration)


def replay_async_ps(
    plan: Plan,
    source: ModelSource,
    pulled: Sequence[Sequence[dict[int, int]]],
    applied: dict[int, Sequence[tuple[int, int]]],
    seed: int = 0,
    lr: float | None = None,
) -> list[list[float]]:
    """``pulled[r][c]``: host -> version worker r ran iteration c on; ``applied[h]``: host h's
    pushes in order. Returns ``losses[r][c]``."""
    model = source.build(seed, "cpu")
    hosts = _hosts(plan, model)
    masters = {h: [p.detach().clone() for p in ps] for h, ps in hosts.items()}
    versions = {h: [[t.clone() for t in ms]] for h, ms in masters.items()}
    optims = {
        h: make_optimizer(plan.optimizer, [nn.Parameter(t) for t in ms], lr)
        for h, ms in masters.items()
    }
    feed = make_feed(plan, source, data=None, seed=seed)
    grads: dict[Key, dict[int, list[torch.Tensor]]] = {}
    losses = [[0.0] * len(p) for p in pulled]
    done = dict.fromkeys(hosts, 0)
    while any(done[h] < len(applied.get(h, ())) for h in hosts):
        progress = False
        for h in hosts:
            while done[h] < len(applied.get(h, ())):
                r, c = applied[h][done[h]]
                need = pulled[r][c]
                if any(need[g] >= len(versions[g]) for g in hosts):
                    break  # a version another host has not reached yet
                if (r, c) not in grads:
                    grads[(r, c)], losses[r][c] = _gradient(
                        plan, model, hosts, versions, need, feed, r, c
                    )
                opt = optims[h]
                params = opt.param_groups[0]["params"]
                for p, g in zip(params, grads[(r, c)][h], strict=True):
                    p.grad = g
                opt.step()
                versions[h].append([p.detach().clone() for p in params])
                done[h] += 1
                progress = True
        if not progress:
            raise ValueError("the logs are inconsistent: no push can be applied")
    return losses


def _hosts(plan: Plan, model: nn.Module) -> dict[int, list[nn.Parameter]]:
    """The run's shard assignment over the whole model (one stage: every layer)."""
    names = one_stage_params(plan, model)
    return hosted_params(plan, [[model.get_parameter(n) for n in layer] for layer in names])


def _gradient(
    plan: Plan,
    model: nn.Module,
    hosts: dict[int, list[nn.Parameter]],
    versions: dict[int, list[list[torch.Tensor]]],
    need: dict[int, int],
    feed: Feed,
    r: int,
    c: int,
) -> tuple[dict[int, list[torch.Tensor]], float]:
    with torch.no_grad():
        for h, ps in hosts.items():
            for p, v in zip(ps, versions[h][need[h]], strict=True):
                p.copy_(v)
    model.zero_grad(set_to_none=True)
    x, y = feed.batch(c, r, "cpu")
    total = 0.0
    m = plan.micro_batches
    for xs, ys in zip(torch.tensor_split(x, m), torch.tensor_split(y, m), strict=True):
        loss = feed.loss(model(xs), ys) * (xs.shape[0] / plan.global_batch)
        loss.backward()
        total += float(loss.detach())
    out = {
        h: [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in ps]
        for h, ps in hosts.items()
    }
    return out, total
