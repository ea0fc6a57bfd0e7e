"""How steady each core of this machine is: the noise beneath every CPU measurement.

Run: ``.venv/bin/python benchmarks/bench_cpu_interference.py [--seconds 60] [--size 256]``.
One process per core, pinned there with one intra-op thread, times a fixed block of work
(20 matrix multiplies of ``size`` x ``size``, fp32) back to back for ``--seconds``, all cores
at once. Per core and per wall-clock second it prints the median block time over the fastest
block of that core (1.00 = undisturbed), then the fraction of seconds slower than
``SLOW`` and the lengths of the slow episodes. Nothing else of ours runs meanwhile, so a slow
second is the machine (other tenants of the host, frequency), not the work: a suite case
measured in such an episode reads slow, whatever the plan.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from collections import defaultdict

import torch

SLOW = 1.2
"""A second whose median block is this many times the core's fastest counts as disturbed."""
BLOCK_MATMULS = 20


def _probe(core: int, seconds: float, size: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, [core])
    torch.set_num_threads(1)
    a = torch.randn(size, size)
    samples = []
    start = time.perf_counter()
    while (now := time.perf_counter()) - start < seconds:
        for _ in range(BLOCK_MATMULS):
            a @ a
        samples.append((now - start, time.perf_counter() - now))
    out.put((core, samples))


def per_second(samples: list[tuple[float, float]]) -> list[float]:
    """Each whole second's median block time over the fastest block."""
    best = min(d for _, d in samples)
    bins: dict[int, list[float]] = defaultdict(list)
    for t, d in samples:
        bins[int(t)].append(d / best)
    return [statistics.median(v) for _, v in sorted(bins.items())]


def episodes(slowdowns: list[float]) -> list[int]:
    """Lengths in seconds of the runs of consecutive seconds slower than SLOW."""
    runs, current = [], 0
    for x in slowdowns:
        if x > SLOW:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    return runs + ([current] if current else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=_probe, args=(c, args.seconds, args.size, queue)) for c in cores]
    for p in procs:
        p.start()
    results = dict(queue.get() for _ in procs)
    for p in procs:
        p.join()
    for core in cores:
        slow = per_second(results[core])
        runs = episodes(slow)
        disturbed = [x for x in slow if x > SLOW]
        print(f"core {core}: per-second slowdown " + " ".join(f"{x:.2f}" for x in slow))
        print(
            f"core {core}: {len(disturbed)}/{len(slow)} s slower than {SLOW}x "
            f"(median {statistics.median(disturbed) if disturbed else 1.0:.2f}x); "
            f"episodes {runs} s"
        )


if __name__ == "__main__":
    main()
