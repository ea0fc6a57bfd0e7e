"""Power figures measured instead of taken from the spec sheet.

The utilisation model ``P = idle + (max - idle) * u`` (:mod:`hetplan.cost.power`) needs each
device type's idle and maximum power. Where an energy counter exists
(:func:`hetplan.run.energy.meter_for`), measured points replace the catalog's figures:

- ``hetplan profile-power`` measures a device at rest (``u = 0``) and under a dense matrix
  multiply loop (``u = 1``);
- ``hetplan train`` adds one point per GPU rank of every run with measured energy: its busy
  fraction (compute over step time) and its average watts.

The points of a device type are kept with the profiles (``power__<type>.json``) and refitted by
least squares at each addition; :func:`with_power_fits` applies the fits to a cluster, which
``plan``, ``predict``, ``train`` and ``tune`` do unless told ``--analytical``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.run.energy import (
    LIMIT_MARGIN,
    EnergyMeter,
    PowerFit,
    apply_power_fit,
    fit_utilization_power,
    load_power_fit,
    meter_for,
    power_fit_path,
    power_limit_w,
    save_power_fit,
)
from hetplan.serde import load_file, to_data, write_json_atomic

LOAD_MATRIX = {"cpu": 1024, "cuda": 8192}
"""Elements per side of the square matmul that keeps a device busy: on a GPU an 8192^3 bf16
product loop draws the enforced limit (704 W of 700 W on an H100, issue 24); 1024^3 does not."""
LOAD_DTYPE = {"cpu": torch.float32, "cuda": torch.bfloat16}
LOAD_QUEUE = 8  # products queued between synchronisations: the GPU never waits for the host
REST_MARGIN = 0.25
"""A fit's idle power may exceed the measured rest power by this fraction: it is extrapolated
from loaded points to busy fraction 0 and carries their scatter; 357 W against 72.5 W at rest
(issue 24) is far outside it."""
MIN_SPAN_S = 1.0  # seconds: energy counters update every ~10-100 ms (NVML, RAPL)


@dataclass(frozen=True, kw_only=True)
class PowerPoints:
    """The measured (busy fraction, watts) points of one device type."""

    device_type: str
    points: list[tuple[float, float]]


def _points_path(device_type: str, directory: Path | None) -> Path:
    return power_fit_path(device_type, directory).with_suffix(".points.json")


def load_points(device_type: str, directory: Path | None = None) -> list[tuple[float, float]]:
    path = _points_path(device_type, directory)
    if not path.is_file():
        return []
    return [(float(u), float(w)) for u, w in load_file(PowerPoints, path).points]


@dataclass(frozen=True, kw_only=True)
class PowerRecord:
    """What recording points did: the fit now stored, or why the new points were refused."""

    fit: PowerFit | None
    """The stored fit after the addition (None: the points do not yet span two loads)."""
    refused: str | None = None
    """Why the new points were not kept (the earlier points and fit stand), None if kept."""
    note: str | None = None
    """Earlier points dropped because the new direct measurements contradict them, and why."""


REFIT_HINT = (
    "`hetplan profile-power` measures rest and full load afresh and replaces the points that "
    "contradict them"
)


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


def _window_w(meter: EnergyMeter, seconds: float, work: Callable[[], None] | None = None) -> float:
    """Average watts over ``seconds`` of sleeping (``work`` None) or of running ``work``."""
    start_j, start = meter.read_j(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        if work is not None:
            work()
        else:
            time.sleep(min(0.05, seconds))
    return (meter.read_j() - start_j) / (time.perf_counter() - start)


def measure_power_points(
    device: str,
    seconds: float = 5.0,
    meter: EnergyMeter | None = None,
    load: Callable[[], None] | None = None,
) -> tuple[list[tuple[float, float]], float | None]:
    """(0, idle watts) and (1, watts under ``load``, by default a matmul loop) of ``device``,
    and its enforced power limit (watts, None where not known); InputError naming the reason
    when the device has no energy counter."""
    if seconds < MIN_SPAN_S:
        raise InputError(f"--seconds must be >= {MIN_SPAN_S:g} (counters update slowly)")
    if meter is None:
        meter, why = meter_for(device)
        if meter is None:
            raise InputError(
                f"{device}: no energy counter ({why}); the power model keeps the catalog's "
                "idle and max watts"
            )
    idle = _window_w(meter, seconds)
    busy = _window_w(meter, seconds, load or _matmul_loop(device))
    return [(0.0, idle), (1.0, busy)], power_limit_w(meter)


def _matmul_loop(device: str) -> Callable[[], None]:
    kind = "cuda" if device.startswith("cuda") else "cpu"
    n = LOAD_MATRIX[kind]
    a = torch.randn(n, n, device=device, dtype=LOAD_DTYPE[kind])

    def load() -> None:
        for _ in range(LOAD_QUEUE if kind == "cuda" else 1):
            a.matmul(a)
        if kind == "cuda":
            torch.cuda.synchronize()

    return load


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
