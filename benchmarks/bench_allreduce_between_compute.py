"""A small all-reduce between bursts of compute, as tensor parallelism calls it: two gloo ranks
pinned to the cores given (one core: core-mates; two: a core each), each alternating one-thread
matrix multiplies with an all-reduce of 32 KiB. Per amount of compute: the slowest rank's
median compute alone (both ranks computing at once, as in the loop) and median iteration.
What an iteration takes beyond the compute is what the all-reduce costs between computations.

    .venv/bin/python benchmarks/bench_allreduce_between_compute.py --cores 0,0
    .venv/bin/python benchmarks/bench_allreduce_between_compute.py --cores 0,1
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from gloo_ranks import free_port, init_rank

MATMULS = (0, 5, 20, 60)
"""Matrix multiplies (96 x 96) between two calls: none (back to back) to about a millisecond."""
ITERATIONS, SKIPPED = 40, 5
ALL_REDUCE_ELEMENTS = 8192  # fp32: 32 KiB


def _median_s(fn: Callable[[], None], reps: int, skip: int = 0) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times[skip:])


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], out: Any) -> None:
    init_rank(rank, world, port, cpus)
    a, buf = torch.randn(96, 96), torch.randn(ALL_REDUCE_ELEMENTS)
    result = {}
    for reps in MATMULS:

        def compute(reps: int = reps) -> None:
            x = a
            for _ in range(reps):
                x = (x @ a).tanh()

        def iteration(compute: Callable[[], None] = compute) -> None:
            compute()
            dist.all_reduce(buf)

        alone = _median_s(compute, 30)
        dist.barrier()
        result[reps] = (alone, _median_s(iteration, ITERATIONS, SKIPPED))
    out.put(result)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", default="0,0", help="the two ranks' cores, e.g. 0,0 or 0,1")
    cores = [int(c) for c in ap.parse_args().cores.split(",")]
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    cpus = [[c] for c in cores]
    torch.multiprocessing.start_processes(
        _rank, args=(len(cores), free_port(), cpus, queue), nprocs=len(cores), start_method="spawn"
    )
    ranks = [queue.get() for _ in cores]
    for reps in MATMULS:
        alone = max(r[reps][0] for r in ranks)
        step = max(r[reps][1] for r in ranks)
        print(
            f"cores {cores}, {reps} matmuls between calls: compute {1e3 * alone:.2f} ms, "
            f"iteration {1e3 * step:.2f} ms"
        )


if __name__ == "__main__":
    main()
