"""The schedule a plan runs: hetplan's own, built by the generator the predictor uses.

The order of a schedule's actions does not depend on their durations (the builder orders by
dependencies and per-resource emission order), so the runtime builds the plan's schedule with
unit durations and the bucket structure of the real stage parameters, and each rank runs the
action list of its device. :func:`hetplan.predict.predict` builds the same schedule with priced
durations; tests check that the two orders agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.cost.comm_buckets import ddp_buckets, first_bucket
from hetplan.planspec import Plan
from hetplan.predict.predict import build_schedule
from hetplan.predict.price import PricedPlan, split_backward
from hetplan.schedule.types import Action, Schedule
from hetplan.schedule.work import PipelineWork, PsWork, StageWork, SyncBucket
from hetplan.units import MiB

UNIT_S = 1.0  # seconds: any positive duration gives the same order


def execution_schedule(
    plan: Plan, stage_tensor_bytes: Sequence[Sequence[Sequence[int]]], iterations: int = 1
) -> Schedule:
    """The plan's schedule; ``stage_tensor_bytes[s][i]``: bytes of each gradient tensor of
    layer ``i`` of stage ``s`` (the bucket assignment, :mod:`hetplan.run.gradsync`).

    Asynchronous plans (:func:`is_windowed`) run ``iterations`` training steps as one
    continuous schedule (a window; the pipeline drains only at its end); synchronous plans
    run one iteration per schedule."""
    sync = len(plan.pipelines) > 1 and plan.strategy != "ps"
    cap = plan.bucket_mb * MiB
    buckets = [ddp_buckets(t, cap, first_bucket(cap)) if sync else [] for t in stage_tensor_bytes]
    parts = [
        split_backward([UNIT_S] * len(t), b)[0] if sync else ()
        for t, b in zip(stage_tensor_bytes, buckets, strict=True)
    ]
    pipes = [
        PipelineWork(
            stages=tuple(
                StageWork(
                    devices=tuple(st.devices),
                    fwd_s=UNIT_S,
                    bwd_s=UNIT_S * len(parts[s] or (0,)),
                    bwd_parts=parts[s],
                    opt_s=UNIT_S,
                )
                for s, st in enumerate(pipe.stages)
            ),
            batch=pipe.batch,
        )
        for pipe in plan.pipelines
    ]
    sync_buckets = [
        [SyncBucket(part=k, duration_s=UNIT_S, nbytes=float(g.nbytes)) for k, g in enumerate(bs)]
        for bs in buckets
    ]
    priced = PricedPlan(
        pipes=pipes,
        buckets=sync_buckets if sync else [],
        ps=[PsWork(push_s=UNIT_S, pull_s=UNIT_S)] * len(pipes) if plan.strategy == "ps" else [],
        micro_batch=[pipe.batch // plan.micro_batches for pipe in plan.pipelines],
        bucket_bytes=[float(sum(g.nbytes for g in bs)) for bs in buckets],
        sources=(),
    )
    # One iteration per schedule for the parameter server (asynchronous workers wait for
    # nobody in the schedule: the servers bound their staleness).
    steps = iterations if is_windowed(plan) else 1 if plan.strategy == "ps" else None
    return build_schedule(plan, priced, steps)


def is_windowed(plan: Plan) -> bool:
    """Whether the plan's schedule spans several iterations with no flush between them
    (asynchronous PipeDream, HetPipe's WSP): what :class:`~hetplan.run.async_exec.
    WindowExecutor` runs."""
    return plan.strategy == "pipedream" or (plan.strategy == "hybrid" and plan.sync == "wsp")


def device_actions(schedule: Schedule, device: str) -> list[Action]:
    """What ``device`` runs, in order (a send appears at both ends)."""
    return [a for _, a in schedule.per_device().get(device, [])]
