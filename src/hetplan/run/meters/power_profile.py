"""Measuring a device's power at rest and under load (``hetplan profile-power``).

Its energy counter (:func:`hetplan.run.meters.energy.meter_for`) is read over a window of sleep,
then
over a window of a dense matrix multiply loop: the points ``(0, idle W)`` and ``(1, busy W)``
that :func:`hetplan.profile.power_store.record_power_points` keeps and fits. Only the measuring
needs torch; the points, their fit and its use by ``plan`` and ``predict`` are
:mod:`hetplan.profile.power_store`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from hetplan.errors import InputError
from hetplan.run.meters.energy import EnergyMeter, meter_for, power_limit_w

LOAD_MATRIX = {"cpu": 1024, "cuda": 8192}
"""Elements per side of the square matmul that keeps a device busy: on a GPU an 8192^3 bf16
product loop draws the enforced limit (704 W of 700 W on an H100, issue 24); 1024^3 does not."""
LOAD_DTYPE = {"cpu": torch.float32, "cuda": torch.bfloat16}
LOAD_QUEUE = 8  # products queued between synchronisations: the GPU never waits for the host
MIN_SPAN_S = 1.0  # seconds: energy counters update every ~10-100 ms (NVML, RAPL)


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
