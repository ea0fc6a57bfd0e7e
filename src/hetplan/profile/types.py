"""Measured per-layer times: one batch size (:class:`BatchTiming`) and a whole profile.

All times in seconds, memory in bytes. A :class:`Profile` round-trips to JSON exactly through
:mod:`hetplan.serde`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hetplan.profile.fit import LinearFit, Stats

SOURCES = ("profiled", "written-back", "imported")
"""Where a profile's figures came from: ``hetplan profile``, ``hetplan train``'s write-back, or
``hetplan import-profile``."""


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """When and from how much data one batch size's figures were measured."""

    when: str
    """UTC time, ISO 8601 (of the latest run, for figures merged from several)."""
    steps: int
    """Timed steps behind the figures (summed over merged runs; 0: unknown, e.g. imported)."""
    spread: float | None
    """p90 / p10 of the timed step times (the largest of merged runs'); None: unknown."""
    runs: int = 1
    """Runs merged into the figures (write-back keeps a median over runs)."""


@dataclass(frozen=True, kw_only=True)
class LayerTiming:
    """One layer at one batch size: forward and backward time over the timed steps."""

    name: str
    """Module FQN."""
    fwd: Stats
    bwd: Stats
    fwd_peak_bytes: int | None = None
    """Largest peak allocation above the layer's entry level during its forward (CUDA only)."""
    bwd_peak_bytes: int | None = None
    """Same for its backward window (CUDA only)."""


@dataclass(frozen=True, kw_only=True)
class BatchTiming:
    """All layers at one batch size, plus the whole step to check the layers against."""

    batch: int
    layers: tuple[LayerTiming, ...]
    step: Stats
    """Whole training step: zero_grad, forward, loss, backward, optimizer step."""
    other: Stats
    """Step minus the layers' forward and backward (loss, optimizer, glue between layers)."""
    loss_fwd: Stats
    """The loss function's forward (part of ``other``)."""
    loss_bwd: Stats
    """From ``backward()`` to the last layer's backward start: the loss's backward (part of
    ``other``)."""
    optimizer: Stats
    """The optimizer step (part of ``other``)."""
    provenance: Provenance | None = None
    """None in files written before provenance was kept (see
    :func:`hetplan.profile.provenance.provenance_of`)."""


@dataclass(frozen=True, kw_only=True)
class LayerFit:
    """``t(b) = a + k*b`` for one layer's forward and backward (b: micro-batch size)."""

    name: str
    fwd: LinearFit
    bwd: LinearFit


@dataclass(frozen=True, kw_only=True)
class StepFit:
    """Fits of what a step spends outside the layers, over the batch size."""

    loss: LayerFit
    """The loss's forward and backward (the graph bills the loss to the last layer)."""
    optimizer: LinearFit
    other: LinearFit
    """Everything outside the layers: loss, optimizer, zero_grad, glue between layers."""


@dataclass(frozen=True, kw_only=True)
class Profile:
    """Measured per-layer costs of one model on one device type."""

    device_type: str
    """Cluster catalog name the profile is filed under (e.g. ``cpu``, ``A100-40GB``)."""
    device_name: str
    """Hardware it was taken on (GPU or CPU model string)."""
    device: str
    """torch device string used (``cpu``, ``cuda:0``)."""
    model: str
    """Model name as the graph names it (zoo name or source)."""
    dataset: str | None
    input_shape: tuple[int, ...]
    """Shape of one sample, without the batch dimension."""
    dtype: str
    """fp32, fp16 or bf16."""
    tp: int = 1
    """Tensor-parallel degree the layers ran at: times are one rank's share of a TP group
    (1: one device; absent from files written before TP profiles existed)."""
    threads: int
    """``torch.get_num_threads()`` while profiling."""
    cpus: tuple[int, ...] | None
    """CPU cores the process was pinned to, if any."""
    warmup: int
    """Untimed steps run first at every batch size."""
    steps: int
    """Timed steps at every batch size."""
    optimizer: str
    """Optimizer whose step was timed (sgd, momentum, adam or none)."""
    batch_sizes: tuple[int, ...]
    batches: tuple[BatchTiming, ...]
    fits: tuple[LayerFit, ...]
    """Per-layer fit over the batch sizes, in layer order."""
    step_fit: StepFit
    """Fits of the loss, optimizer and unattributed remainder."""
    timestamp: str
    """UTC time, ISO 8601."""
    torch_version: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    source: str | None = None
    """One of :data:`SOURCES`; None in files written before provenance was kept (see
    :func:`hetplan.profile.provenance.source_of`)."""
    history: tuple[BatchTiming, ...] = ()
    """Written back: every kept run's batch, oldest first; ``batches`` holds their
    steps-weighted median per size (:mod:`hetplan.profile.merge`)."""

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tp: must be >= 1 (got {self.tp})")
        if self.source is not None and self.source not in SOURCES:
            raise ValueError(f"source: {self.source!r}; expected one of {', '.join(SOURCES)}")

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fits)

    def fit(self, name: str) -> LayerFit:
        for f in self.fits:
            if f.name == name:
                return f
        raise KeyError(name)
