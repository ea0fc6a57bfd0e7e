"""What each rank runs: build its part of the model, train ``warmup + steps`` steps, time them.

``train_rank(ctx, payload)`` is the entry of :func:`hetplan.run.launch.launch_local`; the same
function runs under ``torchrun`` on several nodes through ``python -m hetplan.run.worker``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.cluster import load_cluster
from hetplan.plan.types import Plan
from hetplan.run._rank import rank_main
from hetplan.run.execute import DataParallelStep, Groups, PipelineStep, stage_ties
from hetplan.run.launch import RankContext, default_backend
from hetplan.run.layout import rank_roles
from hetplan.run.measure import default_path, save_measurement, summarize
from hetplan.run.model import ModelSource, canonical_names, data_seed, source_for
from hetplan.run.timing import StageClock, peak_memory
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
    model = source.build(seed, ctx.device)
    timeout_s = float(payload.get("collective_timeout_s", COLLECTIVE_TIMEOUT_S))
    groups = Groups(plan, ctx, timeout_s, stage_ties(model, plan))
    canonical = canonical_names(model)
    runner: DataParallelStep | PipelineStep
    if plan.strategy == "dp":
        runner = DataParallelStep(ctx, plan, source, model, groups)
    else:
        runner = PipelineStep(ctx, role, plan, source, model, groups, seed)
    module = runner.module
    clock = StageClock(module, ctx.device)
    optimizer = make_optimizer(plan.optimizer, list(module.parameters()))
    out: dict[str, Any] = {
        "rank": ctx.rank,
        "device": role.device,
        "pipeline": role.pipeline,
        "stage": role.stage,
        "step_s": [],
        "forward_s": [],
        "backward_s": [],
        "optimizer_s": [],
        "loss": [],
        "actions": [],
        "last_step_start": 0.0,
    }
    for step in range(steps):
        x, y = source.batch(role.batch, data_seed(seed, step, role.pipeline), ctx.device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = runner(x, y)
        before_opt = _now(ctx.device)
        if step == 0 and payload.get("return_grads"):
            out["grads"] = {
                canonical.get(name, name): p.grad.detach().cpu().clone()
                for name, p in module.named_parameters()
                if p.grad is not None
            }
        optimizer.step()
        end = _now(ctx.device)
        fwd, bwd = clock.take()
        out["step_s"].append(end - start)
        out["forward_s"].append(fwd)
        out["backward_s"].append(bwd)
        out["optimizer_s"].append(end - before_opt)
        out["loss"].append(loss)
        # The last step's forward/backward spans (absolute perf_counter; aligned across ranks
        # in :func:`hetplan.run.measure.summarize`; one host shares one monotonic clock).
        out["actions"] = [[k, mb, s, e] for k, mb, s, e in clock.take_spans()]
        out["last_step_start"] = start
    out["peak_memory_bytes"], out["memory_source"] = peak_memory(ctx.device)
    return out


def _now(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()


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
