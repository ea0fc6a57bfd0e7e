"""Schedule generators for every strategy of :mod:`hetplan.plan`.

All of them take priced work (:mod:`hetplan.schedule.work`) and return a
:class:`~hetplan.schedule.Schedule`:

- :func:`synchronous`: data parallel, GPipe, 1F1B and hybrid with synchronisation every
  mini-batch (BSP). Each replica runs its micro-batches; the backward of each stage's last
  micro-batch is split at gradient-bucket boundaries and each bucket's allreduce across the
  stage's replicas starts as soon as every replica has produced it (DDP's overlap); each
  device's optimizer step waits for all its buckets.
- :func:`pipedream_async`: asynchronous PipeDream (1F1B without flush, weight stashing) over
  several iterations; throughput is measured on a steady-state window.
- :func:`wsp`: HetPipe's wave-synchronous hybrid: each replica runs 1F1B continuously; after
  each wave (one iteration's micro-batches) a stage's gradients are all-reduced across replicas,
  and the weights of wave ``w`` must be in before wave ``w + D + 1`` starts on that stage.
- :func:`parameter_server`: synchronous (one push phase after every worker's backward, then
  each worker's pull) or asynchronous (each worker pushes and pulls alone, with the contention
  already in its priced times).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from hetplan.planspec.order import Order
from hetplan.schedule.builder import ScheduleBuilder
from hetplan.schedule.pipeline import bwd_key, emit_replica
from hetplan.schedule.types import Schedule, comm_res
from hetplan.schedule.work import PipelineWork, PsWork, SyncBucket

StageBuckets = Sequence[Sequence[SyncBucket]]


def _devices(pipes: Sequence[PipelineWork], extra: Sequence[str] = ()) -> list[str]:
    seen: dict[str, None] = {}
    for p in pipes:
        for st in p.stages:
            for d in st.devices:
                seen.setdefault(d, None)
    for d in extra:
        seen.setdefault(d, None)
    return list(seen)


def _check(pipes: Sequence[PipelineWork], m: int) -> None:
    if not pipes:
        raise ValueError("at least one pipeline is required")
    if m < 1:
        raise ValueError(f"micro_batches ({m}) must be >= 1")
    nums = {len(p.stages) for p in pipes}
    if len(nums) != 1:
        raise ValueError(f"every pipeline must have the same number of stages (got {nums})")


def _emit_allreduce(
    b: ScheduleBuilder,
    pipes: Sequence[PipelineWork],
    buckets: StageBuckets,
    m: int,
    iterations: int,
) -> dict[tuple[int, int], list[Hashable]]:
    """Add each stage's bucket allreduces for every iteration; return optimizer deps."""
    opt_deps: dict[tuple[int, int], list[Hashable]] = {}
    if len(pipes) < 2:
        return opt_deps
    for s in range(len(pipes[0].stages)):
        group = [d for p in pipes for d in p.stages[s].devices]
        stage_buckets = buckets[s] if s < len(buckets) else ()
        for w in range(iterations):
            j = w * m + m - 1
            keys: list[Hashable] = []
            for k, bucket in enumerate(stage_buckets):
                key = ("AR", s, w, k)
                b.add(
                    key,
                    [bwd_key(r, s, j, bucket.part) for r in range(len(pipes))],
                    kind="allreduce",
                    device=group[0],
                    resources=tuple(comm_res(d) for d in group),
                    duration_s=bucket.duration_s,
                    nbytes=bucket.nbytes,
                    stage=s,
                    iteration=w,
                    part=k,
                )
                keys.append(key)
            opt_deps[(s, w)] = keys
    return opt_deps


def synchronous(
    strategy: str,
    pipes: Sequence[PipelineWork],
    micro_batches: int,
    *,
    order: Order = "1f1b",
    buckets: StageBuckets = (),
) -> Schedule:
    """One iteration of DP / GPipe / 1F1B / hybrid-BSP. ``buckets[s]``: stage s's buckets."""
    _check(pipes, micro_batches)
    b = ScheduleBuilder()
    opt_deps = _emit_allreduce(b, pipes, buckets, micro_batches, 1)
    for r, p in enumerate(pipes):
        emit_replica(
            b, r, p, m=micro_batches, iterations=1, order=order, opt_lag=None, opt_deps=opt_deps
        )
    return b.build(
        strategy=strategy,
        devices=_devices(pipes),
        samples_per_iteration=sum(p.batch for p in pipes),
    )


def data_parallel(
    replicas: Sequence[PipelineWork], buckets: Sequence[SyncBucket], micro_batches: int = 1
) -> Schedule:
    """Data parallel: one-stage replicas (batches may differ) with bucketed allreduce."""
    return synchronous("dp", replicas, micro_batches, order="1f1b", buckets=[buckets])


def gpipe(pipe: PipelineWork, micro_batches: int) -> Schedule:
    """GPipe: all forwards, then all backwards, then the optimizer step (one iteration)."""
    return synchronous("gpipe", [pipe], micro_batches, order="gpipe")


def one_f_one_b(pipe: PipelineWork, micro_batches: int) -> Schedule:
    """1F1B (PipeDream-Flush): warm-up forwards, one forward one backward, drain, flush."""
    return synchronous("1f1b", [pipe], micro_batches, order="1f1b")


def _steady_window(num_stages: int, m: int, extra: int = 0) -> tuple[int, int, int]:
    """(first measured iteration a, last b, iterations simulated K) past fill and drain.

    The fill takes about ``S`` micro-batches, i.e. ``ceil(S / m)`` iterations (plus the
    staleness bound for WSP), and so does the drain; at least one iteration is measured.
    """
    fill = math.ceil(num_stages / m)
    a = fill + extra
    b = a + fill
    return a, b, b + fill


def pipedream_async(
    pipe: PipelineWork, micro_batches: int, *, iterations: int | None = None
) -> Schedule:
    """Asynchronous PipeDream: 1F1B without flush; each stage steps its weights every
    ``micro_batches`` backwards without waiting (weight stashing keeps versions consistent).

    ``iterations`` None: enough iterations to measure a steady-state window (prediction);
    otherwise exactly that many, unmarked (the executor's window of training steps)."""
    _check([pipe], micro_batches)
    a, last, iters = _steady_window(len(pipe.stages), micro_batches)
    b = ScheduleBuilder()
    n = iters if iterations is None else iterations
    emit_replica(b, 0, pipe, m=micro_batches, iterations=n, order="1f1b", opt_lag=None, opt_deps={})
    if iterations is not None:
        return b.build(
            strategy="pipedream", devices=_devices([pipe]), samples_per_iteration=pipe.batch
        )
    mark = (("O", 0, 0, a - 1), ("O", 0, 0, last - 1), float((last - a) * pipe.batch))
    return b.build(
        strategy="pipedream",
        devices=_devices([pipe]),
        samples_per_iteration=pipe.batch,
        marks=[mark],
        notes=[f"steady state: {iters} iterations simulated, measured {a}..{last}"],
    )


def wsp(
    pipes: Sequence[PipelineWork],
    micro_batches: int,
    staleness: int,
    *,
    buckets: StageBuckets = (),
    iterations: int | None = None,
) -> Schedule:
    """HetPipe's wave-synchronous hybrid with staleness bound ``staleness`` (D).

    ``iterations``: as for :func:`pipedream_async` (None: a measured steady-state window)."""
    _check(pipes, micro_batches)
    a, last, iters = _steady_window(len(pipes[0].stages), micro_batches, extra=staleness)
    if iterations is not None:
        iters = iterations
    b = ScheduleBuilder()
    opt_deps = _emit_allreduce(b, pipes, buckets, micro_batches, iters)
    for r, p in enumerate(pipes):
        emit_replica(
            b,
            r,
            p,
            m=micro_batches,
            iterations=iters,
            order="1f1b",
            opt_lag=staleness + 1,
            opt_deps=opt_deps,
        )
    samples = sum(p.batch for p in pipes)
    if iterations is not None:
        return b.build(strategy="hybrid", devices=_devices(pipes), samples_per_iteration=samples)
    # Wave w is done when stage 0 of replica 0 has its last backward of the wave: replicas are
    # coupled by the allreduce, so all of them advance at the same average rate.
    m = micro_batches
    last_part = len(pipes[0].stages[0].parts) - 1
    mark = (bwd_key(0, 0, a * m - 1, last_part), bwd_key(0, 0, last * m - 1, last_part))
    return b.build(
        strategy="hybrid",
        devices=_devices(pipes),
        samples_per_iteration=samples,
        marks=[(mark[0], mark[1], float((last - a) * samples))],
        notes=[f"WSP D={staleness}: {iters} waves simulated, measured {a}..{last}"],
    )


def parameter_server(
    replicas: Sequence[PipelineWork],
    ps_devices: Sequence[str],
    ps: Sequence[PsWork],
    micro_batches: int = 1,
    *,
    asynchronous: bool = False,
    iterations: int = 4,
    staleness: int = 0,
) -> Schedule:
    """Parameter server with one-stage workers; ``ps[r]``: worker r's push/pull times.

    Synchronous: one push phase (all workers' gradients, concurrently; ``push_s`` is the phase
    time with link sharing included, the max over ``ps`` is used) starts when every worker's
    backward is done and occupies the comm streams of all workers and shards; then each
    worker pulls for its own ``pull_s``. Asynchronous: each worker pushes and pulls alone on
    its own comm stream, iterating ``iterations`` times; contention at the shards must be in
    ``ps`` already (a fixed per-resource order cannot express first-come-first-served). With
    a bound ``staleness = s > 0`` (SSP, :mod:`hetplan.run.execute.ps_async`) worker r's pull of
    iteration ``i`` also waits for every worker's push of iteration ``i - s``: the servers
    answer it only then, so no worker runs more than ``s`` iterations ahead of the slowest.
    """
    _check(replicas, micro_batches)
    if len(ps) != len(replicas):
        raise ValueError(f"ps has {len(ps)} entries, expected one per worker ({len(replicas)})")
    m = micro_batches
    iters = iterations if asynchronous else 1
    b = ScheduleBuilder()
    workers = [p.stages[0].devices[0] for p in replicas]
    for w in range(iters):
        lasts: list[Hashable] = [
            bwd_key(q, 0, w * m + m - 1, len(p.stages[0].parts) - 1) for q, p in enumerate(replicas)
        ]
        if not asynchronous:
            group = list(dict.fromkeys([*workers, *ps_devices]))
            b.add(
                ("ps_push", -1, w),
                lasts,
                kind="ps_push",
                device=workers[0],
                resources=tuple(comm_res(d) for d in group),
                duration_s=max(x.push_s for x in ps),
                nbytes=sum(x.nbytes for x in ps),
            )
        for r, (dev, work) in enumerate(zip(workers, ps, strict=True)):
            common: dict[str, Any] = {
                "device": dev,
                "resources": (comm_res(dev),),
                "nbytes": work.nbytes,
                "stage": 0,
                "pipeline": r,
                "iteration": w,
            }
            if asynchronous:
                b.add(
                    ("ps_push", r, w), [lasts[r]], kind="ps_push", duration_s=work.push_s, **common
                )
            push = ("ps_push", r if asynchronous else -1, w)
            gate = (
                [("ps_push", q, w - staleness) for q in range(len(workers))]
                if asynchronous and staleness > 0 and w >= staleness
                else []
            )
            b.add(
                ("ps_pull", r, w), [push, *gate], kind="ps_pull", duration_s=work.pull_s, **common
            )
    for r, p in enumerate(replicas):
        # The shards apply the update; the worker's optimizer slot is the wait for its pull.
        deps: dict[tuple[int, int], list[Hashable]] = {
            (0, w): [("ps_pull", r, w)] for w in range(iters)
        }
        emit_replica(b, r, p, m=m, iterations=iters, order="1f1b", opt_lag=None, opt_deps=deps)
    marks: list[tuple[Hashable | None, Hashable, float]] = []
    if asynchronous and staleness > 0:
        # Bounded: in the steady state every worker runs at the slowest one's pace, whose
        # own iteration (compute, push, pull, optimizer slot) is the longest.
        def own(r: int) -> float:
            st = replicas[r].stages[0]
            return m * (st.fwd_s + st.bwd_s) + st.opt_s + ps[r].push_s + ps[r].pull_s

        slow = max(range(len(replicas)), key=own)
        total = float((iters - 1) * sum(p.batch for p in replicas))
        marks = [(("O", slow, 0, 0), ("O", slow, 0, iters - 1), total)]
    elif asynchronous:
        marks = [
            (("O", r, 0, 0), ("O", r, 0, iters - 1), float((iters - 1) * p.batch))
            for r, p in enumerate(replicas)
        ]
    return b.build(
        strategy="ps",
        devices=_devices(replicas, ps_devices),
        samples_per_iteration=sum(p.batch for p in replicas),
        marks=marks,
    )
