"""Profiles of one model taken at several moments, merged (:func:`merge_profiles`): what the
suite does so that one snapshot of a drifting machine does not price every case."""

from __future__ import annotations

import pytest

from hetplan.profile.merge import merge_profiles
from hetplan.profile.types import Profile

BASE = {"l0": (1e-3, 1e-4, 2e-3, 2e-4), "l1": (3e-3, 0.0, 1e-3, 1e-3)}


def scaled(make_profile, factor: float, when: str) -> Profile:
    """The same model profiled on a machine ``factor`` times slower."""
    fits = {n: tuple(factor * x for x in f) for n, f in BASE.items()}
    return make_profile(fits=fits, timestamp=when)


def test_three_snapshots_merge_to_their_median_and_refit(make_profile) -> None:
    first = scaled(make_profile, 1.0, "2026-01-01T00:00:00+00:00")
    slow = scaled(make_profile, 2.0, "2026-01-01T00:10:00+00:00")  # a disturbed moment
    third = scaled(make_profile, 1.2, "2026-01-01T00:20:00+00:00")
    merged = merge_profiles(merge_profiles(first, slow), third)
    # equal steps: each size at the median of 1x, 2x and 1.2x, i.e. 1.2x the base figures
    for b, base in zip(merged.batches, first.batches, strict=True):
        for got, want in zip(b.layers, base.layers, strict=True):
            assert got.fwd.median_s == pytest.approx(1.2 * want.fwd.median_s)
            assert got.bwd.median_s == pytest.approx(1.2 * want.bwd.median_s)
    # the fits are taken again from the merged sizes (linear in the batch: exactly 1.2x)
    for got, (fa, fk, ba, bk) in zip(merged.fits, BASE.values(), strict=True):
        assert got.fwd.a_s == pytest.approx(1.2 * fa) and got.fwd.k_s == pytest.approx(1.2 * fk)
        assert got.bwd.a_s == pytest.approx(1.2 * ba) and got.bwd.k_s == pytest.approx(1.2 * bk)
    # every run is kept, three per size, oldest first
    assert len(merged.history) == 3 * len(first.batches)
    at1 = [r for r in merged.history if r.batch == 1]
    assert [r.provenance.when for r in at1 if r.provenance] == [
        "2026-01-01T00:00:00+00:00", "2026-01-01T00:10:00+00:00", "2026-01-01T00:20:00+00:00"
    ]  # fmt: skip
    assert merged.batches[0].provenance is not None and merged.batches[0].provenance.runs == 3


def test_two_snapshots_meet_halfway(make_profile) -> None:
    merged = merge_profiles(scaled(make_profile, 1.0, "t1"), scaled(make_profile, 2.0, "t2"))
    want = scaled(make_profile, 1.5, "t3")
    assert merged.batches[-1].layers[0].fwd.median_s == pytest.approx(
        want.batches[-1].layers[0].fwd.median_s
    )
