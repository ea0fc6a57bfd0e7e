"""Per-stage micro-batch orders (GPipe, 1F1B), and what a stage holds in flight under them.

Orders follow torch.distributed.pipelining's ``ScheduleGPipe`` (all forwards, then all
backwards) and ``Schedule1F1B`` / Megatron's PipeDream-Flush (stage ``s`` of ``S`` runs
``min(S - s - 1, n)`` warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards; Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters", Sec. 2.2.1). The schedule generators emit them
(:mod:`hetplan.schedule.pipeline`); the memory model counts in-flight micro-batches on them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

Order = Literal["gpipe", "1f1b"]
Op = tuple[str, int]  # ("F" | "B" | "O", micro-batch or iteration)


def stage_order(order: Order, stage: int, num_stages: int, n: int) -> list[Op]:
    """Forward/backward order of one stage over micro-batches ``0 .. n-1``."""
    if order == "gpipe":
        return [("F", j) for j in range(n)] + [("B", j) for j in range(n)]
    warmup = min(num_stages - stage - 1, n)
    ops: list[Op] = [("F", j) for j in range(warmup)]
    for j in range(n - warmup):
        ops.append(("F", j + warmup))
        ops.append(("B", j))
    ops.extend(("B", j) for j in range(n - warmup, n))
    return ops


@functools.lru_cache(maxsize=4096)  # pure; a plan asks per pipeline and stage
def in_flight(order: Order, stage: int, num_stages: int, n: int) -> int:
    """The most micro-batches ``stage`` has run forward but not yet backward, over ``n``
    micro-batches in ``order``: whose activations it holds at its peak."""
    if not 0 <= stage < max(num_stages, 1):
        raise ValueError(f"stage {stage} out of range for {num_stages} stages")
    held = peak = 0
    for kind, _ in stage_order(order, stage, num_stages, n):
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


@dataclass(frozen=True)
class RecomputeHeld:
    """What a recomputing stage holds at its peak, in micro-batches."""

    inputs: int
    """Checkpointed micro-batches held as their stage input (the one being recomputed too)."""
    whole: int
    """Micro-batches whose saved activations are held whole: the one recomputed in its
    backward, and those not checkpointed (``except_last``)."""
    unchecked: int
    """Of ``whole``, the micro-batches not checkpointed: they also keep their received input."""


@functools.lru_cache(maxsize=4096)  # pure; a plan asks per pipeline and stage
def recompute_held(
    order: Order, stage: int, num_stages: int, n: int, m: int, *, except_last: bool
) -> RecomputeHeld:
    """The peak of a stage that checkpoints its forward, over ``n`` micro-batches in ``order``
    with ``m`` per iteration: at each backward, the micro-batches in flight are held as their
    inputs (checkpointed) or whole (not checkpointed: with ``except_last`` each iteration's
    last, ``j % m == m - 1``), plus the whole activations of the one recomputed now. The peak
    is the backward with the most held whole, then the most inputs (a micro-batch's saved
    activations are more than its input).

    Every micro-batch checkpointed: ``n`` in flight as inputs, one whole. Except the last:
    GPipe (``B0`` follows ``F(m-1)``) and every 1F1B stage with warm-up forwards hold the
    last micro-batch whole beside the recomputed one; a stage whose backwards follow their
    forwards (1F1B's last, DP) peaks at an earlier micro-batch's recomputed backward, as
    with every micro-batch checkpointed."""
    if m < 1:
        raise ValueError(f"micro_batches ({m}) must be >= 1")
    held: set[int] = set()
    best = RecomputeHeld(inputs=0, whole=0, unchecked=0)
    for kind, j in stage_order(order, stage, num_stages, n):
        if kind == "F":
            held.add(j)
            continue
        unchecked = sum(1 for k in held if except_last and k % m == m - 1)
        redo = 0 if except_last and j % m == m - 1 else 1
        now = RecomputeHeld(
            inputs=len(held) - unchecked, whole=unchecked + redo, unchecked=unchecked
        )
        if (now.whole, now.inputs) > (best.whole, best.inputs):
            best = now
        held.discard(j)
    return best


@functools.lru_cache(maxsize=4096)  # pure; a plan asks per pipeline and stage
def received_ahead(order: Order, stage: int, num_stages: int, n: int) -> int:
    """Micro-batches whose input ``stage`` holds before their forward, beside the
    :func:`in_flight` ones, at its peak over ``n`` micro-batches in ``order``. The runtime
    posts a stage's receive of a micro-batch's values when the previous stage sends them
    (run/execute/executor.py), so the buffer lives from then. Under 1F1B the previous stage
    runs one forward ahead (its warm-up is one longer, and its next forward waits only for
    this stage's previous backward): the next micro-batch's input is in during this stage's
    backward, 1 when a micro-batch follows the in-flight ones. None on the first stage (its
    input is the batch) and under GPipe (its stages peak after their last forward, every
    input received is in flight)."""
    if stage == 0 or order != "1f1b":
        return 0
    return 1 if n > in_flight(order, stage, num_stages, n) else 0
