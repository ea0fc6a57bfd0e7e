"""Measured power points of each device type, their fit, and its use by a cluster.

The utilisation model ``P = idle + (max - idle) * u`` (:mod:`hetplan.cost.power`) needs each
device type's idle and maximum power. Where an energy counter exists, measured points replace
the catalog's figures:

- ``hetplan profile-power`` measures a device at rest (``u = 0``) and under a dense matrix
  multiply loop (``u = 1``) (:mod:`hetplan.run.meters.power_profile`);
- ``hetplan train`` adds one point per GPU rank of every run with measured energy: its busy
  fraction (compute over step time) and its average watts.

The points of a device type are kept with the profiles (``power__<type>.points.json``) and
refitted by least squares at each addition (:mod:`hetplan.profile.power_fit`);
:func:`with_power_fits` applies the fits to a cluster, which ``plan``, ``predict``, ``train``
and ``tune`` do unless told ``--analytical``. No torch here: the planner reads fits without the
runtime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hetplan.cluster.spec import Cluster
from hetplan.profile.power_fit import (
    LIMIT_MARGIN,
    PowerFit,
    apply_power_fit,
    fit_utilization_power,
    load_power_fit,
    power_fit_path,
    save_power_fit,
)
from hetplan.serde import load_file, to_data, write_json_atomic

REST_MARGIN = 0.25
"""A fit's idle power may exceed the measured rest power by this fraction: it is extrapolated
from loaded points to busy fraction 0 and carries their scatter; 357 W against 72.5 W at rest
(issue 24) is far outside it."""
REFIT_HINT = (
    "`hetplan profile-power` measures rest and full load afresh and replaces the points that "
    "contradict them"
)


@dataclass(frozen=True, kw_only=True)
class PowerPoints:
    """The measured (busy fraction, watts) points of one device type."""

    device_type: str
    points: list[tuple[float, float]]


@dataclass(frozen=True, kw_only=True)
class PowerRecord:
    """What recording points did: the fit now stored, or why the new points were refused."""

    fit: PowerFit | None
    """The stored fit after the addition (None: the points do not yet span two loads)."""
    refused: str | None = None
    """Why the new points were not kept (the earlier points and fit stand), None if kept."""
    note: str | None = None
    """Earlier points dropped because the new direct measurements contradict them, and why."""


def _points_path(device_type: str, directory: Path | None) -> Path:
    return power_fit_path(device_type, directory).with_suffix(".points.json")


def load_points(device_type: str, directory: Path | None = None) -> list[tuple[float, float]]:
    """The stored points of ``device_type`` (none yet: an empty list)."""
    path = _points_path(device_type, directory)
    if not path.is_file():
        return []
    return [(float(u), float(w)) for u, w in load_file(PowerPoints, path).points]


def rest_power_w(device_type: str, directory: Path | None = None) -> float | None:
    """The lowest rest reading (busy fraction 0, ``profile-power``) of ``device_type``."""
    return _rest(load_points(device_type, directory))


def record_power_points(
    device_type: str,
    new: Sequence[tuple[float, float]],
    directory: Path | None = None,
    *,
    limit_w: float | None = None,
    direct: bool = False,
) -> PowerRecord:
    """Keep ``new`` points with the earlier ones and refit, unless the fit would put the idle
    power above the measured rest power or the maximum above ``limit_w`` (the device's
    enforced limit). Then a run's points are refused and the earlier fit stands; points
    measured ``direct`` at rest and full load (``profile-power``) that fit plausibly on their
    own replace the earlier points instead, which are what contradicts them."""
    old = load_points(device_type, directory)
    added = [(float(u), float(w)) for u, w in new]
    why = _refusal([*old, *added], limit_w)
    if why is None:
        return _store(device_type, [*old, *added], directory)
    if direct and old and _refusal(added, limit_w) is None:
        note = f"dropped the {len(old)} earlier points, with which {why}"
        return dataclasses.replace(_store(device_type, added, directory), note=note)
    hint = "" if direct else f"; {REFIT_HINT}"
    return PowerRecord(fit=load_power_fit(device_type, directory), refused=why + hint)


def _store(
    device_type: str, points: list[tuple[float, float]], directory: Path | None
) -> PowerRecord:
    """Write ``points`` (replacing the stored ones) and their fit where there is one."""
    path = _points_path(device_type, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(PowerPoints(device_type=device_type, points=points)))
    fit = _fit(points)
    if fit is not None:
        save_power_fit(device_type, fit, directory)
    return PowerRecord(fit=fit if fit is not None else load_power_fit(device_type, directory))


def _rest(points: Sequence[tuple[float, float]]) -> float | None:
    rest = [w for u, w in points if u == 0.0]
    return min(rest) if rest else None


def _fit(points: list[tuple[float, float]]) -> PowerFit | None:
    """The least-squares fit, None while the points do not span two loads or bound no model."""
    if len({u for u, _ in points}) < 2:
        return None
    fit = fit_utilization_power(points)
    return None if fit.idle_w < 0 or fit.max_w < fit.idle_w else fit


def _refusal(points: list[tuple[float, float]], limit_w: float | None) -> str | None:
    """Why the fit of ``points`` cannot be right: its maximum above ``limit_w`` (+5%) or its
    idle above their lowest rest reading (+ :data:`REST_MARGIN`); None if it can."""
    fit = _fit(points)
    if fit is None:
        return None
    rest_w = _rest(points)
    if limit_w is not None and fit.max_w > limit_w * (1 + LIMIT_MARGIN):
        return f"the fit's max {fit.max_w:.0f} W is above the power limit {limit_w:.0f} W"
    if rest_w is not None and fit.idle_w > rest_w * (1 + REST_MARGIN):
        return f"the fit's idle {fit.idle_w:.0f} W is above the measured rest power {rest_w:.0f} W"
    return None


def with_power_fits(cluster: Cluster, directory: Path | None = None) -> tuple[Cluster, list[str]]:
    """``cluster`` with every device type that has a stored fit using it; and which did."""
    fits: dict[str, PowerFit | None] = {}
    for d in cluster.devices:
        if d.type.name not in fits:
            fits[d.type.name] = load_power_fit(d.type.name, directory)
    used = sorted(name for name, fit in fits.items() if fit is not None)
    if not used:
        return cluster, []
    devices = []
    for d in cluster.devices:
        fit = fits[d.type.name]
        devices.append(
            d if fit is None else dataclasses.replace(d, type=apply_power_fit(d.type, fit))
        )
    return dataclasses.replace(cluster, devices=tuple(devices)), used
