"""Which rank does what: the plan's devices in pipeline-then-stage order are ranks 0..W-1.

Rank ``p * S + s`` runs stage ``s`` of pipeline ``p`` (S stages per pipeline), so that each
pipeline's ranks are increasing with the stage (``torch.distributed.pipelining`` maps stage i
to the i-th rank of its group) and each stage's data-parallel group holds one rank per
pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetplan.errors import InputError
from hetplan.plan.types import Plan

EXECUTABLE = ("dp", "gpipe", "1f1b", "hybrid")


@dataclass(frozen=True, kw_only=True)
class RankRole:
    """One rank's part of the plan."""

    rank: int
    pipeline: int
    stage: int
    num_stages: int
    device: str
    """Cluster device id."""
    layers: tuple[str, ...]
    batch: int
    """Samples per iteration of this rank's pipeline."""
    batch_offset: int
    """Index of the pipeline's first sample in the global batch."""


def rank_roles(plan: Plan) -> list[RankRole]:
    """Every rank's role, by rank."""
    roles: list[RankRole] = []
    offset = 0
    for p, pipe in enumerate(plan.pipelines):
        for s, stage in enumerate(pipe.stages):
            roles.append(
                RankRole(
                    rank=len(roles),
                    pipeline=p,
                    stage=s,
                    num_stages=len(pipe.stages),
                    device=stage.devices[0],
                    layers=tuple(stage.layers),
                    batch=pipe.batch,
                    batch_offset=offset,
                )
            )
        offset += pipe.batch
    return roles


def pipeline_ranks(plan: Plan) -> list[list[int]]:
    """Ranks of each pipeline, in stage order (the pipeline-parallel groups)."""
    s = plan.num_stages
    return [[p * s + j for j in range(s)] for p in range(len(plan.pipelines))]


def stage_ranks(plan: Plan) -> list[list[int]]:
    """Ranks holding each stage, one per pipeline (the data-parallel groups)."""
    s = plan.num_stages
    return [[p * s + j for p in range(len(plan.pipelines))] for j in range(s)]


def check_executable(plan: Plan, layer_names: list[str]) -> None:
    """InputError, naming the field and the numbers, for a plan this runtime cannot execute."""
    if plan.strategy not in EXECUTABLE:
        raise InputError(
            f"strategy {plan.strategy} is not executable yet (see docs/run.md); "
            f"executable: {', '.join(EXECUTABLE)}"
        )
    if plan.tp != 1:
        raise InputError(f"tp: tensor parallelism (tp = {plan.tp}) is not executable yet")
    if plan.strategy == "hybrid" and plan.sync != "bsp":
        raise InputError(f"sync: {plan.sync} is not executable yet (only bsp; see docs/run.md)")
    if plan.strategy != "dp":
        _check_micro_batches(plan)
    for i, pipe in enumerate(plan.pipelines):
        layers = [name for stage in pipe.stages for name in stage.layers]
        if layers != layer_names:
            raise InputError(
                f"pipelines.{i}: stages must cover the model's top-level layers in order, "
                f"each once; model: {', '.join(layer_names)}; plan: {', '.join(layers)}"
            )


def _check_micro_batches(plan: Plan) -> None:
    m = plan.micro_batches
    for i, pipe in enumerate(plan.pipelines):
        if pipe.batch % m:
            raise InputError(
                f"pipelines.{i}.batch ({pipe.batch}) must be a multiple of micro_batches ({m}) "
                "to run (pipeline stages exchange fixed-shape micro-batches)"
            )
    if plan.strategy == "1f1b" and m < plan.num_stages:
        raise InputError(
            f"micro_batches ({m}) must be >= stages ({plan.num_stages}) for 1f1b "
            "(torch.distributed.pipelining.Schedule1F1B)"
        )


def schedule_name(plan: Plan) -> str:
    """The torch schedule a pipelined plan runs: 1F1B where torch allows it (micro-batches >=
    stages), which for hybrid matches the 1F1B order the predictor uses; GPipe otherwise."""
    if plan.strategy == "gpipe" or plan.micro_batches < plan.num_stages:
        return "gpipe"
    return "1f1b"
