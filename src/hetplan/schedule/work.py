"""Priced inputs of the schedule generators: plain numbers, no model or cluster objects.

The prediction façade turns a plan into these (per-micro-batch stage times, cut transfer
times, gradient buckets); the generators turn them into a :class:`~hetplan.schedule.Schedule`.
Tests build them by hand with known numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    in execution order (sums to ``bwd_s``); empty = one piece. Bucket ``k`` of the stage's
    :class:`SyncBucket` list is ready when part ``SyncBucket.part`` ends."""
    opt_s: float = 0.0
    """Optimizer step time (once per iteration)."""

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
