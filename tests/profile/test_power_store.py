"""Measured power points of a device type, their fit, and its use by the cost model
(hand-computed figures); no torch is needed for any of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import DeviceType
from hetplan.errors import InputError
from hetplan.profile.power_fit import (
    PowerFit,
    apply_power_fit,
    fit_utilization_power,
    load_power_fit,
    power_fit_path,
    save_power_fit,
)
from hetplan.profile.power_store import load_points, record_power_points, with_power_fits

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu-hetero.yaml"


def test_a_line_through_two_loads_gives_idle_and_max() -> None:
    # (0.25, 100) and (0.75, 200): slope 200 W per unit of busy fraction, intercept 50 W
    fit = fit_utilization_power([(0.25, 100.0), (0.75, 200.0)])
    assert (fit.idle_w, fit.max_w, fit.samples) == pytest.approx((50.0, 250.0, 2))
    assert fit.rms_error_w == pytest.approx(0.0, abs=1e-9)


def test_one_load_cannot_fix_the_slope() -> None:
    with pytest.raises(InputError, match="at least two different loads"):
        fit_utilization_power([(0.5, 100.0), (0.5, 110.0)])


def test_a_fit_round_trips_beside_the_profiles(tmp_path: Path) -> None:
    fit = PowerFit(idle_w=61.5, max_w=298.25, samples=12, rms_error_w=3.5)
    path = save_power_fit("A100-40GB", fit, tmp_path)
    assert path == power_fit_path("A100-40GB", tmp_path) == tmp_path / "power__A100-40GB.json"
    assert load_power_fit("A100-40GB", tmp_path) == fit
    assert load_power_fit("V100-32GB", tmp_path) is None


def test_a_fit_replaces_idle_and_max_and_says_so() -> None:
    dt = DeviceType(
        name="T4", peak_flops={"fp32": 8.1e12}, memory_bandwidth=320e9, memory_bytes=16e9,
        idle_power_w=50.0, max_power_w=250.0, source="spec sheet",
    )  # fmt: skip
    new = apply_power_fit(dt, PowerFit(idle_w=32.0, max_w=71.0, samples=5, rms_error_w=1.25))
    assert (new.idle_power_w, new.max_power_w) == (32.0, 71.0)
    assert new.source == "spec sheet; idle/max power fitted from 5 samples (rms error 1.2 W)"
    with pytest.raises(InputError, match="need 0 <= idle <= max"):
        apply_power_fit(dt, PowerFit(idle_w=90.0, max_w=80.0, samples=3, rms_error_w=1))


def test_points_accumulate_and_refit(tmp_path: Path) -> None:
    first = record_power_points("cpu", [(0.5, 60.0)], tmp_path)
    assert first.fit is None and first.refused is None  # one load: no slope
    fit = record_power_points("cpu", [(1.0, 100.0)], tmp_path).fit
    assert fit is not None  # line through (0.5, 60) and (1, 100): slope 80, intercept 20
    assert fit.idle_w == pytest.approx(20.0)
    assert fit.max_w == pytest.approx(100.0)
    assert load_points("cpu", tmp_path) == [(0.5, 60.0), (1.0, 100.0)]


def test_fits_replace_the_catalog_figures_of_their_type_only(tmp_path: Path) -> None:
    cluster = load_cluster(CLUSTER)
    same, used = with_power_fits(cluster, tmp_path)
    assert used == [] and same is cluster
    kind = cluster.devices[0].type.name
    record_power_points(kind, [(0.0, 7.0), (1.0, 31.0)], tmp_path)
    fitted, used = with_power_fits(cluster, tmp_path)
    assert used == [kind]
    for before, after in zip(cluster.devices, fitted.devices, strict=True):
        if before.type.name == kind:
            assert (after.type.idle_power_w, after.type.max_power_w) == pytest.approx((7, 31))
        else:
            assert after.type == before.type


def test_a_fit_above_the_limit_or_the_rest_power_is_refused(tmp_path: Path) -> None:
    """After profile-power's rest 72.5 W and load 690 W on a 700 W part, run points that put
    idle at 357 W and max at 550 W (what three bad H100 runs did) are refused, and so are
    points whose line ends above the limit; the first fit stands."""
    kind = "H100-SXM"
    first = record_power_points(kind, [(0.0, 72.5), (1.0, 690.0)], tmp_path, limit_w=700.0)
    assert first.refused is None and first.fit is not None
    # (0.9, 1500): the least-squares line through the three points ends far above 700 W
    over = record_power_points(kind, [(0.9, 1500.0)], tmp_path, limit_w=700.0)
    assert over.refused is not None and "above the power limit 700 W" in over.refused
    assert over.fit == first.fit and load_points(kind, tmp_path) == [(0.0, 72.5), (1.0, 690.0)]
    # five points on idle 357 W, max 550 W pull the fit's idle far above 72.5 W at rest
    bad = [(u, 357.0 + 193.0 * u) for u in (0.5, 0.6, 0.7, 0.8, 0.9)] * 4
    high = record_power_points(kind, bad, tmp_path, limit_w=700.0)
    assert high.refused is not None and "above the measured rest power 72 W" in high.refused
    assert high.fit == first.fit


def test_a_run_s_refusal_says_how_to_measure_afresh(tmp_path: Path) -> None:
    record_power_points("H100-SXM", [(0.0, 72.5), (1.0, 690.0)], tmp_path, limit_w=700.0)
    rec = record_power_points("H100-SXM", [(0.9, 1500.0)], tmp_path, limit_w=700.0)
    assert rec.refused is not None and "`hetplan profile-power` measures" in rec.refused


def test_profile_power_s_points_replace_earlier_points_that_contradict_them(
    tmp_path: Path,
) -> None:
    """Points stored before runs were checked (idle 357 W / max 550 W, no rest reading) would
    refuse every later point; profile-power's direct rest and load readings replace them."""
    kind = "H100-SXM"
    bad = [(u, 357.0 + 193.0 * u) for u in (0.5, 0.6, 0.7, 0.8, 0.9)]
    stale = record_power_points(kind, bad, tmp_path, limit_w=700.0)
    assert stale.fit is not None and stale.fit.idle_w == pytest.approx(357.0)
    rec = record_power_points(kind, [(0.0, 72.5), (1.0, 704.0)], tmp_path, limit_w=700.0,
                              direct=True)  # fmt: skip
    assert rec.refused is None and rec.note is not None
    assert rec.note.startswith("dropped the 5 earlier points, with which the fit's idle")
    assert rec.fit is not None and (rec.fit.idle_w, rec.fit.max_w) == pytest.approx((72.5, 704))
    assert load_points(kind, tmp_path) == [(0.0, 72.5), (1.0, 704.0)]


def test_direct_points_that_are_themselves_implausible_are_refused(tmp_path: Path) -> None:
    record_power_points("H100-SXM", [(0.0, 72.5), (1.0, 690.0)], tmp_path, limit_w=700.0)
    # a load reading of 900 W on a 700 W part: the counter, not the old points, is wrong
    rec = record_power_points("H100-SXM", [(0.0, 72.0), (1.0, 900.0)], tmp_path, limit_w=700.0,
                              direct=True)  # fmt: skip
    assert rec.refused is not None and rec.note is None
    assert load_points("H100-SXM", tmp_path) == [(0.0, 72.5), (1.0, 690.0)]
