"""What each rank runs: build its part of the model, train ``warmup + steps`` steps, time them.

``train_rank(ctx, payload)`` is the entry of :func:`hetplan.run.launch.launch_local`; the same
function runs under ``torchrun`` on several nodes through ``python -m hetplan.run.worker``.
"""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.cluster import load_cluster
from hetplan.plan.types import Plan
from hetplan.run._rank import rank_main
from hetplan.run.executor import Executor
from hetplan.run.launch import RankContext, default_backend
from hetplan.run.layout import RankRole, rank_roles
from hetplan.run.measure import default_path, save_measurement, summarize
from hetplan.run.memory import measure_step_memory
from hetplan.run.model import ModelSource, data_seed, source_for
from hetplan.run.precision import LossScaler
from hetplan.run.rank_setup import Groups, bucket_sync, exchange_templates, setup_rank
from hetplan.serde import load_file

# Learning rates of the optimizers. The runtime measures speed, not convergence: any fixed,
# stable value does; these are the usual defaults of SGD and Adam in the papers' set-ups.
SGD_LR = 0.01  # dimensionless
MOMENTUM = 0.9  # dimensionless
ADAM_LR = 1e-3  # dimensionless
COLLECTIVE_TIMEOUT_S = 300.0  # seconds a collective may wait before failing the run


def make_optimizer(name: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=ADAM_LR)
    momentum = MOMENTUM if name == "momentum" else 0.0
    return torch.optim.SGD(params, lr=SGD_LR, momentum=momentum)


def train_rank(ctx: RankContext, payload: dict[str, Any]) -> dict[str, Any]:
    """Run this rank's part of ``payload['plan']``; return its timings (and step-0 grads)."""
    plan: Plan = payload["plan"]
    source: ModelSource = payload["source"]
    seed = int(payload.get("seed", 0))
    steps = int(payload.get("steps", 1)) + int(payload.get("warmup", 0))
    roles = rank_roles(plan)
    if len(roles) != ctx.world_size:
        raise RuntimeError(f"plan has {len(roles)} ranks but the world has {ctx.world_size}")
    role = roles[ctx.rank]
    timeout_s = float(payload.get("collective_timeout_s", COLLECTIVE_TIMEOUT_S))
    groups = Groups(plan, ctx.rank, ctx.world_size, timeout_s)
    setup = setup_rank(plan, role, source, seed, ctx.device)
    if setup.ties is not None:
        setup.ties.group = groups.ties
    dtype = plan.model.dtype
    micro = role.batch // plan.micro_batches
    io = exchange_templates(setup, source, micro, seed, ctx.device, dtype)
    module = setup.module
    optimizer = make_optimizer(plan.optimizer, [p for p in module.parameters() if p.requires_grad])
    executor = Executor(
        module=module,
        io=io,
        actions=setup.actions,
        device=ctx.device,
        micro_batches=plan.micro_batches,
        global_batch=plan.global_batch,
        loss_fn=source.loss,
        dtype=dtype,
        optimizer=optimizer,
        ties=setup.ties,
        scaler=LossScaler(dtype == "fp16", groups.world),
        recompute=plan.recompute,
    )
    executor.sync = bucket_sync(setup, plan, groups, executor.record_collective)
    out = _empty_result(ctx, role)
    out["held_state_bytes"] = setup.held_bytes
    for step in range(steps):
        x, y = source.batch(role.batch, data_seed(seed, step, role.pipeline), ctx.device)
        if step == 0:  # memory is counted on the first step (counting slows it down)
            out["peak_memory_bytes"], out["memory_source"] = measure_step_memory(
                ctx.device, functools.partial(executor.step, x, y), module, optimizer
            )
        else:
            executor.step(x, y)
        _record_step(out, executor)
        if step == 0 and payload.get("return_grads"):
            out["grads"] = {
                setup.canonical.get(name, name): p.grad.detach().cpu().clone()
                for name, p in module.named_parameters()
                if p.grad is not None
            }
    return out


def _empty_result(ctx: RankContext, role: RankRole) -> dict[str, Any]:
    keys = ("step_s", "forward_s", "backward_s", "optimizer_s", "loss", "actions")
    out: dict[str, Any] = {key: [] for key in keys}
    out.update(rank=ctx.rank, device=role.device, pipeline=role.pipeline, stage=role.stage)
    out["last_step_start"] = 0.0
    return out


def _record_step(out: dict[str, Any], executor: Executor) -> None:
    """Step figures from the executed trace: compute seconds per kind, and the step's span."""
    trace = executor.trace

    def total(kind: str) -> float:
        return sum(t[5] - t[4] for t in trace if t[0] == kind)

    out["step_s"].append(executor.step_end - executor.step_start)
    out["forward_s"].append(total("fwd"))
    out["backward_s"].append(total("bwd"))
    out["optimizer_s"].append(total("optimizer"))
    out["loss"].append(executor.last_loss)
    # The last step's actions (absolute perf_counter; aligned across ranks in
    # :func:`hetplan.run.measure.summarize`; one host shares one monotonic clock).
    out["actions"] = [list(t) for t in trace]
    out["last_step_start"] = executor.step_start


def train_and_gather(ctx: RankContext, payload: dict[str, Any]) -> list[Any] | None:
    """``train_rank``, then every rank's result gathered on rank 0 (None elsewhere)."""
    result = train_rank(ctx, payload)
    gathered: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
    dist.gather_object(result, gathered, dst=0)
    return gathered


def main(argv: list[str] | None = None) -> int:
    """Entry of one rank under ``torchrun`` (see :func:`hetplan.run.commands`)."""
    parser = argparse.ArgumentParser(prog="python -m hetplan.run.worker")
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--cluster", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rdzv-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    plan = load_file(Plan, args.plan)
    cluster = load_cluster(args.cluster)
    payload = {
        "plan": plan,
        "source": source_for(plan.model),
        "steps": args.steps,
        "warmup": args.warmup,
    }
    cpus = [cluster.device(d).cpus for d in plan.devices]
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    raw = rank_main(
        "hetplan.run.worker:train_and_gather",
        payload,
        cpus,
        default_backend(local_world),
        args.rdzv_timeout,
    )
    if raw is not None:
        measurement = summarize(plan, raw, warmup=args.warmup, cluster=cluster.name)
        save_measurement(measurement, args.out or default_path(plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
