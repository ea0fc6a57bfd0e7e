"""A layer's time from its kernels by operation class (``LayerInfo.work``).

Each class's kernels are priced at their own size, for a micro-batch of ``b`` samples::

    t_c = max(compute_c, (b IO_c + w_c) / BW)          (a roofline per class)

``compute_c`` is ``K_c * curve_c(b F_c / K_c)`` on a calibrated device (the measured seconds
per kernel at that work per kernel, on the curves of the class's forward intensity
``F_c / IO_c``, the shape of its kernels in both passes,
:meth:`hetplan.cost.calibration.Calibration.seconds`), else
``b F_c / (P_c eff f_c) + K_c o`` (peak ``P_c`` of the class's dtype, the device type's
``compute_efficiency`` ``eff``, the class factor ``f_c`` of :data:`CLASS_EFFICIENCY` and the
per-kernel overhead ``o``). ``w_c`` is the class's share (by FLOPs) of the weight traffic
(weights read forward; read and their gradients written backward). The ``memory`` class is
``K * curve(b IO / K)`` calibrated, else ``b IO / BW + K o``; a layer whose kernels do no
FLOPs (a LayerNorm) bills its weight traffic to it. On a calibrated device the memory floor
of a FLOP class is its bytes moved by ``K_c`` kernels on the ``memory`` curve (so weights
streamed from DRAM are priced at the rate big copies reach, not the cache-resident one);
else ``BW`` is the spec bandwidth times ``memory_efficiency``. The layer's
time is the sum over classes: kernels of one layer run one after another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetplan.cost.calibration import MEMORY_CLASS, Calibration
from hetplan.cost.roofline import roofline_time
from hetplan.graph.types import LayerInfo, OpWork

# Achieved FLOP/s of a class relative to the device type's ``compute_efficiency`` when the
# device is not calibrated, per pass (forward, backward). Sources:
# - matmul, conv: 1.0: ``compute_efficiency`` itself is set from GEMM and convolution kernels
#   (cluster.spec.DEFAULT_COMPUTE_EFFICIENCY, NVIDIA Deep Learning Performance Guide).
# - conv_grouped: 1.0 on FLOPs; a depthwise 3x3 does ~2.25 FLOP per byte in fp32 (9 FMAs per
#   output element read and written), far below any GPU's ridge point, so the bytes term of
#   the roofline prices it (Howard et al. 2017, MobileNets, Sec. 3.1 for the FLOP count).
# - attention: forward 1.0; backward 0.86 = 63% / 73% of peak, FlashAttention-2's best
#   backward against forward rate on A100 (Dao 2023, arXiv:2307.08691, Sec. 4.1).
CLASS_EFFICIENCY: dict[str, tuple[float, float]] = {  # dimensionless: (forward, backward)
    "matmul": (1.0, 1.0),
    "conv": (1.0, 1.0),
    "conv_grouped": (1.0, 1.0),
    "attention": (1.0, 0.63 / 0.73),
}
CONV_CLASSES = frozenset({"conv", "conv_grouped"})  # priced at the convolution peak (TF32)


@dataclass(frozen=True, kw_only=True)
class ClassRates:
    """What prices one device's kernels: its calibration (if any) and its spec figures."""

    calibration: Calibration | None
    conv_peak: float
    """FLOP/s, before efficiency, of convolutions (TF32 in fp32 where the device has it)."""
    other_peak: float
    """FLOP/s, before efficiency, of every other class."""
    compute_efficiency: float
    bandwidth: float
    """Achieved bytes/s of memory-bound kernels and weight traffic."""
    kernel_overhead_s: float


def pass_time(
    layer: LayerInfo, backward: bool, batch: float, weight_passes: int, rates: ClassRates
) -> float:
    """Seconds of one pass of ``layer`` for ``batch`` samples (before the device's speed)."""
    return sum(class_times(layer, backward, batch, weight_passes, rates).values())


def class_times(
    layer: LayerInfo, backward: bool, batch: float, weight_passes: int, rates: ClassRates
) -> dict[str, float]:
    """Seconds of each class's kernels in one pass of ``layer`` (their sum is
    :func:`pass_time`); a layer with no kernels but weights bills them to ``memory``."""
    works = [w for w in layer.work if w.backward == backward]
    flops = sum(w.flops for w in works if w.op_class != MEMORY_CLASS)
    weights = float(weight_passes * layer.param_bytes)
    by_shape = rates.calibration is not None and not rates.calibration.synchronous
    shape = {w.op_class: _intensity(w, by_shape) for w in layer.work if not w.backward}
    out: dict[str, float] = {}
    for w in works:
        if w.op_class == MEMORY_CLASS:
            extra = weights if flops <= 0 else 0.0
            t = _memory_time(w, batch, extra, rates)
        else:
            intensity = shape.get(w.op_class, _intensity(w, by_shape))
            share = w.flops / flops if flops > 0 else 0.0  # weights go with the FLOPs
            t = _compute_time(w, batch, weights * share, intensity, rates)
        out[w.op_class] = out.get(w.op_class, 0.0) + t
    if not works and weights > 0:
        out[MEMORY_CLASS] = weights / rates.bandwidth
    return out


def _memory_time(w: OpWork, batch: float, weights: float, rates: ClassRates) -> float:
    curve = rates.calibration.curve(MEMORY_CLASS, w.backward) if rates.calibration else None
    nbytes = batch * w.io_bytes
    if curve is not None and w.kernels > 0:
        return w.kernels * curve.seconds((nbytes + weights) / w.kernels)
    return (nbytes + weights) / rates.bandwidth + w.kernels * rates.kernel_overhead_s


def _intensity(w: OpWork, by_shape: bool) -> float:
    """Where the kernels sit among the calibration's probe families: on a GPU
    (``by_shape``), the intensity of the probe shaped like them where the graph records one
    (convolutions: tensor-core tiles make a GEMM's shape, not its bytes, set its rate), else
    their FLOPs per byte of activations moved (a layer's width, channels). On a CPU, placing
    resnet-tiny's 8-channel convolutions by shape priced the model 13-31% too fast against
    its profile, by bytes -13..+21% (vgg11 alike either way; 2026-11-25, this machine)."""
    if by_shape and w.probe_intensity > 0:
        return w.probe_intensity
    return w.flops / w.io_bytes if w.io_bytes > 0 else math.inf


def _compute_time(
    w: OpWork, batch: float, weights: float, intensity: float, rates: ClassRates
) -> float:
    cal = rates.calibration
    if cal is not None and w.kernels > 0:
        one = cal.seconds(w.op_class, w.backward, batch * w.flops / w.kernels, intensity)
        if one is not None:
            # The memory floor: the class's bytes moved as memory-bound kernels move them.
            nbytes = batch * w.io_bytes + weights
            mem = cal.curve(MEMORY_CLASS, w.backward)
            floor = w.kernels * mem.seconds(nbytes / w.kernels) if mem else nbytes / rates.bandwidth
            return max(w.kernels * one, floor)
    peak = rates.conv_peak if w.op_class in CONV_CLASSES else rates.other_peak
    return roofline_time(
        batch * w.flops,
        batch * w.io_bytes + weights,
        w.kernels,
        peak_flops=peak,
        memory_bandwidth=rates.bandwidth,
        compute_efficiency=rates.compute_efficiency * CLASS_EFFICIENCY[w.op_class][w.backward],
        memory_efficiency=1.0,  # ``rates.bandwidth`` is already the achieved bandwidth
        kernel_overhead_s=rates.kernel_overhead_s,
    )
