"""Speed of a rank that shares its core with another: the ``speed`` of a cluster file's device
pinned two to a core (``examples/clusters/local-cpu-4on2.yaml``, ``local-cpu-hetero.yaml``).

Run: ``.venv/bin/python benchmarks/bench_core_sharing.py [--trials 4] [--steps 12]``.
Per model, alternately: one process alone on core 0, then one process per slot of the
4-on-2 layout (two pinned to each of the first two cores), each process timing forward and
backward of the model (one intra-op thread; the suite's per-rank batch of dp on four ranks)
and reporting its median step. A trial keeps the fastest process's median for ``alone`` and
the median process's for ``shared``; over trials the fastest of each is kept (the machine's
disturbances only slow a trial, ``bench_cpu_interference.py``). Prints
``speed = alone / shared``: 0.5 when time slicing costs nothing; below it, the price of
switching two processes on one core (their caches refilled at every slice).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import torch

from hetplan.graph.data import build_module, loss_function, synthetic_batch
from hetplan.graph.resolve import resolve_model

MODELS = {"resnet-tiny": ("cifar10", 8), "vgg11": ("cifar10", 4), "gpt-tiny": (None, 8)}
"""The suite's models at their per-rank batch in dp over four ranks."""
WARMUP = 2


def _steps(name: str, core: int, steps: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, [core])
    torch.set_num_threads(1)
    dataset, batch = MODELS[name]
    built = resolve_model(name, dataset)
    module = build_module(built)
    loss = loss_function(built)
    x, y = synthetic_batch(built, batch)
    times = []
    for _ in range(steps + WARMUP):
        start = time.perf_counter()
        loss(module(x), y).backward()
        times.append(time.perf_counter() - start)
    out.put(statistics.median(times[WARMUP:]))


def _run(name: str, cores: list[int], steps: int) -> list[float]:
    queue: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=_steps, args=(name, c, steps, queue)) for c in cores]
    for p in procs:
        p.start()
    medians = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    first, second = sorted(os.sched_getaffinity(0))[:2]
    speeds = []
    for name in MODELS:
        alone, shared = [], []
        for _ in range(args.trials):
            alone.append(min(_run(name, [first], args.steps)))
            shared.append(statistics.median(_run(name, [first, first, second, second], args.steps)))
        speed = min(alone) / min(shared)
        speeds.append(speed)
        pairs = zip(alone, shared, strict=True)
        trials = ", ".join(f"{1e3 * a:.1f}/{1e3 * s:.1f}" for a, s in pairs)
        print(
            f"{name}: alone {1e3 * min(alone):.1f} ms, two to a core {1e3 * min(shared):.1f} ms "
            f"(trials {trials}): speed {speed:.3f}"
        )
    print(f"median speed of a rank two to a core: {statistics.median(speeds):.3f}")


if __name__ == "__main__":
    main()
