"""Analytical per-layer compute cost: a roofline with named efficiency factors.

Paper 000 prices a layer as core compute plus memory read/write time (bytes / bandwidth);
a roofline takes the larger of the two instead, since on GPUs the two overlap within a
kernel (Williams, Waterman & Patterson 2009, "Roofline"). Efficiencies and the per-kernel
launch overhead come from the device type (``DeviceType.compute_efficiency``,
``memory_efficiency``, ``kernel_overhead_s``), so a cluster file can override them.

In fp32, PyTorch runs convolutions on TF32 tensor cores by default but not matmuls, so a
layer's convolution FLOPs (``LayerInfo.fwd_conv_flops``/``bwd_conv_flops``) are priced at the
device's ``tf32`` peak where it has one (:class:`AnalyticalCompute`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hetplan.cluster.spec import Device
from hetplan.cost.autocast_loss import with_autocast_loss
from hetplan.cost.calibration import MEMORY_CLASS, Calibration, on_stream
from hetplan.cost.op_classes import ClassRates, pass_time
from hetplan.cost.roofline import roofline_time
from hetplan.cost.threads import (
    CATALOG_THREADS,
    device_threads,
    known_threads,
    nearest_threads,
    thread_note,
    thread_scale,
)
from hetplan.cost.types import LayerCost
from hetplan.graph.types import ModelGraph

FloatArray = npt.NDArray[np.float64]
__all__ = ["AnalyticalCompute", "gpipe_compute_time", "roofline_time"]

# Backward touches the weights twice: it reads W to form the input gradient and writes the
# weight gradient dW (same size). Gradient accumulation (grad += dW) would add a read.
FWD_WEIGHT_PASSES = 1  # weight-sized memory passes in forward (read W)
BWD_WEIGHT_PASSES = 2  # weight-sized memory passes in backward (read W, write dW)
# PyTorch's TF32 defaults for fp32 work on Ampere and later GPUs; source: PyTorch docs, "CUDA
# semantics", section "TensorFloat-32 (TF32) on Ampere (and later) devices".
CONV_TF32_DEFAULT = True  # torch.backends.cudnn.allow_tf32 default: fp32 convs run as TF32
MATMUL_TF32_DEFAULT = False  # torch.backends.cuda.matmul.allow_tf32 default: matmuls stay fp32
# Tensor cores run fp16 and bf16 at one rate on Ampere and later GPUs (equal peaks in the
# catalog, from NVIDIA's data sheets): where a type has no fp16 calibration but a bf16 one and
# its catalog peaks are equal, fp16 is priced on the bf16 curves (issue 30; before, fp16 fell
# back to the catalog: gpt2 fp16 on the H100 predicted 28.8 ms, measured 62.4 ms).
SAME_RATE_DTYPE = {"fp16": "bf16"}
# Entries kept by one AnalyticalCompute instance before it starts over (bounds memory).
CACHE_ENTRIES = 4096


def gpipe_compute_time(t_seq: float, stages: int, micro_batches: int) -> float:
    """Paper 003 Eq. 6.1 (GPipe): ``T_seq (W + m - 1) / (W m)`` for ``W`` balanced stages and
    ``m`` micro-batches, ``T_seq`` the sequential time of the whole batch: ``W - 1`` fill/drain
    steps around ``m`` steps of ``T_seq / (W m)`` each."""
    return t_seq * (stages + micro_batches - 1) / (stages * micro_batches)


@dataclass(frozen=True)
class _GraphArrays:
    """Per-layer figures of a graph as arrays (built once per graph)."""

    fwd_flops: FloatArray
    bwd_flops: FloatArray
    fwd_conv: FloatArray
    bwd_conv: FloatArray
    fwd_io: FloatArray
    bwd_io: FloatArray
    param_bytes: FloatArray
    fwd_kernels: FloatArray
    bwd_kernels: FloatArray

    @classmethod
    def of(cls, graph: ModelGraph) -> _GraphArrays:
        def col(attr: str) -> FloatArray:
            return np.array([float(getattr(layer, attr)) for layer in graph.layers])

        return cls(
            fwd_flops=col("fwd_flops"),
            bwd_flops=col("bwd_flops"),
            fwd_conv=col("fwd_conv_flops"),
            bwd_conv=col("bwd_conv_flops"),
            fwd_io=col("fwd_io_bytes"),
            bwd_io=col("bwd_io_bytes"),
            param_bytes=col("param_bytes"),
            fwd_kernels=col("fwd_kernels"),
            bwd_kernels=col("bwd_kernels"),
        )


class AnalyticalCompute:
    """Roofline pricing of every layer (``ComputeModel`` with source ``analytical``).

    Per layer and pass, for a micro-batch of ``b`` samples on device ``d``::

        fwd = (max(b F_f / (P eff_c), (b IO_f + 1 W) / (BW eff_m)) + K_f o) / speed
        bwd = (max(b F_b / (P eff_c), (b IO_b + 2 W) / (BW eff_m)) + K_b o) / speed

    with ``P`` the peak FLOP/s for ``dtype``, ``W`` the layer's parameter bytes (forward
    reads the weights once; backward reads them and writes their gradients), ``K`` kernels,
    ``o`` the per-kernel overhead, ``speed`` the device's share of its type. A CPU device
    running ``n`` threads (``cpus:``) is further timed ``S(m) / S(n)`` of its type's figures
    taken at ``m`` threads (one for the catalog's; Amdahl's law, :mod:`hetplan.cost.threads`).

    In fp32 on a device type with a ``tf32`` peak ``P_tf32``, the compute term splits the
    FLOPs by operator class: ``b (C / (P_c eff_c) + (F - C) / (P_o eff_c))`` with ``C`` the
    layer's convolution FLOPs, ``P_c = P_tf32`` if ``conv_tf32`` (PyTorch's default,
    :data:`CONV_TF32_DEFAULT`) else ``P``, and ``P_o = P_tf32`` if ``matmul_tf32``
    (default :data:`MATMUL_TF32_DEFAULT`, False) else ``P``. Other dtypes and devices without
    a ``tf32`` peak (CPUs) use ``b F / (P eff_c)``.

    Results are cached per (graph, device figures, batch): the planner asks for the same
    pairs many times. Graphs are treated as immutable (they are frozen dataclasses).
    """

    def __init__(
        self,
        dtype: str = "fp32",
        *,
        conv_tf32: bool = CONV_TF32_DEFAULT,
        matmul_tf32: bool = MATMUL_TF32_DEFAULT,
        calibrations: Iterable[Calibration] = (),
    ) -> None:
        self.dtype = dtype
        self.conv_tf32 = conv_tf32
        self.matmul_tf32 = matmul_tf32
        self.calibrations: dict[str, list[Calibration]] = {}
        """Per device type name, its calibrations in this dtype, oldest first (pass them sorted:
        the newest wins among equals), as kernels issued back to back see them (a GPU's
        per-call floor taken out: :func:`hetplan.cost.calibration.on_stream`)."""
        self.same_rate: dict[str, list[Calibration]] = {}
        """Per device type, calibrations of :data:`SAME_RATE_DTYPE`'s dtype, used where the
        type has none in ``dtype`` and its catalog peaks of both are equal."""
        for c in calibrations:
            if c.dtype == dtype:
                self.calibrations.setdefault(c.device_type, []).append(on_stream(c))
            elif c.dtype == SAME_RATE_DTYPE.get(dtype):
                self.same_rate.setdefault(c.device_type, []).append(on_stream(c))
        self._arrays: dict[int, tuple[ModelGraph, _GraphArrays]] = {}
        self._costs: dict[tuple[object, ...], list[LayerCost]] = {}
        # The graphs ``_costs`` holds costs of, by id(): kept so that an id is never reused.
        self._graphs: dict[int, ModelGraph] = {}

    def _graph_arrays(self, graph: ModelGraph) -> _GraphArrays:
        # Keyed by id(); the graph is kept in the value so its id cannot be reused.
        hit = self._arrays.get(id(graph))
        if hit is None or hit[0] is not graph:
            hit = (graph, _GraphArrays.of(graph))
            self._arrays[id(graph)] = hit
        return hit[1]

    def calibration(self, device: Device) -> tuple[Calibration | None, int]:
        """The device type's calibration that prices the device, and the thread count its
        figures stand for. A GPU's: the newest. A CPU device's (``cost.threads``): the newest
        taken at the thread count nearest its own; without any, the catalog's one core."""
        cals = self.calibrations.get(device.type.name) or self._same_rate(device)
        want = device_threads(device)
        if want is None:
            return (cals[-1] if cals else None), CATALOG_THREADS
        if not cals:
            return None, CATALOG_THREADS
        have = nearest_threads({known_threads(c.threads) for c in cals}, want)
        return [c for c in cals if known_threads(c.threads) == have][-1], have

    def _same_rate(self, device: Device) -> list[Calibration]:
        other = SAME_RATE_DTYPE.get(self.dtype)
        if other is None or device.type.flops(self.dtype) != device.type.flops(other):
            return []
        return self.same_rate.get(device.type.name, [])

    def time_scale(self, device: Device) -> float:
        """Factor on the device type's times: its thread count's against the figures' (CPU
        devices, ``cost.threads``), over its speed share."""
        want = device_threads(device)
        if want is None:
            return 1.0 / device.speed
        return thread_scale(self.calibration(device)[1], want) / device.speed

    def class_rates(self, device: Device) -> ClassRates:
        """What prices the device's kernels class by class (``cost.op_classes``)."""
        t = device.type
        cal = self.calibration(device)[0]
        mem = cal.curve(MEMORY_CLASS, False) if cal is not None else None
        conv_peak, other_peak = self.peaks(device)
        return ClassRates(
            calibration=cal,
            conv_peak=conv_peak,
            other_peak=other_peak,
            compute_efficiency=t.compute_efficiency,
            bandwidth=mem.best_rate() if mem else t.memory_bandwidth * t.memory_efficiency,
            kernel_overhead_s=t.kernel_overhead_s,
        )

    def source(self, device: Device) -> str:
        """``calibrated on <type>`` where the device type has a calibration, else
        ``analytical``; on a CPU device, with the thread counts where either is not one
        (``calibrated on cpu (1 thread, scaled to 6 threads)``, ``cost.threads``)."""
        cal, have = self.calibration(device)
        base = f"calibrated on {device.type.name}" if cal is not None else "analytical"
        if cal is not None and cal.dtype != self.dtype:
            base += f" ({cal.dtype} curves: same peak)"
        want = device_threads(device)
        return base if want is None else base + thread_note(have, want)

    def layer_times(
        self, graph: ModelGraph, device: Device, batch: float
    ) -> tuple[FloatArray, FloatArray]:
        """Forward and backward seconds of every layer as arrays: class by class where the
        graph records its kernels' classes (``cost.op_classes``), else the layer's roofline."""
        if any(layer.work for layer in graph.layers):
            return self._class_times(graph, device, batch)
        return self._roofline_times(graph, device, batch)

    def _class_times(
        self, graph: ModelGraph, device: Device, batch: float
    ) -> tuple[FloatArray, FloatArray]:
        rates = self.class_rates(device)
        # Identical layers (a transformer's blocks) have equal work: each priced once.
        memo: dict[tuple[object, ...], tuple[float, float]] = {}
        out = []
        for x in (with_autocast_loss(layer, graph.dtype) for layer in graph.layers):
            key = (x.work, x.param_bytes)
            hit = memo.get(key)
            if hit is None:
                hit = memo[key] = (
                    pass_time(x, False, batch, FWD_WEIGHT_PASSES, rates),
                    pass_time(x, True, batch, BWD_WEIGHT_PASSES, rates),
                )
            out.append(hit)
        times = np.array(out, dtype=np.float64).reshape(len(out), 2) * self.time_scale(device)
        cal = rates.calibration
        if cal is not None and cal.issue_s is not None and not cal.synchronous:
            # The host issues ahead of a GPU: a layer takes at least its kernels' issue time.
            kernels = np.array([[x.fwd_kernels, x.bwd_kernels] for x in graph.layers], float)
            times = np.maximum(times, kernels.reshape(times.shape) * cal.issue_s)
        return times[:, 0].copy(), times[:, 1].copy()

    def _roofline_times(
        self, graph: ModelGraph, device: Device, batch: float
    ) -> tuple[FloatArray, FloatArray]:
        t = device.type
        a = self._graph_arrays(graph)
        conv_peak, other_peak = self.peaks(device)
        conv_peak *= t.compute_efficiency
        other_peak *= t.compute_efficiency
        bw = t.memory_bandwidth * t.memory_efficiency
        scale = self.time_scale(device)

        def one(
            flops: FloatArray, conv: FloatArray, io: FloatArray, passes: int, kernels: FloatArray
        ) -> FloatArray:
            if conv_peak == other_peak:  # one rate for every op: the plain roofline
                compute = batch * flops / other_peak
            else:
                compute = batch * (conv / conv_peak + (flops - conv) / other_peak)
            memory = (batch * io + passes * a.param_bytes) / bw
            out: FloatArray = (np.maximum(compute, memory) + kernels * t.kernel_overhead_s) * scale
            return out

        fwd = one(a.fwd_flops, a.fwd_conv, a.fwd_io, FWD_WEIGHT_PASSES, a.fwd_kernels)
        bwd = one(a.bwd_flops, a.bwd_conv, a.bwd_io, BWD_WEIGHT_PASSES, a.bwd_kernels)
        return fwd, bwd

    def peaks(self, device: Device) -> tuple[float, float]:
        """Peak FLOP/s (before efficiency) for convolution and for all other FLOPs."""
        peak = device.type.flops(self.dtype)
        tf32 = device.type.peak_flops.get("tf32")
        if self.dtype != "fp32" or tf32 is None:
            return peak, peak
        return (tf32 if self.conv_tf32 else peak), (tf32 if self.matmul_tf32 else peak)

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        """Cost of every layer of ``graph`` on ``device`` for a micro-batch of ``batch``."""
        t = device.type
        key = (
            id(graph),
            t.name,
            self.peaks(device),
            t.memory_bandwidth,
            t.compute_efficiency,
            t.memory_efficiency,
            t.kernel_overhead_s,
            device.speed,
            device_threads(device),
            batch,
        )
        hit = self._costs.get(key)
        if hit is not None and self._graphs.get(id(graph)) is graph:
            return list(hit)
        fwd, bwd = self.layer_times(graph, device, batch)
        source = self.source(device)
        costs = [
            LayerCost(fwd_s=float(f), bwd_s=float(b), source=source)
            for f, b in zip(fwd.tolist(), bwd.tolist(), strict=True)
        ]
        if len(self._costs) >= CACHE_ENTRIES:
            self._costs.clear()
            self._graphs.clear()
        self._costs[key] = costs
        self._graphs[id(graph)] = graph
        return list(costs)
