"""How a batch is shared: between replicas, and into micro-batches."""

from __future__ import annotations

import math
from collections.abc import Sequence


def split_batch(batch: int, weights: Sequence[float], floor: int = 1) -> list[int]:
    """Integer shares of ``batch`` proportional to ``weights`` (largest remainder), each
    >= ``floor``; ValueError when ``batch`` cannot give every replica its floor."""
    n = len(weights)
    if batch < floor * n:
        raise ValueError(f"batch {batch} cannot give each of the {n} replicas {floor} samples")
    total = sum(weights)
    exact = [(batch - floor * n) * w / total for w in weights]
    shares = [floor + int(x) for x in exact]
    rest = batch - sum(shares)
    by_remainder = sorted(range(n), key=lambda i: -(exact[i] - int(exact[i])))
    for i in by_remainder[:rest]:
        shares[i] += 1
    return shares


def micro_batch_size(batch: int, micro_batches: int) -> int:
    """Samples per micro-batch: the larger share when ``batch`` does not divide evenly (every
    micro-batch is priced at it: slightly pessimistic, torch's ``tensor_split`` makes the
    first ``batch mod m`` micro-batches one sample larger)."""
    return math.ceil(batch / micro_batches)
