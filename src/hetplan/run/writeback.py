"""``hetplan train`` writes what it measured back into the profile store.

A run measures each rank's forward and backward time per step (its stage's compute over the
step's micro-batches; the last stage's forward includes the loss), not per layer. Per
micro-batch and at the device's full speed (measured x the speed share the prediction gave
the device), a stage's measured time ``M`` is spread over its layers in proportion to the
layer costs ``c_i`` the prediction used: layer ``i`` gets ``c_i * M / sum(c)``, forward and
backward separately. A following prediction with the same plan then prices the stage at
exactly what was measured.

Per device type and micro-batch size this becomes one batch of that type's profile: merged
into the stored profile the prediction used (the batch replaces one of the same size, the
fits are refitted, layers the run did not measure keep their stored fit) or, without one, a
new profile, which needs every layer of the model measured on that type. Only single-device
stages (tp = 1) of synchronous plans without recomputation are written back: elsewhere a
step's compute does not map onto per-layer costs as the predictor adds them up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.cost.types import ComputeModel
from hetplan.graph.types import ModelGraph
from hetplan.plan.staleness import is_asynchronous
from hetplan.planspec import Plan
from hetplan.profile.fit import Stats, summarize
from hetplan.profile.importer import ONE_SIZE, ZERO, exact, fit_batches, one_size_note
from hetplan.profile.measured import best_profiles
from hetplan.profile.store import load_profile, load_profiles, profile_path, save_profile
from hetplan.profile.types import BatchTiming, LayerTiming, Profile
from hetplan.run.measure import Measurement, RankFigures


@dataclass(frozen=True, kw_only=True)
class StageSample:
    """One rank's measured stage, per micro-batch at full speed, spread over its layers."""

    device_type: str
    micro_batch: int
    fwd: dict[str, float]
    bwd: dict[str, float]
    loss: tuple[float, float] | None
    """Forward and backward of the loss where the stage computed it and the prediction priced
    it apart from the last layer (a stored profile's loss fit); else None."""


@dataclass(kw_only=True)
class WriteBack:
    """What was written (device type, file) and why anything was not."""

    written: list[tuple[str, Path]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Context:
    """What every rank's conversion needs: the graph, the store's profiles and speeds."""

    plan: Plan
    cluster: Cluster
    graph: ModelGraph
    compute: ComputeModel
    stored: Mapping[str, Profile]
    """The stored single-device profile of each device type that priced the prediction."""
    speeds: Mapping[str, float]
    """Effective speed share of devices that share cores (as the prediction estimated)."""


def run_reason(m: Measurement) -> str | None:
    """Why nothing of this run can be written back; None when something can."""
    plan = m.plan
    if m.steps < 1:
        return "the run timed no step"
    if not any(r.stage >= 0 and r.forward_s + r.backward_s > 0 for r in m.ranks):
        return "the run measured no compute time"
    if plan.tp > 1:
        return f"tp {plan.tp}: a tensor-parallel stage's time is not one device's layer costs"
    if is_asynchronous(plan):
        return "asynchronous plan: its steps do not run every micro-batch once"
    if plan.recompute:
        return "recomputation: the measured backward includes forward passes again"
    return None


Base = tuple[list[float], list[float], tuple[float, float] | None]


def _base(ctx: Context, rank: RankFigures, mb: int, lo: int, hi: int) -> Base:
    """Per-layer forward and backward costs the prediction used at full speed, and the loss
    where it priced the loss apart (a stored profile of the type)."""
    dev = ctx.cluster.device(rank.device)
    own = ctx.stored.get(dev.type.name)
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


def sample(ctx: Context, rank: RankFigures) -> StageSample | str:
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


def _stats(values: Sequence[float], fallback: float | None) -> Stats | None:
    """Median and spread over the ranks that measured it; the fallback as one figure."""
    if values:
        return summarize(values)
    return None if fallback is None else exact(fallback)


def batch_timing(
    mb: int, samples: Sequence[StageSample], names: Sequence[str], own: Profile | None
) -> BatchTiming | None:
    """All layers at ``mb``: measured ones from the samples, others from ``own``'s fits;
    None when a layer is in neither."""
    layers = []
    for n in names:
        fit = own.fit(n) if own is not None else None
        kept_f = fit.fwd.at(mb) if fit is not None else None
        kept_b = fit.bwd.at(mb) if fit is not None else None
        fwd = _stats([s.fwd[n] for s in samples if n in s.fwd], kept_f)
        bwd = _stats([s.bwd[n] for s in samples if n in s.bwd], kept_b)
        if fwd is None or bwd is None:
            return None
        layers.append(LayerTiming(name=n, fwd=fwd, bwd=bwd))
    step = own.step_fit if own is not None else None
    losses = [s.loss for s in samples if s.loss is not None]
    loss_f = _stats([x[0] for x in losses], step.loss.fwd.at(mb) if step else 0.0) or ZERO
    loss_b = _stats([x[1] for x in losses], step.loss.bwd.at(mb) if step else 0.0) or ZERO
    opt = exact(step.optimizer.at(mb)) if step else ZERO
    other = exact(step.other.at(mb)) if step else ZERO
    total = sum(t.fwd.median_s + t.bwd.median_s for t in layers) + other.median_s
    return BatchTiming(
        batch=mb, layers=tuple(layers), step=exact(total), other=other, loss_fwd=loss_f,
        loss_bwd=loss_b, optimizer=opt,
    )  # fmt: skip


SPREAD_NOTE = (
    "written back by hetplan train: measured stage times spread over the layers in proportion "
    "to the predicted layer costs"
)


def _size_note(mb: int) -> str:
    return f"micro-batch {mb}: written back by hetplan train"


def _notes(m: Measurement, sizes: Sequence[int], shared: Sequence[str]) -> list[str]:
    day = datetime.now(UTC).date().isoformat()
    notes = [SPREAD_NOTE, *(f"{_size_note(b)} ({day}, {m.steps} timed steps)" for b in sizes)]
    if shared:
        notes.append(
            f"measured on CPU ranks sharing cores ({', '.join(shared)}): times scaled by the "
            "speed share the prediction gave them"
        )
    return notes


def _merged_notes(old: Sequence[str], new: Sequence[str], sizes: Sequence[int]) -> tuple[str, ...]:
    """``old`` without what the merge outdates (the one-size note, earlier write-backs of the
    same sizes), then the new notes it lacks."""
    stale = (ONE_SIZE, *(_size_note(b) for b in sizes))
    kept = [n for n in old if not n.startswith(stale)]
    return (*kept, *(n for n in new if n not in kept))


def _new_profile(
    ctx: Context, m: Measurement, kind: str, batches: tuple[BatchTiming, ...]
) -> Profile:
    import torch  # noqa: PLC0415 (loaded by the run already; only its version is read)

    fits, step_fit = fit_batches(batches)
    return Profile(
        device_type=kind,
        device_name=f"hetplan train on {m.cluster or ctx.cluster.name}",
        device="train",
        model=ctx.graph.name,
        dataset=ctx.plan.model.dataset,
        input_shape=tuple(ctx.graph.input_shape),
        dtype=ctx.graph.dtype,
        threads=0,
        cpus=None,
        warmup=m.warmup,
        steps=m.steps,
        optimizer="none",  # the optimizer step is not written back: predict prices it
        batch_sizes=tuple(b.batch for b in batches),
        batches=batches,
        fits=fits,
        step_fit=step_fit,
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        torch_version=str(torch.__version__),
        notes=(*one_size_note(batches), "no optimizer step timed: predict prices it analytically"),
    )


def type_profile(
    ctx: Context, m: Measurement, kind: str, samples: Sequence[StageSample]
) -> Profile | str:
    """The profile of ``kind`` with the run's micro-batch sizes, or why there is none."""
    own = ctx.stored.get(kind)
    names = own.layer_names if own is not None else tuple(x.name for x in ctx.graph.layers)
    sizes = sorted({s.micro_batch for s in samples})
    new = []
    for mb in sizes:
        got = batch_timing(mb, [s for s in samples if s.micro_batch == mb], names, own)
        if got is None:
            covered = len({n for s in samples if s.micro_batch == mb for n in s.fwd})
            return (
                f"stages on {kind} at micro-batch {mb} cover {covered} of {ctx.graph.name}'s "
                f"{len(names)} layers and the store has no profile of {kind} to complete them"
            )
        new.append(got)
    shared = _shared_devices(ctx, kind)
    if own is None:
        p = _new_profile(ctx, m, kind, tuple(new))
        return dataclasses.replace(p, notes=(*p.notes, *_notes(m, sizes, shared)))
    kept = [b for b in own.batches if b.batch not in sizes]
    batches = tuple(sorted([*kept, *new], key=lambda b: b.batch))
    fits, step_fit = fit_batches(batches)
    notes = _merged_notes(own.notes, [*one_size_note(batches), *_notes(m, sizes, shared)], sizes)
    return dataclasses.replace(
        own, batch_sizes=tuple(b.batch for b in batches), batches=batches, fits=fits,
        step_fit=step_fit, timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        notes=notes,
    )  # fmt: skip


def _shared_devices(ctx: Context, kind: str) -> list[str]:
    from hetplan.predict.sharing import core_groups  # noqa: PLC0415

    ids = {d for members, _ in core_groups(ctx.cluster, ctx.plan.devices) for d in members}
    return sorted(d for d in ids if ctx.cluster.device(d).type.name == kind)


def _store(p: Profile, old: Profile | None, directory: Path | None) -> Path:
    """Save ``p``; a merged profile's old file goes (its batch set, hence its name, changed)."""
    path = save_profile(p, directory)
    if old is not None:
        stale = profile_path(old, directory)
        if stale != path and stale.is_file() and load_profile(stale) == old:
            stale.unlink()
    return path


def write_back(ctx: Context, m: Measurement, directory: Path | None) -> WriteBack:
    """Write every device type's measured micro-batch sizes into the store (module doc)."""
    out = WriteBack()
    why = run_reason(m)
    if why is not None:
        out.skipped.append(why)
        return out
    by_type: dict[str, list[StageSample]] = {}
    for r in m.ranks:
        if r.stage < 0 or r.forward_s + r.backward_s <= 0:
            continue  # a parameter-server rank, or nothing measured
        got = sample(ctx, r)
        if isinstance(got, str):
            out.skipped.append(got)
            continue
        by_type.setdefault(got.device_type, []).append(got)
    for kind, samples in sorted(by_type.items()):
        p = type_profile(ctx, m, kind, samples)
        if isinstance(p, str):
            out.skipped.append(p)
            continue
        out.written.append((kind, _store(p, ctx.stored.get(kind), directory)))
    return out


def context(
    plan: Plan,
    cluster: Cluster,
    timeline: object | None,
    directory: Path | None,
) -> Context:
    """The graph, compute model and stored profiles the prediction of ``plan`` used, and the
    effective speeds of devices sharing cores (from its ``timeline``, a simulated one)."""
    from hetplan.graph import build_graph  # noqa: PLC0415 (torch)
    from hetplan.predict.sharing import core_groups, shared_speeds  # noqa: PLC0415
    from hetplan.profile.select import compute_model  # noqa: PLC0415
    from hetplan.simulate import Timeline  # noqa: PLC0415

    graph = build_graph(plan.model)
    groups = core_groups(cluster, plan.devices)
    speeds = shared_speeds(timeline, groups) if isinstance(timeline, Timeline) and groups else {}
    return Context(
        plan=plan,
        cluster=cluster,
        graph=graph,
        compute=compute_model(graph.dtype, directory=directory),
        stored=best_profiles(load_profiles(directory), graph),
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
