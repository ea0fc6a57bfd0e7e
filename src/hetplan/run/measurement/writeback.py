"""``hetplan train`` writes what it measured back into the profile store.

A run measures each rank's forward and backward time per step (its stage's compute over the
step's micro-batches; the last stage's forward includes the loss), not per layer. Per
micro-batch and at the device's full speed (measured x the speed share the prediction gave
the device), a stage's measured time ``M`` is spread over its layers in proportion to the
layer costs ``c_i`` the prediction used: layer ``i`` gets ``c_i * M / sum(c)``, forward and
backward separately. A following prediction with the same plan then prices the stage at
what was measured (after several runs: at their median).

Per device type and micro-batch size this becomes one run's batch of that type's written-back
profile (:mod:`hetplan.run.measurement.writeback_profile`): a file of its own, merged with the runs
kept
before it, never a change to a profile measured on purpose; that one still prices the sizes
it covers. Layers the run did not measure on that type take the costs of the profile that
priced them at that size; without one, every layer must be measured on the type. Only runs
that pass :mod:`hetplan.run.measurement.writeback_gate` (enough steps, steady step times,
device-timed
GPU ranks) and single-device stages (tp = 1) of synchronous plans without recomputation are
written back: elsewhere a step's compute does not map onto per-layer costs as the predictor
adds them up.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.planspec import Plan
from hetplan.profile.store import load_profiles
from hetplan.profile.types import Provenance
from hetplan.run.measurement.measure import Measurement, RankFigures
from hetplan.run.measurement.writeback_gate import rank_reason, run_reason, run_spread
from hetplan.run.measurement.writeback_profile import merged_profile, now, run_batches, store
from hetplan.run.measurement.writeback_types import (
    StageSample,
    WriteBack,
    WriteBackContext,
    Written,
)

__all__ = [
    "StageSample",
    "WriteBack",
    "WriteBackContext",
    "Written",
    "run_reason",
    "write_measured",
]

Base = tuple[list[float], list[float], tuple[float, float] | None]


def _base(ctx: WriteBackContext, rank: RankFigures, mb: int, lo: int, hi: int) -> Base:
    """Per-layer forward and backward costs the prediction used at full speed, and the loss
    where it priced the loss apart (a stored profile of the type at that size)."""
    dev = ctx.cluster.device(rank.device)
    own = ctx.priced(dev.type.name, mb)
    names = [x.name for x in ctx.graph.layers[lo : hi + 1]]
    if own is None:
        full = dataclasses.replace(dev, speed=1.0)
        costs = ctx.compute.layer_costs(ctx.graph, full, mb)[lo : hi + 1]
        return [c.fwd_s for c in costs], [c.bwd_s for c in costs], None
    fits = [own.fit(n) for n in names]
    last = hi == len(ctx.graph.layers) - 1
    loss = own.step_fit.loss
    return (
        [f.fwd.at(mb) for f in fits],
        [f.bwd.at(mb) for f in fits],
        (loss.fwd.at(mb), loss.bwd.at(mb)) if last else None,
    )


def sample(ctx: WriteBackContext, rank: RankFigures) -> StageSample | str:
    """The rank's stage spread over its layers, or why it cannot be."""
    plan, m = ctx.plan, ctx.plan.micro_batches
    pipe = plan.pipelines[rank.pipeline]
    if pipe.batch % m:
        return (
            f"pipeline {rank.pipeline}: its {pipe.batch} samples do not split into {m} equal "
            "micro-batches"
        )
    mb = pipe.batch // m
    stage = pipe.stages[rank.stage]
    lo, hi = ctx.graph.index(stage.layers[0]), ctx.graph.index(stage.layers[-1])
    fwd, bwd, loss = _base(ctx, rank, mb, lo, hi)
    pf = sum(fwd) + (loss[0] if loss else 0.0)
    pb = sum(bwd) + (loss[1] if loss else 0.0)
    if pf <= 0 or pb <= 0:
        return f"rank {rank.rank}: the prediction priced its stage at zero time"
    speed = ctx.speeds.get(rank.device, ctx.cluster.device(rank.device).speed)
    rf, rb = rank.forward_s / m * speed / pf, rank.backward_s / m * speed / pb
    names = [x.name for x in ctx.graph.layers[lo : hi + 1]]
    return StageSample(
        device_type=ctx.cluster.device(rank.device).type.name,
        micro_batch=mb,
        fwd={n: f * rf for n, f in zip(names, fwd, strict=True)},
        bwd={n: b * rb for n, b in zip(names, bwd, strict=True)},
        loss=(loss[0] * rf, loss[1] * rb) if loss else None,
    )


def _shared_devices(ctx: WriteBackContext, kind: str) -> list[str]:
    from hetplan.predict.sharing import core_groups  # noqa: PLC0415

    ids = {d for members, _ in core_groups(ctx.cluster, ctx.plan.devices) for d in members}
    return sorted(d for d in ids if ctx.cluster.device(d).type.name == kind)


def _samples(ctx: WriteBackContext, m: Measurement, out: WriteBack) -> dict[str, list[StageSample]]:
    """The trusted ranks' samples by device type; reasons for the others go to ``out``."""
    by_type: dict[str, list[StageSample]] = {}
    for r in m.ranks:
        if r.stage < 0 or r.forward_s + r.backward_s <= 0:
            continue  # a parameter-server rank, or nothing measured
        got = rank_reason(r, ctx.cluster) or sample(ctx, r)
        if isinstance(got, str):
            out.skipped.append(got)
            continue
        by_type.setdefault(got.device_type, []).append(got)
    return by_type


def write_back(ctx: WriteBackContext, m: Measurement, directory: Path | None) -> WriteBack:
    """Merge every device type's measured micro-batch sizes into its written-back profile."""
    out = WriteBack()
    why = run_reason(m)
    if why is not None:
        out.skipped.append(why)
        return out
    spread = run_spread(m)
    prov = Provenance(when=now(), steps=m.steps, spread=spread)
    for kind, samples in sorted(_samples(ctx, m, out).items()):
        new = run_batches(ctx, kind, samples, prov)
        if isinstance(new, str):
            out.skipped.append(new)
            continue
        p = merged_profile(ctx, m, kind, new, _shared_devices(ctx, kind))
        sizes = tuple(b.batch for b in new)
        runs = tuple(sum(1 for h in p.history if h.batch == b) for b in sizes)
        shadowed = tuple(b for b in sizes if ctx.shadowed(kind, b))
        path = store(p, ctx.written_back(kind), directory)
        w = Written(device_type=kind, path=path, sizes=sizes, runs=runs, steps=m.steps,
                    spread=spread, shadowed=shadowed)  # fmt: skip
        out.written.append(w)
    return out


def context(
    plan: Plan,
    cluster: Cluster,
    timeline: object | None,
    directory: Path | None,
) -> WriteBackContext:
    """The graph, compute model and stored profiles the prediction of ``plan`` used, and the
    effective speeds of devices sharing cores (from its ``timeline``, a simulated one)."""
    from hetplan.graph import build_graph  # noqa: PLC0415 (torch)
    from hetplan.predict.sharing import core_groups, shared_speeds, tp_ranks  # noqa: PLC0415
    from hetplan.profile.select import compute_model  # noqa: PLC0415
    from hetplan.simulate import Timeline  # noqa: PLC0415

    graph = build_graph(plan.model)
    groups = core_groups(cluster, plan.devices)
    speeds = (
        shared_speeds(timeline, groups, tp_ranks(plan))
        if isinstance(timeline, Timeline) and groups
        else {}
    )
    return WriteBackContext(
        plan=plan,
        cluster=cluster,
        graph=graph,
        compute=compute_model(graph.dtype, directory=directory),
        profiles=tuple(load_profiles(directory)),
        speeds=speeds,
    )


def write_measured(
    m: Measurement, cluster: Cluster, timeline: object | None, directory: Path | None
) -> WriteBack:
    """:func:`write_back` of a finished run (the model is traced only when there is
    something to write)."""
    why = run_reason(m)
    if why is not None:
        return WriteBack(skipped=[why])
    return write_back(context(m.plan, cluster, timeline, directory), m, directory)
