"""What a device type's measured layers teach about every other model on it (issue 30).

The calibrated roofline (:mod:`hetplan.cost.op_classes`) prices each operation class of a layer
from probes of one operation; real layers differ (fused kernels, cuDNN's choices, the host
issuing kernels). Per-layer profiles of *other* models on the same device type and dtype
correct it, class by class and pass by pass::

    t(layer) = || ( sum_c s_c T_c (T_c / T_ref) ** k_c,  h_kernel K(layer) ) ||_p

``T_c`` is the calibrated (or catalog) time of the layer's class-``c`` kernels on a stream
(:func:`hetplan.cost.calibration.on_stream`), ``s_c`` the learned scale of that class in that
pass, ``k_c`` its learned slope (how much faster or slower than the probes' curve the class
grows with its size, :data:`SLOPE_PRIOR`; at least :data:`MIN_SLOPE`, the ratio's ``T_c`` held
inside the sizes fitted: :attr:`ClassFit.spans`), and the second term is the host: what issuing
the layer's ``K`` kernels takes (framework dispatch and launch), which a GPU cannot beat
however fast its kernels are. The two overlap (the host issues ahead while the device runs),
hence a bound of both, not their sum: the p-norm (:data:`OVERLAP_P`), which is the larger of
the two where one dominates and a little more where they are close (the queue then runs dry now
and then). Unlike a hard max it gives the fit a gradient on both sides.

A profile's layer window holds more than the layer: ``hetplan profile``'s hooks read the
allocator's statistics and record events at every window's edge, and in backward those reads
fall inside the windows (a tensor hook closes one window and opens the next; forward hooks
read before and after theirs). Whenever the queue has drained, the device waits through them.
So a profiled window is ``h_hook + t(layer)``, with ``h_hook`` fitted per pass; a training
step, which has no hooks, is priced at ``t(layer)`` alone (:meth:`ClassFit.seconds`). On the
H100 profiles in ``shared/gpu-truth`` the fit gives ``h_hook`` about 50 us forward and 460 us
backward: the backward of a pooling layer, almost no work, was measured at 400-600 us there,
and those profiles' whole steps ran 11-25% longer than the same steps under ``hetplan train``.

The fit minimises robust (soft-L1) relative errors in log space over every measured layer and
batch size; a weak prior holds the scales of classes the models barely use at 1
(:data:`SCALE_PRIOR`) and the slopes at 0. This module is torch-free: scipy does the fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hetplan.cost.calibration import MEMORY_CLASS
from hetplan.graph.types import OP_CLASSES

FloatArray = npt.NDArray[np.float64]

SCALE_PRIOR = 0.3
"""Weight of each log-scale in the fit's residuals (a scale of 1 costs nothing): a class the
models hardly use keeps the calibration's rate instead of an arbitrary one. Chosen on the
leave-one-out benchmark (``benchmarks/bench_transfer.py``): 0.3 and 1.0 differ by < 2 points."""
ROBUST_LOG_ERROR = 0.2
"""Log-error (about 20%) past which a layer's residual counts linearly (soft-L1): a layer
whose profile caught a hook or a stall does not drag the fit."""
START_HOOK_S = 1e-4
"""Seconds: starting cost of the profiler's hooks per layer window (fitted; module doc)."""
START_KERNEL_S = 2e-5
"""Seconds: starting host cost per kernel (fitted; the H100 profiles give 26-96 us)."""
OVERLAP_P = 6.0
"""Exponent of the host/device bound: where both are equal a layer takes 2^(1/6) = 1.12 times
either; where one is twice the other, 1.002 times it. Chosen on the leave-one-out benchmark
(4 and 8 give the same medians within 1 point; a hard max leaves scales unfitted on layers
that are launch bound at every measured size)."""
REFERENCE_S = 1e-3
"""Seconds: the calibrated class time at which a class's factor is its ``scale`` alone."""
SLOPE_PRIOR = 1.0
"""Weight of each slope in the fit's residuals (a slope of 0 costs nothing). The probes of a
class are one operation shape; real layers' kernels grow faster or slower with their size
than the probe's curve says (cuDNN picks other algorithms for a network's large and small
convolutions). Leave-one-out benchmark (``benchmarks/bench_transfer.py``, 2026-11-29): layer
median |error| 17.2% without slopes; 15.5%, 14.8%, 15.8%, 17.6% with priors 0.3, 1, 3, 10."""
MIN_SLOPE = -0.9
"""Lowest slope a fit may take: a class's time ``T (T / REFERENCE_S) ** k`` never falls as its
calibrated time grows only while ``k > -1``; -0.9 leaves 10x the work at least 1.26x the time.
Unbounded, the bf16 fits of ``shared/gpu-truth`` took attention slopes of -1.2 to -1.3 (the
host-bound, flat times of bf16 transformer blocks learned as device time), so a longer
sequence was priced *faster* than a shorter one. Leave-one-out benchmark, layer median
|error| without :attr:`ClassFit.spans`: 13.2% unbounded, 13.6% at -0.9, 14.0% at -0.75, 15.6%
at -0.5; 13.5% at -0.9 with them (2026-11-30)."""
FAR_LOG_ERROR = 1e3
"""Log-error given a trial of the fit whose times overflow (factors past e^700): far enough
that the solver rejects the step, finite so that it can."""
MIN_MODELS = 2
"""Models a fit needs: one model's layers cannot separate its classes from its quirks."""

Spans = tuple[tuple[tuple[float, float], ...], ...]
"""Per pass, per class of :data:`OP_CLASSES`: the smallest and largest calibrated time."""


@dataclass(frozen=True, kw_only=True)
class LayerSample:
    """One measured pass of one layer at one batch size, with what the calibration says."""

    model: str
    backward: bool
    class_s: tuple[float, ...]
    """Seconds of each class of :data:`OP_CLASSES` as calibrated (``T_c``)."""
    kernels: int
    measured_s: float
    hooked: bool = True
    """Timed between ``hetplan profile``'s hooks (False: a write-back's or import's time)."""


@dataclass(frozen=True, kw_only=True)
class ClassFit:
    """The learned correction of one device type and dtype (:func:`fit_classes`)."""

    device_type: str
    dtype: str
    scales: tuple[tuple[float, ...], tuple[float, ...]]
    """Per pass (forward, backward), each class's factor on its calibrated time."""
    hook_s: tuple[float, float]
    """Per pass, seconds the profiler's hooks add to each layer window (module doc): part of
    a profiled layer's time, not of a training step's."""
    kernel_s: tuple[float, float]
    """Host seconds per kernel issued, per pass."""
    models: tuple[str, ...]
    """The models whose profiles it was fitted on."""
    slopes: tuple[tuple[float, ...], tuple[float, ...]] = (
        (0.0,) * len(OP_CLASSES),
        (0.0,) * len(OP_CLASSES),
    )
    """Per pass, each class's exponent on its calibrated time: the class's factor is
    ``scale (T_c / REFERENCE_S) ** slope`` (0: one factor at every size)."""
    spans: Spans = ()
    """Per pass, each class's smallest and largest calibrated time among the samples it was
    fitted on: outside them a slope's factor is held at the edge's (:func:`_powered`), so a
    model larger or smaller than every teacher is priced linearly from the nearest size seen,
    not by a power law extrapolated past its data. Empty, or a class the samples never ran
    (``(0, 0)``): no bounds."""
    samples: int
    median_error: float
    """Median |relative error| over the samples it was fitted on."""

    def terms(self, class_s: Sequence[float], kernels: int, backward: bool) -> tuple[float, float]:
        """One pass of a layer: its device time and its host time."""
        p = int(backward)
        spans = self.spans[p] if self.spans else ((0.0, 0.0),) * len(class_s)
        terms = zip(self.scales[p], self.slopes[p], class_s, spans, strict=True)
        device = sum(s * _powered(t, b, span) for s, b, t, span in terms)
        return device, self.kernel_s[p] * kernels

    def seconds(
        self, class_s: Sequence[float], kernels: int, backward: bool, *, hooked: bool = False
    ) -> float:
        """One pass of a layer in a training step: the bound of its device and host times;
        ``hooked``: as ``hetplan profile`` times it, its hooks' cost added (module doc)."""
        device, host = self.terms(class_s, kernels, backward)
        bound = float((device**OVERLAP_P + host**OVERLAP_P) ** (1.0 / OVERLAP_P))
        return bound + (self.hook_s[int(backward)] if hooked else 0.0)

    def host_bound(self, class_s: Sequence[float], kernels: int, backward: bool) -> bool:
        """Whether the host, not the device, sets this pass's time."""
        device, host = self.terms(class_s, kernels, backward)
        return host > device

    @property
    def label(self) -> str:
        return f"learned on {self.device_type} from {len(self.models)} models"


_N = len(OP_CLASSES)


def _powered(t: float, slope: float, span: tuple[float, float] = (0.0, 0.0)) -> float:
    """``t (t' / REFERENCE_S) ** slope``: a class's calibrated time with its size correction,
    ``t'`` being ``t`` held inside ``span`` (the sizes the fit saw; ``(0, 0)``: any size)."""
    if t <= 0:
        return 0.0
    held = min(max(t, span[0]), span[1]) if span[1] > 0 else t
    return float(t * (held / REFERENCE_S) ** slope)


def _spans(feats: FloatArray, p: npt.NDArray[np.int_]) -> Spans:
    """Per pass and class, the smallest and largest positive calibrated time in ``feats``."""
    out = []
    for backward in (0, 1):
        rows = feats[p == backward]
        spans = []
        for c in range(_N):
            col = rows[:, c][rows[:, c] > 0]
            spans.append((float(col.min()), float(col.max())) if len(col) else (0.0, 0.0))
        out.append(tuple(spans))
    return tuple(out)


_SLOPED = np.array([c != MEMORY_CLASS for c in OP_CLASSES])
"""Classes with a slope. ``memory`` has none: its calibrated time is already its kernels'
bytes on the probe's curve at their mean size, and a slope fitted on the largest memory-bound
layers the other models have (batch norms and ReLUs, <= 5 ms calibrated) stretched GPT-2's
loss under autocast (~40 ms calibrated backward at batch 16) to twice its measured time
(leave-one-out benchmark: GPT-2 bf16 step +52.5% with a memory slope, +4.1% without)."""


def _unpack(theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    e = np.exp(theta[: 2 * _N + 4])
    slopes = theta[2 * _N + 4 :].reshape(2, _N) * _SLOPED
    return e[: 2 * _N].reshape(2, _N), e[2 * _N : 2 * _N + 2], e[2 * _N + 2 : 2 * _N + 4], slopes


def _predict(
    theta: FloatArray,
    feats: FloatArray,
    kernels: FloatArray,
    p: npt.NDArray[np.int_],
    hooked: FloatArray,
) -> FloatArray:
    scales, hook_s, kernel_s, slopes = _unpack(theta)
    safe = np.where(feats > 0, feats, REFERENCE_S)
    powered = np.where(feats > 0, feats * (safe / REFERENCE_S) ** slopes[p], 0.0)
    device = (powered * scales[p]).sum(axis=1)
    host = kernel_s[p] * kernels
    return overlap(device, host) + hooked * hook_s[p]


def overlap(device: FloatArray, host: FloatArray) -> FloatArray:
    """The host/device bound ``||(device, host)||_p`` (:data:`OVERLAP_P`), scaled by the larger
    of the two first: a fit's trial of extreme slopes overflows the plain powers."""
    top = np.maximum(np.maximum(device, host), np.finfo(np.float64).tiny)
    norm = ((device / top) ** OVERLAP_P + (host / top) ** OVERLAP_P) ** (1.0 / OVERLAP_P)
    out: FloatArray = top * norm
    return out


def fit_classes(samples: Sequence[LayerSample], device_type: str, dtype: str) -> ClassFit:
    """The correction that best explains ``samples`` (module doc). ValueError with fewer than
    :data:`MIN_MODELS` models or no sample with a positive time."""
    from scipy.optimize import least_squares  # noqa: PLC0415 (loaded only when a fit is made)

    good = [s for s in samples if s.measured_s > 0 and sum(s.class_s) > 0]
    models = tuple(sorted({s.model for s in good}))
    if len(models) < MIN_MODELS:
        raise ValueError(f"a fit needs measured layers of {MIN_MODELS} models; got {len(models)}")
    feats = np.array([s.class_s for s in good], dtype=np.float64)
    kernels = np.array([s.kernels for s in good], dtype=np.float64)
    p = np.array([int(s.backward) for s in good])
    hooked = np.array([float(s.hooked) for s in good])
    log_measured = np.log([s.measured_s for s in good])
    host = [np.log([START_HOOK_S] * 2), np.log([START_KERNEL_S] * 2)]
    start = np.concatenate([np.zeros(2 * _N), *host, np.zeros(2 * _N)])

    def residuals(theta: FloatArray) -> FloatArray:
        with np.errstate(over="ignore", invalid="ignore"):  # a trial step far out: rejected
            err = np.log(_predict(theta, feats, kernels, p, hooked)) - log_measured
        err = np.where(np.isfinite(err), err, FAR_LOG_ERROR)
        priors = [SCALE_PRIOR * theta[: 2 * _N], SLOPE_PRIOR * theta[2 * _N + 4 :]]
        return np.concatenate([err, *priors])

    lower = np.full(len(start), -np.inf)
    lower[2 * _N + 4 :] = MIN_SLOPE
    bounds = (lower, np.full(len(start), np.inf))
    sol = least_squares(residuals, start, loss="soft_l1", f_scale=ROBUST_LOG_ERROR, bounds=bounds)
    theta = np.asarray(sol.x, dtype=np.float64)
    scales, hook_s, kernel_s, slopes = _unpack(theta)
    errors = np.abs(_predict(theta, feats, kernels, p, hooked) / np.exp(log_measured) - 1.0)
    return ClassFit(
        device_type=device_type,
        dtype=dtype,
        scales=(tuple(map(float, scales[0])), tuple(map(float, scales[1]))),
        hook_s=(float(hook_s[0]), float(hook_s[1])),
        kernel_s=(float(kernel_s[0]), float(kernel_s[1])),
        models=models,
        slopes=(tuple(map(float, slopes[0])), tuple(map(float, slopes[1]))),
        spans=_spans(feats, p),
        samples=len(good),
        median_error=float(np.median(errors)) if len(errors) else math.nan,
    )
