"""Measure a device's calibration: one probe operation per class, timed over sizes.

Every probe is a single operation of its class, timed forward (the op) and backward
(``torch.autograd.grad`` of its output, so only that op's backward kernels run). Work per
kernel is counted as the graph extractor counts it (:mod:`hetplan.graph.trace`; the probe's
counts are checked against a trace of the same op in the tests):

* ``matmul``: ``x @ W``, ``x`` of ``m x k`` rows over a fixed ``k x n`` weight, ``m`` swept
  (a linear layer over a growing micro-batch); forward ``2mkn`` FLOPs in 1 kernel, backward
  2 kernels (input and weight gradients) of ``2mkn`` each;
* ``conv``/``conv_grouped``: a 3x3 convolution (dense; depthwise), batch swept; forward
  ``2 N C_out H W (C_in / groups) 9`` FLOPs, backward 1 ``convolution_backward`` doing twice
  that (input and weight gradients);
* ``attention``: fused scaled-dot-product attention, batch swept; FLOPs as torch's counter
  counts the flash kernel (as the graph traces it);
* ``memory``: an elementwise product ``x * y``, elements swept; forward reads 2 and writes 1
  tensor, backward 2 such kernels (one per input gradient).
"""

from __future__ import annotations

import datetime
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch.nn import functional as F  # noqa: N812

from hetplan.cost.calibration import Calibration, RateCurve, RatePoint
from hetplan.profile.timing import clock_for, device_name

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Probe sizes. CPU sweeps stop where one kernel takes ~0.1 s on a few cores; GPU sweeps go
# to sizes where large kernels saturate the device.
MATMUL_WIDTH = {"cpu": 512, "cuda": 4096}  # k = n, elements
MATMUL_ROWS = (1, 4, 16, 64, 256, 1024)  # m, rows (x 4 more points on GPU: see _rows)
CONV_SHAPE = {"cpu": (64, 32), "cuda": (128, 56)}  # channels, spatial side
CONV_BATCHES = (1, 2, 4, 8, 16, 32)
ATTN_SHAPE = {"cpu": (4, 128, 64), "cuda": (16, 1024, 64)}  # heads, tokens, head dim
ATTN_BATCHES = (1, 2, 4, 8, 16)
MEMORY_ELEMENTS = tuple(4**e for e in range(5, 13))  # 1 Ki .. 16 Mi elements
# FLOPs of fused attention as torch's counter counts the flash kernel the graph traces
# (torch.utils.flop_counter sdpa formulas; checked in the tests): forward QK^T and PV,
# 2 b h s^2 d each; backward 2.5x (dQ, dK, dV, dP and the recomputed scores).
ATTN_FWD_FLOPS = 4  # FLOPs per (batch x head x query x key x head-dim) element
ATTN_BWD_RATIO = 2.5  # backward FLOPs / forward FLOPs
GPU_EXTRA = 4  # on GPUs every batch/row sweep goes 4x, 16x further (bigger kernels saturate later)
# Floor of a backward time net of the engine's per-call cost, as a share of the gross time:
# noise must not make a kernel free.
MIN_NET_SHARE = 0.1  # dimensionless


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One size of one class: how to run it and how much work its kernels do."""

    run: Callable[[], torch.Tensor]
    inputs: tuple[torch.Tensor, ...]
    fwd_work: float
    """FLOPs (bytes for ``memory``) per forward kernel."""
    fwd_kernels: int
    bwd_work: float
    bwd_kernels: int


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


def _rows(dev: torch.device, base: tuple[int, ...]) -> tuple[int, ...]:
    if dev.type != "cuda":
        return base
    return (*base, *(base[-1] * GPU_EXTRA**i for i in (1, 2)))


def matmul_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    width = MATMUL_WIDTH[_kind(dev)]
    w = _t((width, width), dtype, dev)
    for m in _rows(dev, MATMUL_ROWS):
        x = _t((m, width), dtype, dev)
        flops = 2.0 * m * width * width
        yield Probe(
            run=functools.partial(torch.matmul, x, w),
            inputs=(x, w),
            fwd_work=flops,
            fwd_kernels=1,
            bwd_work=flops,
            bwd_kernels=2,
        )


def conv_probes(dev: torch.device, dtype: torch.dtype, grouped: bool) -> Iterator[Probe]:
    channels, side = CONV_SHAPE[_kind(dev)]
    groups = channels if grouped else 1
    w = _t((channels, channels // groups, 3, 3), dtype, dev)
    for n in _rows(dev, CONV_BATCHES):
        x = _t((n, channels, side, side), dtype, dev)
        flops = 2.0 * n * channels * side * side * (channels // groups) * 9
        yield Probe(
            run=functools.partial(F.conv2d, x, w, padding=1, groups=groups),
            inputs=(x, w),
            fwd_work=flops,
            fwd_kernels=1,
            bwd_work=2 * flops,
            bwd_kernels=1,
        )


def attention_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    heads, tokens, dim = ATTN_SHAPE[_kind(dev)]
    for n in _rows(dev, ATTN_BATCHES):
        q, k, v = (_t((n, heads, tokens, dim), dtype, dev) for _ in range(3))
        flops = ATTN_FWD_FLOPS * n * heads * tokens * tokens * dim
        yield Probe(
            run=functools.partial(F.scaled_dot_product_attention, q, k, v),
            inputs=(q, k, v),
            fwd_work=flops,
            fwd_kernels=1,
            bwd_work=ATTN_BWD_RATIO * flops,
            bwd_kernels=1,
        )


def memory_probes(dev: torch.device, dtype: torch.dtype) -> Iterator[Probe]:
    size = torch.empty((), dtype=dtype).element_size()
    for n in MEMORY_ELEMENTS if dev.type != "cuda" else (*MEMORY_ELEMENTS, 4**13, 4**14):
        x, y = _t((n,), dtype, dev), _t((n,), dtype, dev)
        nbytes = 3.0 * n * size  # two tensors read, one written
        yield Probe(
            run=functools.partial(torch.mul, x, y),
            inputs=(x, y),
            fwd_work=nbytes,
            fwd_kernels=1,
            bwd_work=nbytes,
            bwd_kernels=2,
        )


PROBES: dict[str, Callable[[torch.device, torch.dtype], Iterator[Probe]]] = {
    "matmul": matmul_probes,
    "conv": lambda d, t: conv_probes(d, t, grouped=False),
    "conv_grouped": lambda d, t: conv_probes(d, t, grouped=True),
    "attention": attention_probes,
    "memory": memory_probes,
}


def _timed(fn: Callable[[], object], dev: torch.device, settings: Settings) -> float:
    """Median seconds of ``fn`` over repeats lasting at least ``settings.min_time_s``."""
    clock = clock_for(dev)
    for _ in range(settings.warmup):
        fn()
    marks: list[tuple[object, object]] = []
    began = time.perf_counter()
    while len(marks) < settings.max_repeats and (
        len(marks) < settings.min_repeats or time.perf_counter() - began < settings.min_time_s
    ):
        start = clock.mark()
        fn()
        marks.append((start, clock.mark()))
        if dev.type == "cuda":
            clock.finish()  # the host loop must not run ahead of the measured kernels
    clock.finish()
    return statistics.median(clock.seconds(a, b) for a, b in marks)


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
    with torch.no_grad():
        fwd = _timed(probe.run, dev, settings)
    out = probe.run()
    grad = torch.ones_like(out)

    def backward() -> None:
        torch.autograd.grad(out, probe.inputs, grad, retain_graph=True)

    bwd = _timed(backward, dev, settings)
    bwd = max(bwd - engine_s, MIN_NET_SHARE * bwd)
    return fwd / probe.fwd_kernels, bwd / probe.bwd_kernels


def measure_class(
    op_class: str, dev: torch.device, dtype: str, settings: Settings
) -> tuple[RateCurve, RateCurve]:
    """The forward and backward curves of one class."""
    fwd_points, bwd_points = [], []
    engine_s = engine_overhead(dev, settings)
    for probe in PROBES[op_class](dev, DTYPES[dtype]):
        fwd_s, bwd_s = measure_probe(probe, dev, settings, engine_s)
        fwd_points.append(RatePoint(work=probe.fwd_work / probe.fwd_kernels, seconds=fwd_s))
        bwd_points.append(RatePoint(work=probe.bwd_work / probe.bwd_kernels, seconds=bwd_s))
    return (
        RateCurve(op_class=op_class, backward=False, points=_sorted(fwd_points)),
        RateCurve(op_class=op_class, backward=True, points=_sorted(bwd_points)),
    )


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
    )
