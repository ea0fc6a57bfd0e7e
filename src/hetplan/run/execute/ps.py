"""Parameter server on the executor: shards hosted by ranks, workers push and pull.

The trainable tensors are sharded over the plan's ``ps_devices`` by the plan's assignment
(:func:`hetplan.cost.comm_ps.assign_ps_shards`, the rule the predictor prices), in the model's
layer and registration order; a shard's host is the rank of that device (servers co-located
with workers, the layout the planner proposes). The host keeps the shard's optimizer state
and applies the update; every worker keeps a full copy of the weights for its forward and
backward.

Synchronous (BSP): the schedule's ``ps_push`` sums every worker's gradients of each shard at
its host (one ``reduce`` per host), which steps its shard's optimizer; each worker's
``ps_pull`` takes the new shard weights from each host (one ``broadcast`` per host). Each
worker's loss is weighted by its share of the global batch, so the sum is the gradient of the
global-batch mean and the step is data parallelism's (tested against one process).

Asynchronous (bounded staleness) is :mod:`hetplan.run.execute.ps_async`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.cost.comm_ps import assign_ps_shards
from hetplan.planspec import Plan
from hetplan.run.execute.executor import Executor
from hetplan.run.setup.layout import run_devices
from hetplan.schedule.types import Action


def hosted_params(
    plan: Plan, layer_params: list[list[nn.Parameter]]
) -> dict[int, list[nn.Parameter]]:
    """Host rank -> the trainable tensors it serves, by the plan's shard assignment."""
    tensors = [p for layer in layer_params for p in layer]
    sizes = [p.numel() * p.element_size() for p in tensors]
    assignment = assign_ps_shards(sizes, len(plan.ps_devices), plan.ps_assignment)
    rank_of = {device: rank for rank, device in enumerate(run_devices(plan))}
    out: dict[int, list[nn.Parameter]] = {}
    for device, idx in zip(plan.ps_devices, assignment, strict=True):
        out.setdefault(rank_of[device], []).extend(tensors[i] for i in idx)
    return {host: ps for host, ps in sorted(out.items()) if ps}


def _flat_grads(params: list[nn.Parameter]) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])


def _unflatten(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


class PsExecutor(Executor):
    """A worker (and, for its hosted shards, a server) of a synchronous parameter server."""

    def __init__(self, *, hosts: dict[int, list[nn.Parameter]], rank: int, group: Any, **kw: Any):
        super().__init__(**kw)
        self.hosts = hosts
        self.rank = rank
        self.group = group
        self._finite = True
        # The push's flat buffers, refilled for the pull: one set per step, whatever gloo's
        # worker thread does. It releases a finished work's tensors only when it runs again,
        # so new pull buffers could sit beside the push's under load (vgg11 x2 measured one
        # rank 37 MB, a whole set, above the other, 2026-11-29).
        self._flats: dict[int, torch.Tensor] = {}

    def step(self, x: torch.Tensor | None, y: torch.Tensor | None) -> float | None:
        for p in self.module.parameters():
            p.grad = None
        return super().step(x, y)

    def _run(self, act: Action) -> None:
        if act.kind not in ("ps_push", "ps_pull", "optimizer"):
            super()._run(act)
            return
        start = self.stamp()
        if act.kind == "ps_push":
            self._push()
        elif act.kind == "ps_pull":
            self._pull()
        elif act.kind == "optimizer":  # the hosts stepped in the push, the pull brought the
            mine = {id(p) for p in self.hosts.get(self.rank, [])}  # weights; what stays is
            for p in self.module.parameters():  # the summed gradient of the hosted shards
                if id(p) not in mine:
                    p.grad = None
        self._record(act.kind, act, start)

    def _push(self) -> None:
        """Every shard's gradient summed at its host, which applies its optimizer."""
        params = [p for ps in self.hosts.values() for p in ps if not p.is_meta]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self._finite = self.scaler.unscale_and_check(params)
        if not self._finite:
            return  # an overflow somewhere: every rank skips the step (loss scaling)
        works = []
        for host, ps in self.hosts.items():
            flat = _flat_grads(ps) if not ps[0].is_meta else self._zeros(ps)
            self._flats[host] = flat
            works.append((host, ps, flat, dist.reduce(flat, host, group=self.group, async_op=True)))
        for host, ps, flat, work in works:
            work.wait()
            if host == self.rank:
                _unflatten(flat, [p.grad for p in ps if p.grad is not None])
        if self.rank in self.hosts:
            self.optimizer.step()

    def _pull(self) -> None:
        """Every shard's new weights from its host."""
        flats, self._flats = self._flats, {}
        if not self._finite:
            return
        works = []
        for host, ps in self.hosts.items():
            flat = flats.get(host)
            if flat is None:
                flat = self._zeros(ps)
            if not ps[0].is_meta:  # a server-only rank's buffer is written by the broadcast
                torch.cat([p.detach().reshape(-1) for p in ps], out=flat)
            works.append((ps, flat, dist.broadcast(flat, host, group=self.group, async_op=True)))
        with torch.no_grad():
            for ps, flat, work in works:
                work.wait()
                if not ps[0].is_meta:  # a server-only rank holds only its own shard
                    _unflatten(flat, [p.data for p in ps])

    def _zeros(self, ps: list[nn.Parameter]) -> torch.Tensor:
        """A buffer for another host's shard on a server-only rank (which never built it)."""
        return torch.zeros(sum(p.numel() for p in ps), device=self.device)


class ServerExecutor(PsExecutor):
    """A server-only rank of a synchronous parameter server: it joins each push (receiving its
    shard's sum and stepping its optimizer) and the pulls that follow (its schedule has the
    push only: the pulls are each worker's)."""

    def _run(self, act: Action) -> None:
        start = self.stamp()
        if act.kind != "ps_push":
            raise RuntimeError(f"a server-only rank runs no {act.kind}")
        self._push()
        self._pull()
        self._record("ps_push", act, start)
