"""Processes that share CPU cores (e.g. two ranks pinned to one core, speed 1/2 each).

A cluster file declares such a device's ``speed`` as its share of the core when all of its
core-mates compute at the same time. The operating system's scheduler (Linux CFS: runnable
threads share a core equally; a blocked one uses none of it) gives a busy process the whole
core while its core-mates wait, for example in a pipeline's bubbles or while they wait for a
transfer. So a process's real speed depends on the schedule: with capacity ``C`` (the sum of the
declared speeds of the devices pinned to the same cores) and ``k`` members computing at once,
each gets ``C / k``, less what switching between them costs: a core time-sliced between
busy processes refills their caches at every slice (:data:`TIME_SLICE_TAX`).

:func:`shared_speeds` estimates each member's effective speed as ``C / k_avg`` (less the
tax while ``k_avg > 1``), where ``k_avg`` is the time-weighted number of members computing
during its own compute time in a simulated timeline; :func:`hetplan.predict.predict`
re-prices and re-simulates with those speeds a few times (a fixed-point iteration), starting
from the declared ones.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from hetplan.cluster.spec import Cluster
from hetplan.planspec import Plan
from hetplan.planspec.trace import COMPUTE_KINDS
from hetplan.simulate import Timeline

TIME_SLICE_TAX = 0.08
"""Fraction of a core lost to switching while two or more processes pinned to it compute at
once (dimensionless): ``1 - 2 s`` with ``s`` a process's measured share two to a core,
``benchmarks/bench_core_sharing.py`` on the 2-core development machine (2026-11-29, forward and
backward, one thread, fastest of 4 trials): s = 0.425 (resnet-tiny), 0.460 (vgg11), 0.463
(gpt-tiny); median 0.46."""

SHARING_ROUNDS = 3
"""Re-simulations with the effective speeds (the estimate moves little after 2-3 rounds on
the suite's plans; each round costs one more pricing and simulation)."""


def core_groups(cluster: Cluster, devices: list[str]) -> list[tuple[list[str], float]]:
    """Groups of ``devices`` pinned to the same cores (two or more), each with the capacity
    of those cores: the sum of the declared speeds of *all* cluster devices pinned there."""
    by_cpus: dict[tuple[int, ...], list[str]] = defaultdict(list)
    for d in cluster.devices:
        if d.cpus:
            by_cpus[tuple(sorted(d.cpus))].append(d.id)
    wanted = set(devices)
    out = []
    for members in by_cpus.values():
        used = [m for m in members if m in wanted]
        if len(used) >= 2:
            out.append((used, sum(cluster.device(m).speed for m in members)))
    return out


def tp_ranks(plan: Plan) -> dict[str, list[str]]:
    """Per device that leads a tensor-parallel stage (the timeline's device for the stage's
    spans), every rank of that stage: all of them compute each of its spans."""
    return {
        stage.devices[0]: list(stage.devices)
        for pipe in plan.pipelines
        for stage in pipe.stages
        if len(stage.devices) > 1
    }


def busy_overlap(
    timeline: Timeline, members: list[str], tp: dict[str, list[str]] | None = None
) -> dict[str, float]:
    """Per member: the time-weighted number of members computing while it computes (>= 1);
    members that never compute are left out. ``tp``: :func:`tp_ranks` (a tensor-parallel
    stage's ranks on one core time-slice it as data-parallel replicas would)."""
    events: list[tuple[float, int, str]] = []
    for op in timeline.spans():
        if op.kind not in COMPUTE_KINDS or op.end <= op.start:
            continue
        for dev in (tp or {}).get(op.device, [op.device]):
            if dev in members:
                events += [(op.start, 1, dev), (op.end, -1, dev)]
    events.sort(key=lambda e: (e[0], e[1]))
    active: dict[str, int] = defaultdict(int)
    busy: dict[str, float] = defaultdict(float)
    weighted: dict[str, float] = defaultdict(float)
    last = events[0][0] if events else 0.0
    for t, step, dev in events:
        dt = t - last
        if dt > 0:
            running = [d for d, n in active.items() if n > 0]
            for d in running:
                busy[d] += dt
                weighted[d] += dt * len(running)
        active[dev] += step
        last = t
    return {d: weighted[d] / busy[d] for d in busy if busy[d] > 0}


def shared_speeds(
    timeline: Timeline,
    groups: list[tuple[list[str], float]],
    tp: dict[str, list[str]] | None = None,
) -> dict[str, float]:
    """Effective speed of every member that computes: ``capacity / k_avg``, less
    :data:`TIME_SLICE_TAX` in proportion to the time a core-mate computed beside it
    (``k_avg - 1``, at most 1); ``tp`` as :func:`busy_overlap` takes it."""
    out: dict[str, float] = {}
    for members, capacity in groups:
        for dev, k in busy_overlap(timeline, members, tp).items():
            out[dev] = capacity / k * (1.0 - TIME_SLICE_TAX * min(1.0, k - 1.0))
    return out


def with_speeds(cluster: Cluster, speeds: dict[str, float]) -> Cluster:
    """``cluster`` with the given devices' speeds replaced."""
    devices = tuple(
        dataclasses.replace(d, speed=speeds[d.id]) if d.id in speeds else d for d in cluster.devices
    )
    return dataclasses.replace(cluster, devices=devices)
