"""Measure a device's calibration: one probe operation per class, timed over sizes.

Every probe is a single operation of its class, timed forward (the op) and backward
(``torch.autograd.grad`` of its output, so only that op's backward kernels run). Work per
kernel is counted as the graph extractor counts it (:mod:`hetplan.graph.trace`; the probe's
counts are checked against a trace of the same op in the tests):

* ``matmul``: ``x @ W``, ``x`` of ``m x k`` over a ``k x k`` weight (a linear layer over a
  micro-batch), ``m`` and ``k`` swept; forward ``2mk^2`` FLOPs in 1 kernel, backward 2 kernels
  (input and weight gradients) of ``2mk^2`` each;
* ``conv``/``conv_grouped``: a 3x3 convolution (dense; depthwise), batch, channels and
  resolution swept; forward
  ``2 N C_out H W (C_in / groups) 9`` FLOPs, backward 1 ``convolution_backward`` doing twice
  that (input and weight gradients);
* ``attention``: fused scaled-dot-product attention, batch and sequence swept; FLOPs as
  torch's counter counts the flash kernel (as the graph traces it);
* ``memory``: a residual block's tail, ``relu(batch_norm(x) + r)``, elements swept; its
  kernels and the bytes they move counted by a dispatch mode as the tracer counts them (every
  kernel's input and output tensors).
"""

from __future__ import annotations

import datetime
import functools
import math
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812
from torch.utils._python_dispatch import TorchDispatchMode

from hetplan.cost.calibration import PER_CALL, STREAM, Calibration, RateCurve, RatePoint
from hetplan.graph.ops import is_kernel, tensors
from hetplan.profile.timing import Clock, clock_for, device_name

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Probe sizes, from launch-bound kernels (~1e4 FLOPs) up: CPU sweeps stop where one kernel
# takes ~0.1 s on one core, GPU sweeps go on to sizes where big kernels saturate the device.
# Shapes are those of models' layers: a linear layer over a growing number of rows, square
# 3x3 convolutions of growing width and resolution, attention over growing sequences.
# Probe families: within one, the kernels' intensity (FLOPs per byte of activations moved)
# is fixed and the size grows; families differ in intensity (a linear layer's width, a
# convolution's channels, attention's sequence length), the other axis efficiency follows.
# CPU sizes stop near 1 GFLOP per kernel (~10 ms on one core), GPU ones near 1 TFLOP.
CUBLAS_CONTEXT_WARNING = "Attempting to run cuBLAS, but there was no current CUDA context"
"""torch's one-time warning when the autograd engine's device thread makes its first cuBLAS
call without the primary context current; torch then retains that context itself and runs on
(aten/src/ATen/cuda/CublasHandlePool.cpp, pytorch PR 120131): nothing for a user to act on."""
MAX_WORK = {"cpu": 1.5e9, "cuda": 2e12}  # FLOPs per forward kernel
MATMUL_WIDTHS = {"cpu": (64, 256, 512, 1024), "cuda": (256, 1024, 4096, 8192)}  # k = n
MATMUL_ROWS = {"cpu": (1, 8, 64, 512), "cuda": (1, 64, 1024, 16384)}  # m
CONV_CHANNELS = {"cpu": (4, 8, 16, 32, 64, 128, 256, 512), "cuda": (4, 16, 64, 128, 256, 512)}
CONV_SHAPES = {  # (batch, spatial side) of every conv family
    "cpu": ((1, 4), (1, 8), (1, 16), (8, 16), (8, 32)),
    "cuda": ((1, 8), (8, 16), (32, 32), (64, 56), (256, 56)),
}
GROUPED_SIZES = {  # (batch, channels, spatial side); depthwise: one family (fixed intensity)
    "cpu": ((1, 8, 8), (1, 32, 16), (1, 64, 32), (4, 64, 32), (16, 128, 32), (32, 128, 32)),
    "cuda": ((1, 32, 16), (1, 64, 32), (16, 128, 32), (64, 256, 56), (256, 256, 56)),
}
ATTN_TOKENS = {"cpu": (32, 128, 512), "cuda": (128, 512, 2048)}
ATTN_BATCHES = {"cpu": (1, 4, 16), "cuda": (1, 8, 64)}
ATTN_HEADS, ATTN_DIM = 4, 64
MEMORY_CHANNELS = 64  # channels of the memory probe's activations
MEMORY_ELEMENTS = {  # elements of the memory probe's activations
    "cpu": tuple(4**e for e in range(5, 13)),  # 1 Ki .. 16 Mi
    "cuda": tuple(4**e for e in range(5, 15)),  # 1 Ki .. 256 Mi
}
# FLOPs of fused attention as torch's counter counts the flash kernel the graph traces
# (torch.utils.flop_counter sdpa formulas; checked in the tests): forward QK^T and PV,
# 2 b h s^2 d each; backward 2.5x (dQ, dK, dV, dP and the recomputed scores).
ATTN_FWD_FLOPS = 4  # FLOPs per (batch x head x query x key x head-dim) element
ATTN_BWD_RATIO = 2.5  # backward FLOPs / forward FLOPs
# Floor of a backward time net of the engine's per-call cost, as a share of the gross time:
# noise must not make a kernel free.
MIN_NET_SHARE = 0.1  # dimensionless


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One size of one class: how to run it and how much work its kernels do."""

    run: Callable[[], torch.Tensor]
    inputs: tuple[torch.Tensor, ...]
    fwd_work: float
    """FLOPs (bytes moved for ``memory``) of the forward pass, all its kernels."""
    fwd_kernels: int
    bwd_work: float
    bwd_kernels: int
    intensity: float = 0.0
    """FLOPs per byte of activations of the forward kernel (weights left out, as
    ``OpWork.io_bytes`` counts them): the family's shape; both passes' curves are filed
    under it (a backward's own bytes depend on which gradients are needed)."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """How long to time each probe."""

    min_time_s: float = 0.05
    """Keep repeating a measurement until this much time has passed (and ``min_repeats``)."""
    min_repeats: int = 3
    max_repeats: int = 200
    warmup: int = 2


def _t(shape: tuple[int, ...], dtype: torch.dtype, dev: torch.device) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=dev, requires_grad=True)


def _kind(dev: torch.device) -> str:
    return "cuda" if dev.type == "cuda" else "cpu"


def matmul_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    size = _size(dtype)
    for width in MATMUL_WIDTHS[_kind(dev)]:
        for m in MATMUL_ROWS[_kind(dev)]:
            flops = 2.0 * m * width * width
            if flops > MAX_WORK[_kind(dev)]:
                continue
            x, w = _t((m, width), dtype, dev), _t((width, width), dtype, dev)
            act = m * width * size  # one m x k activation, bytes
            yield Probe(
                run=functools.partial(torch.matmul, x, w),
                inputs=(x, w),
                fwd_work=flops,
                fwd_kernels=1,
                bwd_work=2 * flops,  # dx = dy W^T and dW = x^T dy, each as the forward
                bwd_kernels=2,
                intensity=flops / (2 * act),  # reads x, writes y
            )


def conv_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    for channels in CONV_CHANNELS[_kind(dev)]:
        for n, side in CONV_SHAPES[_kind(dev)]:
            probe = _conv(dev, dtype, n, channels, side, groups=1)
            if probe.fwd_work <= MAX_WORK[_kind(dev)]:
                yield probe


def grouped_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    for n, channels, side in GROUPED_SIZES[_kind(dev)]:
        yield _conv(dev, dtype, n, channels, side, groups=channels)


def _conv(
    dev: torch.device, dtype: torch.dtype, n: int, channels: int, side: int, groups: int
) -> Probe:
    w = _t((channels, channels // groups, 3, 3), dtype, dev)
    x = _t((n, channels, side, side), dtype, dev)
    flops = 2.0 * n * channels * side * side * (channels // groups) * 9
    act = n * channels * side * side * _size(dtype)  # input = output size (padding 1)
    return Probe(
        run=functools.partial(F.conv2d, x, w, padding=1, groups=groups),
        inputs=(x, w),
        fwd_work=flops,
        fwd_kernels=1,
        bwd_work=2 * flops,
        bwd_kernels=1,
        intensity=flops / (2 * act),  # reads x, writes y
    )


def attention_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    for tokens in ATTN_TOKENS[_kind(dev)]:
        for n in ATTN_BATCHES[_kind(dev)]:
            flops = ATTN_FWD_FLOPS * n * ATTN_HEADS * tokens * tokens * ATTN_DIM
            if flops > MAX_WORK[_kind(dev)]:
                continue
            q, k, v = (_t((n, ATTN_HEADS, tokens, ATTN_DIM), dtype, dev) for _ in range(3))
            act = n * ATTN_HEADS * tokens * ATTN_DIM * _size(dtype)  # one of q, k, v, out
            yield Probe(
                run=functools.partial(F.scaled_dot_product_attention, q, k, v),
                inputs=(q, k, v),
                fwd_work=flops,
                fwd_kernels=1,
                bwd_work=ATTN_BWD_RATIO * flops,
                bwd_kernels=1,
                intensity=flops / (4 * act),  # reads q, k, v, writes out
            )


def _size(dtype: torch.dtype) -> int:
    return int(torch.empty((), dtype=dtype).element_size())


def memory_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    for n in MEMORY_ELEMENTS[_kind(dev)]:
        side = max(int(math.sqrt(n / MEMORY_CHANNELS)), 1)
        x = _t((1, MEMORY_CHANNELS, side, side), dtype, dev)
        r = _t((1, MEMORY_CHANNELS, side, side), dtype, dev)
        run = functools.partial(_norm_add_relu, x, r)
        fwd, bwd = count_kernels(run, (x, r))
        yield Probe(
            run=run,
            inputs=(x, r),
            fwd_work=fwd.io_bytes,
            fwd_kernels=fwd.kernels,
            bwd_work=bwd.io_bytes,
            bwd_kernels=bwd.kernels,
        )


def _norm_add_relu(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The memory-bound kernels of a residual block's tail (normalisation, add, activation)."""
    return F.relu(F.batch_norm(x, None, None, training=True) + r)


@dataclass
class KernelCount:
    """Kernels launched and bytes they read and wrote, as the graph tracer counts them."""

    kernels: int = 0
    io_bytes: float = 0.0


class _Counter(TorchDispatchMode):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.count = KernelCount()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if is_kernel(func):
            self.count.kernels += 1
            self.count.io_bytes += sum(t.nbytes for t in tensors((args, kwargs, out)))
        return out


def count_kernels(
    run: Callable[[], torch.Tensor], inputs: tuple[torch.Tensor, ...]
) -> tuple[KernelCount, KernelCount]:
    """Forward and backward kernels of ``run`` and their bytes (no parameters involved)."""
    with _Counter() as fwd:
        out = run()
    with _Counter() as bwd:
        torch.autograd.grad(out, inputs, torch.ones_like(out))
    return fwd.count, bwd.count


PROBES: dict[str, Callable[[torch.device, torch.dtype], Iterator[Probe]]] = {
    "matmul": matmul_probes,
    "conv": conv_probes,
    "conv_grouped": grouped_probes,
    "attention": attention_probes,
    "memory": memory_probes,
}


STREAM_CALLS = 20
"""Calls of a probe issued back to back per timed batch on a GPU: the device runs them as a
training step runs its kernels, and the first call's launch is a twentieth of the figure."""
ISSUE_CALLS = 200
"""Calls timed on the host to measure the issue cost of one kernel."""


def _timed(fn: Callable[[], object], dev: torch.device, settings: Settings) -> float:
    """Median seconds of one call of ``fn`` (:func:`time_calls`; back to back on a GPU)."""
    return time_calls(fn, clock_for(dev), settings, stream=dev.type == "cuda")


def time_calls(
    fn: Callable[[], object], clock: Clock, settings: Settings, *, stream: bool
) -> float:
    """Median seconds of one call of ``fn`` over repeats lasting at least
    ``settings.min_time_s``. With ``stream``, each repeat issues :data:`STREAM_CALLS` calls
    back to back between two marks (the device's own time per call, as training sees it);
    without, one call (on a GPU its launch and the idle device waiting for it are in the
    figure: the ~28 us floor of the per-call calibrations in ``shared/gpu-truth``)."""
    calls = STREAM_CALLS if stream else 1
    for _ in range(settings.warmup):
        fn()
    marks: list[tuple[object, object]] = []
    began = time.perf_counter()
    while len(marks) < settings.max_repeats and (
        len(marks) < settings.min_repeats or time.perf_counter() - began < settings.min_time_s
    ):
        start = clock.mark()
        for _ in range(calls):
            fn()
        marks.append((start, clock.mark()))
        clock.finish()  # the host loop must not run ahead of the measured kernels
    return statistics.median(clock.seconds(a, b) for a, b in marks) / calls


def issue_cost(dev: torch.device) -> float:
    """Host seconds to issue one kernel with nothing to wait for: :data:`ISSUE_CALLS` calls of
    a one-element in-place multiply, timed on the host clock, the device synchronised first."""
    x = torch.zeros(1, device=dev)
    clock = clock_for(dev)
    clock.finish()
    began = time.perf_counter()
    for _ in range(ISSUE_CALLS):
        x.mul_(1.0)
    elapsed = time.perf_counter() - began
    clock.finish()
    return elapsed / ISSUE_CALLS


def engine_overhead(dev: torch.device, settings: Settings) -> float:
    """Seconds one ``torch.autograd.grad`` call costs besides its kernels: the call through
    a view, whose backward launches none. A training step starts the engine once for all
    layers, so each probe's backward time is measured net of it."""
    x = torch.zeros(1, device=dev, requires_grad=True)
    out = x.view_as(x)
    grad = torch.ones_like(out)
    return _timed(lambda: torch.autograd.grad(out, x, grad, retain_graph=True), dev, settings)


def measure_probe(
    probe: Probe, dev: torch.device, settings: Settings, engine_s: float = 0.0
) -> tuple[float, float]:
    """Seconds per forward and per backward kernel of one probe (backward net of
    ``engine_s``, the engine's per-call cost; at least :data:`MIN_NET_SHARE` of the time)."""
    fwd = _timed(probe.run, dev, settings)  # with autograd recording, as training runs it
    out = probe.run()
    grad = torch.ones_like(out)

    def backward() -> None:
        torch.autograd.grad(out, probe.inputs, grad, retain_graph=True)

    bwd = _timed(backward, dev, settings)
    bwd = max(bwd - engine_s, MIN_NET_SHARE * bwd)
    return fwd / probe.fwd_kernels, bwd / probe.bwd_kernels


def measure_class(
    op_class: str, dev: torch.device, dtype: str, settings: Settings
) -> list[RateCurve]:
    """The class's curves: per family of probes of one intensity, forward and backward."""
    points: dict[tuple[bool, float], list[RatePoint]] = {}
    engine_s = engine_overhead(dev, settings)
    for probe in PROBES[op_class](dev, DTYPES[dtype]):
        fwd_s, bwd_s = measure_probe(probe, dev, settings, engine_s)
        for backward, work, seconds, intensity in (
            (False, probe.fwd_work / probe.fwd_kernels, fwd_s, probe.intensity),
            (True, probe.bwd_work / probe.bwd_kernels, bwd_s, probe.intensity),
        ):
            key = (backward, round(intensity, 6))
            points.setdefault(key, []).append(RatePoint(work=work, seconds=seconds))
    return [
        RateCurve(op_class=op_class, backward=b, intensity=i, points=_sorted(pts))
        for (b, i), pts in sorted(points.items())
    ]


def _sorted(points: list[RatePoint]) -> tuple[RatePoint, ...]:
    return tuple(sorted(points, key=lambda p: p.work))


def calibrate(
    device_type: str,
    dev: torch.device,
    dtype: str,
    classes: tuple[str, ...],
    settings: Settings | None = None,
    on_class: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure ``classes`` on ``dev`` in ``dtype`` and file them under ``device_type``."""
    settings = settings or Settings()
    curves: list[RateCurve] = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CUBLAS_CONTEXT_WARNING)
        for op_class in classes:
            if on_class is not None:
                on_class(op_class)
            curves.extend(measure_class(op_class, dev, dtype, settings))
    return Calibration(
        device_type=device_type,
        device_name=device_name(dev),
        device=str(dev),
        dtype=dtype,
        threads=torch.get_num_threads(),
        curves=tuple(curves),
        timestamp=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        torch_version=torch.__version__,
        timing=STREAM if dev.type == "cuda" else PER_CALL,
        issue_s=issue_cost(dev),
    )
