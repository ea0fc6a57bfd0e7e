"""Priced inputs of the schedule generators: plain numbers, no model or cluster objects.

The prediction façade turns a plan into these (per-micro-batch stage times, cut transfer
times, gradient buckets); the generators turn them into a :class:`~hetplan.schedule.Schedule`.
Tests build them by hand with known numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the cost package loads numpy: light commands import this module
    from hetplan.cost.comm_buckets import GradBucket


@dataclass(frozen=True, kw_only=True)
class StageWork:
    """One stage of one pipeline, priced for one micro-batch."""

    devices: tuple[str, ...]
    """The device, or the tensor-parallel group (each member computes for the same time)."""
    fwd_s: float
    """Forward time of one micro-batch (tensor-parallel collectives included)."""
    bwd_s: float
    """Backward time of one micro-batch."""
    bwd_parts: tuple[float, ...] = ()
    """The backward of the last micro-batch of an iteration split at gradient-bucket boundaries,
    in execution order (sums to ``bwd_s``, less the recomputed forward when that micro-batch
    is not checkpointed: ``recompute_mode`` ``except_last``); empty = one piece of
    ``bwd_s``. Bucket ``k`` of the stage's :class:`SyncBucket` list is ready when part
    ``SyncBucket.part`` ends."""
    opt_s: float = 0.0
    """Optimizer step time (once per iteration)."""
    on_cores: bool = False
    """Its devices are CPUs, which copy their own messages (gloo over TCP: the sender's and
    the receiver's cores do the copies, and the rank waits in ``send``/``recv`` meanwhile): a
    transfer to or from this stage also holds its compute stream."""

    @property
    def parts(self) -> tuple[float, ...]:
        return self.bwd_parts if self.bwd_parts else (self.bwd_s,)


@dataclass(frozen=True, kw_only=True)
class CutWork:
    """Transfers across the cut between stage ``s`` and ``s + 1``, per micro-batch."""

    fwd_s: float
    """Activations, stage s -> s + 1."""
    bwd_s: float
    """Activation gradients, stage s + 1 -> s."""
    nbytes: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PipelineWork:
    """One replica (virtual worker): its stages and the cuts between them."""

    stages: tuple[StageWork, ...]
    cuts: tuple[CutWork, ...] = ()
    """``len(stages) - 1`` entries; missing entries mean free transfers."""
    batch: int = 1
    """Samples per iteration of this replica."""

    def cut(self, s: int) -> CutWork:
        if s < len(self.cuts):
            return self.cuts[s]
        return CutWork(fwd_s=0.0, bwd_s=0.0)


@dataclass(frozen=True, kw_only=True)
class SyncBucket:
    """One gradient bucket of a stage, all-reduced across the replicas of the stage."""

    part: int
    """Index of the backward part (:attr:`StageWork.parts`) after which it is ready."""
    duration_s: float
    """Allreduce time (collective overhead included)."""
    nbytes: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PsWork:
    """Parameter-server transfer times of one worker per iteration."""

    push_s: float
    """Gradients to the shards, plus the shards' update, seconds."""
    pull_s: float
    """Fresh parameters back from the shards, seconds."""
    nbytes: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PricedWork:
    """A plan priced: everything the schedule generators need, plus what the report shows
    (built by :func:`hetplan.predict.price.price`, or with unit times by the runtime)."""

    pipes: list[PipelineWork]
    buckets: list[list[SyncBucket]]
    """Per stage: gradient buckets all-reduced across the replicas (empty: one replica)."""
    ps: list[PsWork]
    micro_batch: list[int]
    """Per pipeline: samples per micro-batch."""
    bucket_bytes: list[float]
    """Per stage: DDP bucket memory (bytes per device) when buckets exist."""
    sources: tuple[str, ...]
    """Distinct cost sources of the layer costs used."""
    layer_sources: tuple[tuple[str, str, str], ...] = ()
    """(device type, layer, what priced it) of every layer on every device type it runs on."""
    tp_bytes: list[list[tuple[float, float]]] = field(default_factory=list)
    """Per pipeline, per stage: (forward, backward) bytes of the TP all-reduces one TP rank
    runs per micro-batch (``cost.tp.tp_traffic``; with recomputation the forward ones run
    again in the backward); (0, 0) without tensor parallelism."""


def split_backward(
    bwd_layers: Sequence[float], buckets: Sequence[GradBucket]
) -> tuple[tuple[float, ...], list[int]]:
    """Backward parts in execution order and the part after which each bucket is ready.

    Backward runs from the last layer down; bucket ``k`` is ready once layer ``last_layer``
    (local index) is done, so part ``k`` covers the layers from the previous boundary down to
    it. Layers below the last boundary (no parameters) form a trailing part.
    """
    parts: list[float] = []
    index: list[int] = []
    hi = len(bwd_layers)
    for bucket in buckets:
        lo = min(bucket.last_layer, hi)
        parts.append(float(sum(bwd_layers[lo:hi])))
        index.append(len(parts) - 1)
        hi = lo
    if hi > 0 or not parts:
        parts.append(float(sum(bwd_layers[:hi])))
    return tuple(parts), index
