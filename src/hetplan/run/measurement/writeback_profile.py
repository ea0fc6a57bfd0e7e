"""The written-back profile of one device type: this run's batches merged with the kept runs.

Each run becomes one batch per micro-batch size it measured, with its provenance (when, timed
steps, spread); the profile keeps up to :data:`hetplan.profile.merge.KEPT_RUNS` runs per size
in ``history`` and prices each size at their steps-weighted median. The file is separate
from any profile measured on purpose (its key ends ``__written-back``), which it never edits.
A CPU type's profile records the threads its ranks ran with (``WriteBackContext.threads``);
a run at another thread count starts it afresh, since figures at two counts are not one
measurement.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from hetplan.cost.threads import known_threads
from hetplan.profile.fit import Stats, summarize
from hetplan.profile.importer import ZERO, exact, fit_batches, one_size_note
from hetplan.profile.merge import kept_runs, merged_batches, profile_runs
from hetplan.profile.provenance import WRITTEN_BACK
from hetplan.profile.store import load_profile, profile_path, save_profile
from hetplan.profile.types import BatchTiming, LayerTiming, Profile, Provenance
from hetplan.run.measurement.measure import Measurement
from hetplan.run.measurement.writeback_types import StageSample, WriteBackContext

SPREAD_NOTE = (
    "written back by hetplan train: measured stage times spread over the layers in proportion "
    "to the predicted layer costs"
)
OPTIMIZER_NOTE = "no optimizer step timed: predict prices it analytically"


def _stats(values: Sequence[float], fallback: float | None) -> Stats | None:
    """Median and spread over the ranks that measured it; the fallback as one figure."""
    if values:
        return summarize(values)
    return None if fallback is None else exact(fallback)


def batch_timing(
    mb: int,
    samples: Sequence[StageSample],
    names: Sequence[str],
    own: Profile | None,
    provenance: Provenance,
) -> BatchTiming | None:
    """All layers at ``mb``: measured ones from the samples, others from ``own``'s fits;
    None when a layer is in neither."""
    layers = []
    for n in names:
        fit = own.fit(n) if own is not None else None
        fwd = _stats([s.fwd[n] for s in samples if n in s.fwd], fit.fwd.at(mb) if fit else None)
        bwd = _stats([s.bwd[n] for s in samples if n in s.bwd], fit.bwd.at(mb) if fit else None)
        if fwd is None or bwd is None:
            return None
        layers.append(LayerTiming(name=n, fwd=fwd, bwd=bwd))
    step = own.step_fit if own is not None else None
    losses = [s.loss for s in samples if s.loss is not None]
    loss_f = _stats([x[0] for x in losses], step.loss.fwd.at(mb) if step else 0.0) or ZERO
    loss_b = _stats([x[1] for x in losses], step.loss.bwd.at(mb) if step else 0.0) or ZERO
    other = exact(step.other.at(mb)) if step else ZERO
    total = sum(t.fwd.median_s + t.bwd.median_s for t in layers) + other.median_s
    return BatchTiming(
        batch=mb, layers=tuple(layers), step=exact(total), other=other, loss_fwd=loss_f,
        loss_bwd=loss_b, optimizer=ZERO, provenance=provenance,
    )  # fmt: skip


def run_batches(
    ctx: WriteBackContext, kind: str, samples: Sequence[StageSample], provenance: Provenance
) -> list[BatchTiming] | str:
    """This run's batch of ``kind`` at each size it measured, or why there is none."""
    names = [x.name for x in ctx.graph.layers]
    out = []
    for mb in sorted({s.micro_batch for s in samples}):
        at = [s for s in samples if s.micro_batch == mb]
        got = batch_timing(mb, at, names, ctx.priced(kind, mb), provenance)
        if got is None:
            covered = len({n for s in at for n in s.fwd})
            return (
                f"stages on {kind} at micro-batch {mb} cover {covered} of {ctx.graph.name}'s "
                f"{len(names)} layers and the store has no profile of {kind} at that size to "
                "complete them"
            )
        out.append(got)
    return out


def merged_profile(
    ctx: WriteBackContext,
    m: Measurement,
    kind: str,
    new: Sequence[BatchTiming],
    shared: Sequence[str],
) -> Profile:
    """The written-back profile of ``kind``: the kept runs and ``new``, merged per size."""
    import torch  # noqa: PLC0415 (loaded by the run already; only its version is read)

    when = max((b.provenance.when for b in new if b.provenance is not None), default=now())
    threads = ctx.threads(kind)
    old = ctx.written_back(kind)
    if old is not None and known_threads(old.threads) != known_threads(threads):
        old = None  # kept runs at another thread count do not merge with this one
    runs = kept_runs(profile_runs(old), new)
    batches = merged_batches(runs)
    fits, step_fit = fit_batches(batches)
    notes = [SPREAD_NOTE, *one_size_note(batches), OPTIMIZER_NOTE]
    if shared:
        notes.append(
            f"measured on CPU ranks sharing cores ({', '.join(shared)}): times scaled by the "
            "speed share the prediction gave them"
        )
    return Profile(
        device_type=kind, device_name=f"hetplan train on {m.cluster or ctx.cluster.name}",
        device="train", model=ctx.graph.name, dataset=ctx.plan.model.dataset,
        input_shape=tuple(ctx.graph.input_shape), dtype=ctx.graph.dtype, threads=threads, cpus=None,
        warmup=m.warmup, steps=m.steps, optimizer="none",
        batch_sizes=tuple(b.batch for b in batches), batches=batches, fits=fits,
        step_fit=step_fit, timestamp=when,
        torch_version=str(torch.__version__), notes=tuple(notes), source=WRITTEN_BACK,
        history=tuple(runs),
    )  # fmt: skip


def now() -> str:
    """UTC time of a write-back, ISO 8601 to the second (as profiles' timestamps)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def store(p: Profile, old: Profile | None, directory: Path | None) -> Path:
    """Save ``p``; the file of the profile it merged goes (its batch set, hence its name,
    may have changed), unless it changed on disk meanwhile."""
    path = save_profile(p, directory)
    if old is not None:
        stale = profile_path(old, directory)
        if stale != path and stale.is_file() and load_profile(stale) == old:
            stale.unlink()
    return path
