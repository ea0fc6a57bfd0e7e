"""CPU devices priced by their cores: a rank's intra-op threads and how its time scales.

A device of a CPU type pinned to ``cpus: [c_1, ..., c_n]`` runs its rank with ``n`` intra-op
threads (``torch.set_num_threads``, :mod:`hetplan.run.launch._rank`); without ``cpus`` it is one
core,
as the catalog's ``cpu`` type (whose figures are one core's). Calibrations and profiles record
the thread count they were measured with; the cost model takes one measured at the device's
count where there is one, else the nearest (:func:`nearest_threads`) scaled by Amdahl's law
(Amdahl 1967): over one thread, ``n`` threads run ``S(n) = 1 / (s + (1 - s) / n)`` times as
fast, ``s`` the serial fraction, so a time measured at ``m`` threads becomes
``t S(m) / S(n)`` at ``n`` (:func:`thread_scale`). For ``n > m`` that speed-up ``S(n) / S(m)``
is below ``n / m`` whenever ``s > 0``: never more than linear.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from hetplan.cluster.spec import Device

# Serial fraction of a training step on CPU threads (dimensionless), measured on the 2-core
# development machine (AMD EPYC, AVX-512, torch 2.13) with benchmarks/bench_cpu_threads.py:
# 2 threads against 1, s = 2 / S(2) - 1, over 4-5 runs each: resnet18 steps (CIFAR-10, batch
# 16) 1.81-1.89x (s 0.06-0.10, median 0.068), the matmul calibration probes >= 1e7 FLOP
# 1.82-1.91x (median 0.073), gpt-mini steps median 0.09, gpt-tiny's small kernels 0.21.
SERIAL_FRACTION = 0.07
CATALOG_THREADS = 1  # threads the catalog's CPU figures stand for: one core (cluster.catalog)


def device_threads(device: Device) -> int | None:
    """Intra-op threads of the device's rank: one per distinct core of ``cpus`` (1 without);
    None for a GPU, whose speed its host threads do not set."""
    if not device.type.is_cpu:
        return None
    return len(set(device.cpus)) if device.cpus else CATALOG_THREADS


def known_threads(recorded: int) -> int:
    """A measurement's thread count; files that did not record one (0) count as one thread,
    the ``hetplan calibrate``/``profile`` default on CPU."""
    return recorded if recorded >= 1 else CATALOG_THREADS


def amdahl_speedup(threads: int, serial: float = SERIAL_FRACTION) -> float:
    """``S(n) = 1 / (s + (1 - s) / n)``: how many times faster ``n`` threads run than one."""
    return 1.0 / (serial + (1.0 - serial) / threads)


def thread_scale(measured: int, target: int, serial: float = SERIAL_FRACTION) -> float:
    """Factor on a time measured at ``measured`` threads for ``target`` threads."""
    return amdahl_speedup(measured, serial) / amdahl_speedup(target, serial)


def nearest_threads(available: Iterable[int], target: int) -> int:
    """Of the measured thread counts, the one closest to ``target`` in ratio (the scaling
    law is multiplicative); ties go to the fewer threads."""
    return min(available, key=lambda m: (abs(math.log(m / target)), m))


def threads_text(n: int) -> str:
    return f"{n} thread" if n == 1 else f"{n} threads"


def thread_note(measured: int, target: int) -> str:
    """What a cost source adds about threads: nothing when both are one thread (as before
    thread counts were kept), `` (6 threads)`` when measured at the device's count, else
    `` (1 thread, scaled to 6 threads)`` (no bare comma: sources are listed comma-separated)."""
    if measured == target == 1:
        return ""
    if measured == target:
        return f" ({threads_text(target)})"
    return f" ({threads_text(measured)}, scaled to {threads_text(target)})"


def compute_kind(device: Device) -> tuple[str, float, int | None]:
    """What a device's compute costs depend on: its type, speed share and threads (CPU).
    Devices alike in it are priced alike, so the planner prices one of them."""
    return (device.type.name, device.speed, device_threads(device))
