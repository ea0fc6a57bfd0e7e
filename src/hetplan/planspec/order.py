"""Per-stage micro-batch orders (GPipe, 1F1B), and what a stage holds in flight under them.

Orders follow torch.distributed.pipelining's ``ScheduleGPipe`` (all forwards, then all
backwards) and ``Schedule1F1B`` / Megatron's PipeDream-Flush (stage ``s`` of ``S`` runs
``min(S - s - 1, n)`` warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards; Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters", Sec. 2.2.1). The schedule generators emit them
(:mod:`hetplan.schedule.pipeline`); the memory model counts in-flight micro-batches on them.
"""

from __future__ import annotations

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
