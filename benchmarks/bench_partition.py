"""Timings of the pipeline partitioners on synthetic heterogeneous instances.

Run: ``.venv/bin/python benchmarks/bench_partition.py [--repeat N] [--no-exact]``.
Prints, for L layers and S slots, the median CPU time (``time.process_time``: steadier than
wall time on a shared machine) of ``partition_fast`` (any slot subset,
pairwise (S, S, L-1) cut times; and consecutive slots, (S-1, L-1) cut times) and of
``partition_exact``, whether the fast answer was proved optimal, and its gap to the exact one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from hetplan.plan.partition import Partition, partition_exact, partition_fast

SIZES = [(24, 4), (24, 16), (96, 4), (96, 16), (96, 64), (200, 4), (200, 16), (200, 64)]


def instance(nl: int, ns: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Slots 0.5-2x fast, layers of uneven cost, cuts priced by bytes over a pair bandwidth,
    memory that binds on some slots."""
    rng = np.random.default_rng(seed)
    speed = rng.uniform(0.5, 2.0, ns)
    work = rng.uniform(0.1, 1.0, nl)  # seconds on a 1x slot
    cut_bytes = rng.uniform(0.1, 1.0, nl - 1)
    bandwidth = rng.uniform(5.0, 50.0, (ns, ns))  # bytes per second, arbitrary units
    mem = rng.uniform(1.0, 3.0, nl)
    return {
        "layer_time": work[None, :] / speed[:, None],
        "cut_time": cut_bytes[None, None, :] / bandwidth[:, :, None],
        "layer_mem": mem,
        "mem_cap": np.full(ns, 2.5 * mem.sum() / ns),
    }


def timed(fn: Callable[[], Partition], repeat: int) -> tuple[float, Partition]:
    times, result = [], fn()
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        times.append(time.process_time() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-exact", action="store_true")
    args = parser.parse_args()
    print(
        f"{'L':>4} {'S':>3} {'fast ms':>8} {'proved':>6} {'adj ms':>7} {'exact ms':>9} {'gap':>8}"
    )
    for nl, ns in SIZES:
        case = instance(nl, ns)
        fast_s, fast = timed(lambda c=case: partition_fast(**c), args.repeat)
        adjacent = {**case, "cut_time": case["cut_time"][np.arange(ns - 1), np.arange(1, ns)]}
        adj_s, _ = timed(lambda c=adjacent: partition_fast(**c), args.repeat)
        exact_ms, gap = "-", "-"
        if not args.no_exact:
            exact_s, exact = timed(lambda c=case: partition_exact(**c), 1)
            exact_ms = f"{exact_s * 1e3:9.1f}"
            gap = f"{fast.bottleneck / exact.bottleneck - 1:8.1e}"
        print(
            f"{nl:>4} {ns:>3} {fast_s * 1e3:8.1f} {fast.exact!s:>6} {adj_s * 1e3:7.1f} "
            f"{exact_ms:>9} {gap:>8}"
        )


if __name__ == "__main__":
    main()
