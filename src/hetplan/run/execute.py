"""One training step of a rank's part of the plan, on the real engines.

- dp: ``DistributedDataParallel`` over all ranks. DDP averages gradients over the world size
  W, so each rank backpropagates ``mean_loss(local) * n_local * W / B`` (B: global batch):
  the average of those gradients is the gradient of the mean loss over the global batch,
  whatever the per-rank batch sizes.
- gpipe / 1f1b / hybrid: ``torch.distributed.pipelining.PipelineStage`` built from a slice of
  the model's top-level children, run by ``ScheduleGPipe`` or ``Schedule1F1B``. Each
  micro-batch's loss is ``mean_loss(mb) * n_mb / B``, so the summed gradients over
  micro-batches (and over pipelines) are those of the global-batch mean; torch's own
  per-micro-batch scaling is turned off (``scale_grads=False`` where it exists; torch < 2.6
  never scaled).
- hybrid: after the schedule, each stage's gradients are summed over its data-parallel group
  (one rank per pipeline) with one allreduce of the flattened gradients.
"""

from __future__ import annotations

import contextlib
import inspect
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.nn.parallel import DistributedDataParallel

from hetplan.plan.types import Plan
from hetplan.run.launch import RankContext
from hetplan.run.layout import RankRole, pipeline_ranks, schedule_name, stage_ranks
from hetplan.run.model import ModelSource, shared_parameters, slice_children


def stage_ties(model: nn.Module, plan: Plan) -> list[dict[int, str]]:
    """Parameters shared by several stages of a pipeline: for each, stage -> the parameter's
    name in that stage (its first name there). Their gradients are summed across the stages
    after the schedule, the way Megatron-LM syncs tied embeddings, so that copies stay equal.
    """
    stage_of = {name: s for s, st in enumerate(plan.pipelines[0].stages) for name in st.layers}
    ties: list[dict[int, str]] = []
    for names in shared_parameters(model):
        where: dict[int, str] = {}
        for name in names:
            where.setdefault(stage_of[name.split(".", 1)[0]], name)
        if len(where) > 1:
            ties.append(where)
    return ties


class Groups:
    """The process groups of a plan; every rank creates all of them, in the same order."""

    def __init__(
        self, plan: Plan, ctx: RankContext, timeout_s: float, ties: list[dict[int, str]]
    ) -> None:
        timeout = timedelta(seconds=timeout_s)
        self.world: Any = dist.new_group(list(range(ctx.world_size)), timeout=timeout)
        self.pipeline: Any = None
        self.stage: Any = None
        self.ties: list[tuple[str, Any]] = []
        """(parameter name in this rank's stage, group of the stages sharing it)."""
        if plan.strategy == "dp":
            return
        for ranks in pipeline_ranks(plan):
            for tie in ties:
                members = [ranks[s] for s in sorted(tie)]
                group = dist.new_group(members, timeout=timeout)
                if ctx.rank in members:
                    self.ties.append((tie[ranks.index(ctx.rank)], group))
        for ranks in pipeline_ranks(plan):
            group = dist.new_group(ranks, timeout=timeout)
            if ctx.rank in ranks:
                self.pipeline = group
        if len(plan.pipelines) > 1:
            for ranks in stage_ranks(plan):
                group = dist.new_group(ranks, timeout=timeout)
                if ctx.rank in ranks:
                    self.stage = group


class DataParallelStep:
    """dp: the whole model under DistributedDataParallel, accumulating gradients over
    ``plan.micro_batches`` slices of the rank's batch (DDP's ``no_sync`` on all but the last,
    so one allreduce per step; the planner chooses this when a replica's batch does not fit)."""

    def __init__(
        self, ctx: RankContext, plan: Plan, source: ModelSource, model: nn.Module, groups: Groups
    ) -> None:
        self.module = model
        self.source = source
        self.world = ctx.world_size
        self.scale = ctx.world_size / plan.global_batch
        self.micro_batches = plan.micro_batches
        ids = [ctx.local_rank] if ctx.device.startswith("cuda") else None
        self.ddp = DistributedDataParallel(
            model, device_ids=ids, process_group=groups.world, bucket_cap_mb=plan.bucket_mb
        )

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float | None:
        chunks = list(
            zip(
                torch.tensor_split(x, self.micro_batches),
                torch.tensor_split(y, self.micro_batches),
                strict=True,
            )
        )
        total = 0.0
        for k, (xs, ys) in enumerate(chunks):
            # Each slice backpropagates mean(slice) * n_slice * W / B: the sum over slices and
            # DDP's average over ranks is the gradient of the global-batch mean loss.
            sync = k == len(chunks) - 1
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                loss = self.source.loss(self.ddp(xs), ys) * (xs.shape[0] * self.scale)
                loss.backward()
            total += float(loss.detach())
        # This rank's share of the global-batch mean loss: mean(local) * n_local / B.
        return total / self.world


def _stage_examples(
    source: ModelSource, role: RankRole, micro: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Meta tensors of the stage's input and output for one micro-batch (no compute).

    Their ``requires_grad`` matters: a received activation needs a gradient (stages > 0),
    so that the stage sends one back.
    """
    with torch.device("meta"):
        model = source.build(seed, "meta")
    x, _ = source.batch(micro, seed, "cpu")
    h = torch.empty(x.shape, dtype=x.dtype, device="meta")
    children = dict(model.named_children())
    names = list(children)
    with torch.no_grad():
        for name in names[: names.index(role.layers[0])]:
            h = children[name](h)
    inp = h.detach().requires_grad_(role.stage > 0 and h.is_floating_point())
    h = inp
    for name in role.layers:
        h = children[name](h)
    return inp, h.detach().requires_grad_(h.is_floating_point())


class PipelineStep:
    """gpipe / 1f1b / hybrid: one pipeline stage run by a torch pipelining schedule."""

    def __init__(
        self,
        ctx: RankContext,
        role: RankRole,
        plan: Plan,
        source: ModelSource,
        model: nn.Module,
        groups: Groups,
        seed: int,
    ) -> None:
        self.module = slice_children(model, list(role.layers))
        self.role = role
        self.dp_group = groups.stage
        self.ties = groups.ties
        micro = role.batch // plan.micro_batches
        example_in, example_out = _stage_examples(source, role, micro, seed)
        stage = PipelineStage(
            self.module,
            role.stage,
            role.num_stages,
            torch.device(ctx.device),
            input_args=example_in,
            output_args=example_out,
            group=groups.pipeline,
        )
        cls = ScheduleGPipe if schedule_name(plan) == "gpipe" else Schedule1F1B
        extra: dict[str, Any] = {}
        if "scale_grads" in inspect.signature(cls.__init__).parameters:
            extra["scale_grads"] = False
        batch = plan.global_batch

        def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return source.loss(out, target) * (out.shape[0] / batch)

        self.schedule = cls(stage, plan.micro_batches, loss_fn=loss_fn, **extra)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float | None:
        first = self.role.stage == 0
        last = self.role.stage == self.role.num_stages - 1
        losses: list[torch.Tensor] = []
        args = (x,) if first else ()
        self.schedule.step(*args, target=y if last else None, losses=losses)
        if self.dp_group is not None:
            allreduce_grads(self.module, self.dp_group)
        for name, group in self.ties:
            param = self.module.get_parameter(name)
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad, group=group)
        return float(sum(float(t) for t in losses)) if last else None


def allreduce_grads(module: nn.Module, group: Any) -> None:
    """Sum the module's gradients over ``group`` with one allreduce of a flat buffer."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
