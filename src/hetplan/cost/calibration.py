"""Device calibration: achieved time per kernel of each operation class, over kernel sizes.

``hetplan calibrate`` (:mod:`hetplan.profile.calibrate`) times one probe operation per class
(:data:`hetplan.graph.types.OP_CLASSES`) at a range of sizes on a device the user has and
stores, per device type and dtype, a :class:`Calibration`: for every class and pass a
:class:`RateCurve` of seconds per kernel against work per kernel (FLOPs, or bytes moved for
the ``memory`` class). :class:`hetplan.cost.compute.AnalyticalCompute` then prices each
layer's kernels of each class at their own size on that curve, so a small micro-batch runs
at the low efficiency small kernels really get, and a tensor-parallel rank's smaller matrices
too. This module is torch-free: the curves are plain numbers.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass, field

from hetplan.graph.types import OP_CLASSES

TINY_INTENSITY = 1e-9  # FLOPs per byte: stands for 0 in logarithms
MEMORY_CLASS = "memory"
"""The class priced by bytes moved; every other class by FLOPs."""
PER_CALL = "per-call"
"""Each probe call timed alone, the device synchronised after it: on a GPU its launch and
synchronisation are in every point (calibrations written before issue 30 were timed so)."""
STREAM = "stream"
"""Probe calls issued back to back and timed on the device's stream, as training issues them."""
TIMINGS = (PER_CALL, STREAM)
DEVICE_KERNEL_MIN_S = 3e-6
"""Seconds: device time of the smallest kernel on a current GPU, left in place of a per-call
timing's floor (:func:`on_stream`). An elementwise kernel over a few KB runs 2-5 us in Nsight
Systems traces on A100/H100; the learned fit (:mod:`hetplan.cost.learned`) absorbs the rest."""


@dataclass(frozen=True, kw_only=True)
class RatePoint:
    """One probe size: work per kernel and its median time."""

    work: float
    """FLOPs per kernel (bytes read and written per kernel for the ``memory`` class)."""
    seconds: float
    """Median seconds per kernel (launch and dispatch included)."""


@dataclass(frozen=True, kw_only=True)
class RateCurve:
    """Seconds per kernel against work per kernel for one class and pass.

    Between probe sizes the time is interpolated linearly in log(work)-log(time); times are
    made non-decreasing in work first (a larger kernel never takes less time; noise can
    say otherwise). Below the smallest probe a kernel takes the smallest probe's time (launch
    and dispatch bound); above the largest it runs at the largest probe's rate.
    """

    op_class: str
    backward: bool
    points: tuple[RatePoint, ...]
    """Sorted by work, at least one."""
    intensity: float = 0.0
    """FLOPs per byte of activations moved (``OpWork.flops / OpWork.io_bytes``) of the probe
    family this curve was measured on; 0 for ``memory``. A class measured at several
    intensities (a linear layer's width, a convolution's channels) has one curve each."""

    def __post_init__(self) -> None:
        if self.op_class not in OP_CLASSES:
            raise ValueError(f"op_class {self.op_class!r}: expected one of {OP_CLASSES}")
        if not self.points:
            raise ValueError(f"{self.op_class}: a curve needs at least one point")
        works = [p.work for p in self.points]
        if works != sorted(works) or any(p.work <= 0 or p.seconds <= 0 for p in self.points):
            raise ValueError(f"{self.op_class}: points must have work, seconds > 0, by work")

    def _monotone(self) -> tuple[list[float], list[float]]:
        xs = [math.log(p.work) for p in self.points]
        ys, top = [], -math.inf
        for p in self.points:
            top = max(top, math.log(p.seconds))
            ys.append(top)
        return xs, ys

    def seconds(self, work: float) -> float:
        """Seconds one kernel of ``work`` takes (0 for no work)."""
        if work <= 0:
            return 0.0
        xs, ys = self._monotone()
        x = math.log(work)
        if x <= xs[0]:
            return math.exp(ys[0])
        if x >= xs[-1]:
            return math.exp(ys[-1]) * work / self.points[-1].work
        i = bisect.bisect_right(xs, x) - 1
        f = (x - xs[i]) / (xs[i + 1] - xs[i])
        return math.exp(ys[i] + f * (ys[i + 1] - ys[i]))

    def rate(self, work: float) -> float:
        """Achieved work per second of one kernel of ``work``."""
        return work / self.seconds(work) if work > 0 else 0.0

    def best_rate(self) -> float:
        """The highest rate any probe reached (work per second)."""
        return max(p.work / p.seconds for p in self.points)


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Every class's curves for one device type and dtype, with how they were taken."""

    device_type: str
    """Cluster catalog name the calibration is filed under (``cpu``, ``A100-40GB``)."""
    device_name: str
    """Hardware it was taken on (GPU or CPU model string)."""
    device: str
    """torch device string used (``cpu``, ``cuda:0``)."""
    dtype: str
    threads: int
    """``torch.get_num_threads()`` while measuring."""
    curves: tuple[RateCurve, ...]
    timestamp: str
    """UTC time, ISO 8601."""
    torch_version: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    timing: str = PER_CALL
    """How the points were timed (:data:`TIMINGS`)."""
    issue_s: float | None = None
    """Host seconds to issue one kernel with nothing to wait for (framework dispatch and
    launch), measured by ``calibrate``; None where not measured."""

    def __post_init__(self) -> None:
        if self.timing not in TIMINGS:
            raise ValueError(f"timing: {self.timing!r}; expected one of {', '.join(TIMINGS)}")

    @property
    def synchronous(self) -> bool:
        """A CPU's calibration: its kernels run on the calling thread, so a per-call time is
        the device's own."""
        return self.device.startswith("cpu")

    def call_floor_s(self) -> float:
        """The smallest time of any point: on a GPU timed per call, its launch and sync."""
        return min(p.seconds for c in self.curves for p in c.points)

    def family(self, op_class: str, backward: bool) -> list[RateCurve]:
        """The class's curves for the pass by intensity; a backward without curves of its own
        uses the forward's (the same kernels run: matmuls for a matmul's gradients)."""
        same = [c for c in self.curves if c.op_class == op_class]
        mine = [c for c in same if c.backward == backward] or same
        return sorted(mine, key=lambda c: c.intensity)

    def curve(self, op_class: str, backward: bool) -> RateCurve | None:
        """The class's (lowest-intensity) curve for the pass, None if not measured."""
        curves = self.family(op_class, backward)
        return curves[0] if curves else None

    def seconds(self, op_class: str, backward: bool, work: float, intensity: float) -> float | None:
        """Seconds of one kernel of ``work`` at ``intensity``: between the two measured
        intensities around it, log-time is interpolated linearly in log-intensity; outside
        them, the nearest curve. None if the class was not measured."""
        curves = self.family(op_class, backward)
        if not curves:
            return None
        xs = [math.log(max(c.intensity, TINY_INTENSITY)) for c in curves]
        x = math.log(max(intensity, TINY_INTENSITY))
        i = bisect.bisect_right(xs, x)
        if i == 0 or i == len(curves) or xs[i] == xs[i - 1]:
            return curves[min(i, len(curves) - 1) if i else 0].seconds(work)
        lo, hi = curves[i - 1].seconds(work), curves[i].seconds(work)
        f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        return math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo))) if lo > 0 else 0.0


def on_stream(cal: Calibration) -> Calibration:
    """``cal`` as kernels issued back to back see it: a GPU calibration timed per call has its
    floor (the smallest point, launch and synchronisation, about 28 us on the H100 of
    ``shared/gpu-truth``) replaced by :data:`DEVICE_KERNEL_MIN_S` in every point; the host's
    issue cost is priced apart (:mod:`hetplan.cost.learned`). Stream-timed and CPU
    calibrations are returned as they are."""
    if cal.timing == STREAM or cal.synchronous:
        return cal
    floor = cal.call_floor_s()
    shift = floor - DEVICE_KERNEL_MIN_S
    if shift <= 0:
        return cal

    def point(p: RatePoint) -> RatePoint:
        return RatePoint(work=p.work, seconds=max(p.seconds - shift, DEVICE_KERNEL_MIN_S))

    curves = tuple(
        dataclasses.replace(c, points=tuple(point(p) for p in c.points)) for c in cal.curves
    )
    note = f"per-call floor of {floor * 1e6:.1f} us taken out (on_stream)"
    return dataclasses.replace(cal, curves=curves, timing=STREAM, notes=(*cal.notes, note))


def calibration_key(device_type: str, dtype: str) -> tuple[str, str]:
    """How calibrations are looked up: by device type name and dtype."""
    return (device_type, dtype)
