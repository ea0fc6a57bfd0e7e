"""A plan's schedule, built here for the predictor and the runtime alike.

:data:`GENERATORS` maps each strategy to the generator of its schedule over priced work
(:class:`~hetplan.schedule.work.PricedWork`). The predictor prices the work
(:func:`hetplan.predict.price.price`); the runtime builds it with unit durations
(:func:`execution_schedule`): the order of a schedule's actions does not depend on their
durations (the builder orders by dependencies and per-resource emission order), so each rank
runs its device's actions in the order the prediction simulated (tests check that the two
orders agree).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hetplan.cost.comm_buckets import ddp_buckets, first_bucket
from hetplan.planspec.plan import Plan
from hetplan.planspec.strategies import spec_of
from hetplan.schedule import generators as gen
from hetplan.schedule.types import Action, Schedule
from hetplan.schedule.work import (
    PipelineWork,
    PricedWork,
    PsWork,
    StageWork,
    SyncBucket,
    split_backward,
)
from hetplan.units import MiB

Generator = Callable[[Plan, PricedWork, "int | None"], Schedule]
"""(plan, priced work, iterations) -> schedule. ``iterations``: for the multi-iteration
schedules (asynchronous ones), exactly that many and no steady-state window (execution);
None: as many as the prediction needs."""

UNIT_S = 1.0  # seconds: any positive duration gives the same order


def _flushed(plan: Plan, work: PricedWork, iterations: int | None) -> Schedule:
    order = spec_of(plan).order
    return gen.synchronous(
        plan.strategy, work.pipes, plan.micro_batches, order=order, buckets=work.buckets
    )


def _parameter_server(plan: Plan, work: PricedWork, iterations: int | None) -> Schedule:
    kw = {} if iterations is None else {"iterations": iterations}
    return gen.parameter_server(
        work.pipes,
        plan.ps_devices,
        work.ps,
        plan.micro_batches,
        asynchronous=plan.ps_async,
        staleness=plan.staleness,
        **kw,
    )


def _pipedream(plan: Plan, work: PricedWork, iterations: int | None) -> Schedule:
    return gen.pipedream_async(work.pipes[0], plan.micro_batches, iterations=iterations)


def _hybrid(plan: Plan, work: PricedWork, iterations: int | None) -> Schedule:
    if plan.sync != "wsp":
        return _flushed(plan, work, iterations)
    return gen.wsp(
        work.pipes, plan.micro_batches, plan.staleness, buckets=work.buckets, iterations=iterations
    )


GENERATORS: dict[str, Generator] = {
    "dp": _flushed,
    "ps": _parameter_server,
    "gpipe": _flushed,
    "1f1b": _flushed,
    "pipedream": _pipedream,
    "hybrid": _hybrid,
    "fsdp": _flushed,  # its collectives run inside the forward and backward actions
}
"""The schedule generator of every strategy (keys: :data:`hetplan.planspec.STRATEGIES`)."""


def build_schedule(plan: Plan, work: PricedWork, iterations: int | None = None) -> Schedule:
    """The strategy's schedule over the priced work (see :data:`Generator`)."""
    return GENERATORS[spec_of(plan).name](plan, work, iterations)


def execution_schedule(
    plan: Plan, stage_tensor_bytes: Sequence[Sequence[Sequence[int]]], iterations: int = 1
) -> Schedule:
    """The plan's schedule as the runtime runs it; ``stage_tensor_bytes[s][i]``: bytes of each
    gradient tensor of layer ``i`` of stage ``s`` (the bucket assignment of
    :mod:`hetplan.run.execute.gradsync`).

    Windowed plans (asynchronous PipeDream, WSP) run ``iterations`` training steps as one
    continuous schedule (the pipeline drains only at its end); the others run one iteration
    per schedule (an asynchronous parameter server's workers wait for nobody in it: the
    servers bound their staleness)."""
    spec = spec_of(plan)
    sync = spec.syncs_replicas(plan)
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
    work = PricedWork(
        pipes=pipes,
        buckets=sync_buckets if sync else [],
        ps=[PsWork(push_s=UNIT_S, pull_s=UNIT_S)] * len(pipes) if spec.hosts_parameters else [],
        micro_batch=[pipe.batch // plan.micro_batches for pipe in plan.pipelines],
        bucket_bytes=[float(sum(g.nbytes for g in bs)) for bs in buckets],
        sources=(),
    )
    return build_schedule(plan, work, iterations if spec.windowed(plan) else 1)


def device_actions(schedule: Schedule, device: str) -> list[Action]:
    """What ``device`` runs, in order (a send appears at both ends)."""
    return [a for _, a in schedule.per_device().get(device, [])]
