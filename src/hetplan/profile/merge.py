"""Merging written-back runs: per micro-batch size, a median over the kept runs weighted by
their timed steps, figure by figure.

A store where the newest run wins moves by the whole gap between two runs' noise (issue 24:
one U-Net plan predicted at 54, 137, 248 and 73 ms after four runs). The weighted median
moves by at most half the gap after a second run of equal length, and a minority of outlier
runs cannot move it at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hetplan.profile.fit import Stats
from hetplan.profile.importer import fit_batches
from hetplan.profile.provenance import provenance_of
from hetplan.profile.types import BatchTiming, LayerTiming, Profile, Provenance

KEPT_RUNS = 8
"""Runs kept per micro-batch size, oldest dropped first: the median then outvotes up to three
outlier runs, and a real change of the machine takes over once its runs hold more than half
of the kept steps (after four or five runs of equal length)."""


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The value where the cumulative weight (values sorted) first exceeds half the total; the
    mean of two neighbours where it lands exactly on half (the usual median for equal
    weights)."""
    if not values or len(values) != len(weights) or min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"need matching values and non-negative weights (got {weights!r})")
    pairs = sorted(zip(values, weights, strict=True))
    half = sum(weights) / 2
    acc = 0.0
    for i, (value, weight) in enumerate(pairs):
        acc += weight
        if acc > half:
            return value
        if acc == half:  # exact: weights are step counts
            return (value + pairs[i + 1][0]) / 2
    return pairs[-1][0]  # not reached: acc ends at the total, above half


def _stats(items: Sequence[Stats], weights: Sequence[float]) -> Stats:
    return Stats(
        median_s=weighted_median([s.median_s for s in items], weights),
        p10_s=weighted_median([s.p10_s for s in items], weights),
        p90_s=weighted_median([s.p90_s for s in items], weights),
    )


def _weight(run: BatchTiming) -> float:
    """A run's say: its timed steps (1 where unknown)."""
    steps = run.provenance.steps if run.provenance is not None else 0
    return float(max(steps, 1))


def _provenance(runs: Sequence[BatchTiming]) -> Provenance:
    known = [r.provenance for r in runs if r.provenance is not None]
    spreads = [p.spread for p in known if p.spread is not None]
    return Provenance(
        when=max((p.when for p in known), default=""),  # one ISO format: text order is time
        steps=sum(p.steps for p in known),
        spread=max(spreads) if spreads else None,
        runs=sum(p.runs for p in known) or len(runs),
    )


def merge_runs(runs: Sequence[BatchTiming]) -> BatchTiming:
    """One batch from runs of the same size and layers (module doc)."""
    if not runs or len({(r.batch, _names(r)) for r in runs}) != 1:
        raise ValueError("merge_runs needs runs of one batch size over the same layers")
    w = [_weight(r) for r in runs]
    layers = tuple(
        LayerTiming(
            name=first.name,
            fwd=_stats([r.layers[i].fwd for r in runs], w),
            bwd=_stats([r.layers[i].bwd for r in runs], w),
            fwd_peak_bytes=runs[-1].layers[i].fwd_peak_bytes,
            bwd_peak_bytes=runs[-1].layers[i].bwd_peak_bytes,
        )
        for i, first in enumerate(runs[0].layers)
    )
    return BatchTiming(
        batch=runs[0].batch,
        layers=layers,
        step=_stats([r.step for r in runs], w),
        other=_stats([r.other for r in runs], w),
        loss_fwd=_stats([r.loss_fwd for r in runs], w),
        loss_bwd=_stats([r.loss_bwd for r in runs], w),
        optimizer=_stats([r.optimizer for r in runs], w),
        provenance=_provenance(runs),
    )


def _names(b: BatchTiming) -> tuple[str, ...]:
    return tuple(t.name for t in b.layers)


def kept_runs(history: Sequence[BatchTiming], new: Sequence[BatchTiming]) -> list[BatchTiming]:
    """``history`` then ``new`` (all over the same layers), without older runs over other
    layers (the model changed) and at most :data:`KEPT_RUNS` per size (the newest)."""
    names = _names(new[0]) if new else None
    runs = [b for b in history if names is None or _names(b) == names] + list(new)
    out: list[BatchTiming] = []
    for size in sorted({b.batch for b in runs}):
        out += [b for b in runs if b.batch == size][-KEPT_RUNS:]
    return out


def merged_batches(runs: Sequence[BatchTiming]) -> tuple[BatchTiming, ...]:
    """One merged batch per size of ``runs``, by size."""
    sizes = sorted({b.batch for b in runs})
    return tuple(merge_runs([b for b in runs if b.batch == s]) for s in sizes)


def profile_runs(profile: Profile | None) -> list[BatchTiming]:
    """The kept runs of ``profile``, each with its provenance; a file written before runs
    were kept counts as one run."""
    if profile is None:
        return []
    runs = profile.history or profile.batches
    return [dataclasses.replace(b, provenance=provenance_of(profile, b)) for b in runs]


def merge_profiles(old: Profile, new: Profile) -> Profile:
    """``new``, a profile of the same model and device just taken, merged with ``old``'s kept
    runs: each size at the steps-weighted median of the runs, fitted again, the runs kept in
    ``history``. The suite profiles a model once per cluster it measures, so that one
    snapshot of a drifting machine does not price all of the model's cases
    (:mod:`hetplan.bench.runner`)."""
    runs = kept_runs(profile_runs(old), profile_runs(new))
    batches = merged_batches(runs)
    fits, step_fit = fit_batches(batches)
    return dataclasses.replace(
        new, batches=batches, fits=fits, step_fit=step_fit, history=tuple(runs)
    )
