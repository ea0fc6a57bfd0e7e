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
    EnergyMeter,
    PowerFit,
    apply_power_fit,
    fit_utilization_power,
    load_power_fit,
    meter_for,
    power_fit_path,
    save_power_fit,
)
from hetplan.serde import load_file, to_data, write_json_atomic

LOAD_MATRIX = 1024  # elements per side of the square matmul that keeps a device busy
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


def record_power_points(
    device_type: str, new: Sequence[tuple[float, float]], directory: Path | None = None
) -> PowerFit | None:
    """Keep ``new`` points with the earlier ones and refit; the fit, or None while the points
    do not yet span two loads (then no fit is stored)."""
    points = [*load_points(device_type, directory), *[(float(u), float(w)) for u, w in new]]
    path = _points_path(device_type, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_data(PowerPoints(device_type=device_type, points=points)))
    if len({u for u, _ in points}) < 2:
        return None
    fit = fit_utilization_power(points)
    if fit.idle_w < 0 or fit.max_w < fit.idle_w:
        return None  # points too noisy to bound the model; keep collecting
    save_power_fit(device_type, fit, directory)
    return fit


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
) -> list[tuple[float, float]]:
    """(0, idle watts) and (1, watts under ``load``, by default a matmul loop) of ``device``;
    InputError naming the reason when the device has no energy counter."""
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
    return [(0.0, idle), (1.0, busy)]


def _matmul_loop(device: str) -> Callable[[], None]:
    a = torch.randn(LOAD_MATRIX, LOAD_MATRIX, device=device)

    def load() -> None:
        a.matmul(a)
        if device.startswith("cuda"):
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
