"""Per-layer forward and backward time of a module, measured with hooks around real steps.

The hooks (:mod:`hetplan.profile.hooks`) time each layer; the step itself is bracketed so the
loss (forward and backward), the optimizer step and the unattributed rest are reported
separately. Warm-up steps run first (the first calls pay allocator and kernel-selection
start-up costs; the source papers measured after warm-up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hetplan.errors import InputError, SettingError
from hetplan.profile.fit import LinearFit, Stats, fit_linear, summarize
from hetplan.profile.hooks import LayerTimer, StepRecord, inplace_layers, resolve_layers
from hetplan.profile.timing import Clock, MemoryProbe, clock_for, memory_probe_for
from hetplan.profile.types import BatchTiming, LayerFit, LayerTiming, StepFit

__all__ = [
    "BatchFn",
    "LossFn",
    "StepSettings",
    "fit_layers",
    "fit_step",
    "inplace_layers",
    "measure_batch",
    "measure_batches",
    "resolve_layers",
]

LossFn = Callable[[Any], torch.Tensor]
"""Loss of the model's output (the target is captured by the closure)."""
BatchFn = Callable[[int], tuple[Any, LossFn]]
"""Batch size -> (model input, loss function) on the profiling device."""


@dataclass(frozen=True, kw_only=True)
class StepSettings:
    """How many steps to run and what a step includes."""

    warmup: int = 3
    """Untimed steps first: the source papers found the first iterations unstable."""
    steps: int = 10
    """Timed steps; medians and spreads are taken over these."""
    optimizer: str = "sgd"
    """Optimizer step to include: ``sgd``, ``momentum`` (SGD, momentum 0.9), ``adam`` or
    ``none`` (the plan's choices). Learning rate 0: the full cost, weights unchanged."""
    autocast: torch.dtype | None = None
    """Run forward and loss under ``torch.autocast`` with this dtype (mixed precision over
    fp32 weights, as ``hetplan train`` runs bf16/fp16 plans); None: plain."""

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.steps < 1:
            raise SettingError(f"need warmup >= 0 and steps >= 1 (got {self.warmup}, {self.steps})")
        if self.optimizer not in OPTIMIZERS:
            raise SettingError(
                f"optimizer {self.optimizer!r}: expected one of {', '.join(OPTIMIZERS)}"
            )


OPTIMIZERS = ("sgd", "momentum", "adam", "none")


def make_optimizer(name: str, params: list[nn.Parameter]) -> torch.optim.Optimizer | None:
    """The optimizer ``name`` over ``params`` with learning rate 0; None for ``none``."""
    if name == "none" or not params:
        return None
    if name == "adam":
        return torch.optim.Adam(params, lr=0.0)
    return torch.optim.SGD(params, lr=0.0, momentum=0.9 if name == "momentum" else 0.0)


@dataclass(frozen=True)
class _StepMarks:
    """Clock marks of one step: start, model done, loss done, backward done, end."""

    start: Any
    model: Any
    loss: Any
    backward: Any
    end: Any


@dataclass
class _Samples:
    """Per-layer sums for each timed step (a layer called twice adds up)."""

    n_layers: int
    fwd: list[list[float]] = field(default_factory=list)
    bwd: list[list[float]] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    loss_fwd: list[float] = field(default_factory=list)
    loss_bwd: list[float] = field(default_factory=list)
    optimizer: list[float] = field(default_factory=list)
    fwd_peak: list[int | None] = field(default_factory=list)
    bwd_peak: list[int | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.fwd_peak = [None] * self.n_layers
        self.bwd_peak = [None] * self.n_layers

    @staticmethod
    def _peak(peaks: list[int | None], i: int, value: int | None) -> None:
        if value is not None:
            peaks[i] = max(value, peaks[i] or 0)

    def add(self, rec: StepRecord, clock: Clock, m: _StepMarks) -> None:
        fwd, bwd = [0.0] * self.n_layers, [0.0] * self.n_layers
        for i, start, end, peak in rec.fwd:
            fwd[i] += clock.seconds(start, end)
            self._peak(self.fwd_peak, i, peak)
        ends = [mark for _, mark, _ in rec.bwd[1:]] + [m.backward]
        for (i, start, _), end in zip(rec.bwd, ends, strict=True):
            bwd[i] += clock.seconds(start, end)
        closing = [peak for _, _, peak in rec.bwd[1:]] + [rec.bwd_end_peak]
        for (i, _, _), peak in zip(rec.bwd, closing, strict=True):
            self._peak(self.bwd_peak, i, peak)
        self.fwd.append(fwd)
        self.bwd.append(bwd)
        self.step.append(clock.seconds(m.start, m.end))
        self.loss_fwd.append(clock.seconds(m.model, m.loss))
        # The loss's backward runs from the backward() call to the last layer's start.
        first_layer_bwd = rec.bwd[0][1] if rec.bwd else m.backward
        self.loss_bwd.append(clock.seconds(m.loss, first_layer_bwd))
        self.optimizer.append(clock.seconds(m.backward, m.end))


def measure_batch(
    module: nn.Module,
    inputs: Any,
    loss_fn: LossFn,
    layer_names: Sequence[str],
    *,
    device: torch.device,
    settings: StepSettings,
    batch: int,
    clock: Clock | None = None,
    memory: MemoryProbe | None = None,
) -> BatchTiming:
    """Time ``settings.steps`` training steps after ``settings.warmup`` untimed ones.

    ``clock`` and ``memory`` default to the device's (CUDA events and allocator peaks on GPU,
    ``perf_counter`` and no memory figures on CPU).
    """
    layers = resolve_layers(module, layer_names)
    clock = clock_for(device) if clock is None else clock
    memory = memory_probe_for(device) if memory is None else memory
    opt = make_optimizer(settings.optimizer, [p for p in module.parameters() if p.requires_grad])
    timer = LayerTimer(layers, clock, memory)
    samples = _Samples(len(layers))
    module.train()
    try:
        for step in range(settings.warmup + settings.steps):
            timer.start_step()
            start = clock.mark()
            if opt is not None:
                opt.zero_grad(set_to_none=True)
            with _autocast(device, settings.autocast):
                out = module(inputs)
                model_done = clock.mark()
                loss = loss_fn(out)
                loss_done = clock.mark()
            loss.backward()
            bwd_done = clock.mark()
            timer.end_backward()
            if opt is not None:
                opt.step()
            marks = _StepMarks(start, model_done, loss_done, bwd_done, clock.mark())
            clock.finish()
            if step >= settings.warmup:
                samples.add(timer.record, clock, marks)
    finally:
        timer.remove()
    return _summarize(batch, layer_names, samples)


def _autocast(device: torch.device, dtype: torch.dtype | None) -> Any:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _summarize(batch: int, names: Sequence[str], s: _Samples) -> BatchTiming:
    layers = tuple(
        LayerTiming(
            name=name,
            fwd=summarize([row[i] for row in s.fwd]),
            bwd=summarize([row[i] for row in s.bwd]),
            fwd_peak_bytes=s.fwd_peak[i],
            bwd_peak_bytes=s.bwd_peak[i],
        )
        for i, name in enumerate(names)
    )
    other = [step - sum(f) - sum(b) for step, f, b in zip(s.step, s.fwd, s.bwd, strict=True)]
    return BatchTiming(
        batch=batch,
        layers=layers,
        step=summarize(s.step),
        other=summarize(other),
        loss_fwd=summarize(s.loss_fwd),
        loss_bwd=summarize(s.loss_bwd),
        optimizer=summarize(s.optimizer),
    )


def measure_batches(
    module: nn.Module,
    make_batch: BatchFn,
    layer_names: Sequence[str],
    batch_sizes: Sequence[int],
    *,
    device: torch.device,
    settings: StepSettings,
) -> list[BatchTiming]:
    """:func:`measure_batch` at every size in ``batch_sizes`` (each with its own warm-up)."""
    if not batch_sizes or min(batch_sizes) < 1:
        raise InputError(f"batch sizes must be positive integers (got {list(batch_sizes)})")
    out = []
    for b in sorted(set(batch_sizes)):
        inputs, loss_fn = make_batch(b)
        out.append(
            measure_batch(
                module, inputs, loss_fn, layer_names, device=device, settings=settings, batch=b
            )
        )
    return out


def _fit(timings: Sequence[BatchTiming], pick: Callable[[BatchTiming], Stats]) -> LinearFit:
    return fit_linear([float(t.batch) for t in timings], [pick(t).median_s for t in timings])


def fit_layers(timings: Sequence[BatchTiming]) -> list[LayerFit]:
    """Per-layer ``t(b) = a + k*b`` through the medians of every batch size."""

    def layer_fit(i: int) -> LayerFit:
        return LayerFit(
            name=timings[0].layers[i].name,
            fwd=_fit(timings, lambda t: t.layers[i].fwd),
            bwd=_fit(timings, lambda t: t.layers[i].bwd),
        )

    return [layer_fit(i) for i in range(len(timings[0].layers))]


def fit_step(timings: Sequence[BatchTiming]) -> StepFit:
    """Fits of the loss, the optimizer step and the whole unattributed remainder."""
    return StepFit(
        loss=LayerFit(
            name="loss",
            fwd=_fit(timings, lambda t: t.loss_fwd),
            bwd=_fit(timings, lambda t: t.loss_bwd),
        ),
        optimizer=_fit(timings, lambda t: t.optimizer),
        other=_fit(timings, lambda t: t.other),
    )
