"""Which rank does what: the plan's devices in pipeline, stage, then tensor-parallel order are
ranks 0..W-1.

Rank ``(p * S + s) * T + t`` runs tensor-parallel shard ``t`` of stage ``s`` of pipeline ``p``
(S stages per pipeline, T = ``plan.tp``), so that each pipeline's ranks increase with the
stage (``torch.distributed.pipelining`` maps stage i to the i-th rank of its group), shard
``t`` of a stage exchanges activations with shard ``t`` of the next, and each data-parallel
group (one stage, one shard index) holds one rank per pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetplan.errors import InputError
from hetplan.planspec import Plan
from hetplan.planspec.strategies import spec_of


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
    tp_rank: int = 0
    """Shard index inside the stage's tensor-parallel group."""


def rank_of(plan: Plan, pipeline: int, stage: int, tp_rank: int = 0) -> int:
    return (pipeline * plan.num_stages + stage) * plan.tp + tp_rank


def rank_roles(plan: Plan) -> list[RankRole]:
    """Every rank's role, by rank."""
    roles: list[RankRole] = []
    offset = 0
    for p, pipe in enumerate(plan.pipelines):
        for s, stage in enumerate(pipe.stages):
            for t, device in enumerate(stage.devices):
                roles.append(
                    RankRole(
                        rank=len(roles),
                        pipeline=p,
                        stage=s,
                        num_stages=len(pipe.stages),
                        device=device,
                        layers=tuple(stage.layers),
                        batch=pipe.batch,
                        batch_offset=offset,
                        tp_rank=t,
                    )
                )
        offset += pipe.batch
    return roles


def server_devices(plan: Plan) -> list[str]:
    """Parameter-server hosts that are not workers: each runs a server-only rank after the
    workers' ranks."""
    if not spec_of(plan).hosts_parameters:
        return []
    workers = set(plan.devices)
    return [d for d in dict.fromkeys(plan.ps_devices) if d not in workers]


def run_devices(plan: Plan) -> list[str]:
    """The device of every rank of a run: the workers, then the server-only hosts."""
    return [*plan.devices, *server_devices(plan)]


def server_role(plan: Plan, rank: int) -> RankRole:
    """The role of a server-only rank (no stage: it reads no data and computes nothing)."""
    return RankRole(
        rank=rank, pipeline=-1, stage=-1, num_stages=1, device=run_devices(plan)[rank],
        layers=(), batch=0, batch_offset=0,
    )  # fmt: skip


def pipeline_ranks(plan: Plan, tp_rank: int = 0) -> list[list[int]]:
    """Ranks of shard ``tp_rank`` of each pipeline, in stage order (the point-to-point
    chains)."""
    s = plan.num_stages
    return [[rank_of(plan, p, j, tp_rank) for j in range(s)] for p in range(len(plan.pipelines))]


def stage_ranks(plan: Plan) -> list[list[int]]:
    """Ranks holding each (stage, shard), one per pipeline (the data-parallel groups)."""
    return [
        [rank_of(plan, p, j, t) for p in range(len(plan.pipelines))]
        for j in range(plan.num_stages)
        for t in range(plan.tp)
    ]


def tp_ranks(plan: Plan) -> list[list[int]]:
    """Ranks of each stage of each pipeline (the tensor-parallel groups)."""
    return [
        [rank_of(plan, p, j, t) for t in range(plan.tp)]
        for p in range(len(plan.pipelines))
        for j in range(plan.num_stages)
    ]


def check_executable(plan: Plan, layer_names: list[str]) -> None:
    """InputError, naming the field and the numbers, for a plan this runtime cannot execute.

    ``layer_names``: the model's layers at the plan's depth (what ``hetplan inspect`` lists).
    """
    why = spec_of(plan).why_unrunnable(plan)
    if why is not None:
        raise InputError(why)
    known = set(layer_names)
    for i, pipe in enumerate(plan.pipelines):
        layers = [name for stage in pipe.stages for name in stage.layers]
        unknown = [name for name in layers if name not in known]
        if unknown:
            raise InputError(
                f"pipelines.{i}: layer {unknown[0]!r} is not a layer of the model at depth "
                f"{plan.model.depth or 1} (see hetplan inspect)"
            )
        if sorted(layers) != sorted(layer_names):
            missing = sorted(known - set(layers)) or sorted(
                {n for n in layers if layers.count(n) > 1}
            )
            raise InputError(
                f"pipelines.{i}: stages must cover every layer of the model once; "
                f"missing or repeated: {', '.join(missing)}"
            )
