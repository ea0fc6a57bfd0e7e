"""Speed-up of 2 intra-op CPU threads over 1: where ``cost.threads.SERIAL_FRACTION`` comes from.

Run: ``.venv/bin/python benchmarks/bench_cpu_threads.py [--trials N] [--models resnet18,...]``
on a machine with at least 2 cores. Times (a) ``hetplan calibrate``'s CPU ``matmul`` probe
family (forward, sizes of 1e7 FLOPs and up: below, kernels are dispatch bound) and (b) whole
training steps (forward, loss, backward, SGD step) of zoo models, on 1 and 2 threads
alternately; per case and thread count it keeps the fastest trial's median (other processes
on a shared machine only slow a trial down, and slow 2 threads more). Prints the speed-up
``S(2)`` and the serial fraction ``s = 2 / S(2) - 1`` Amdahl's law gives it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from hetplan.graph.data import build_module, loss_function, synthetic_batch
from hetplan.graph.resolve import resolve_model
from hetplan.profile.calibrate import matmul_probes

MIN_PROBE_FLOPS = 1e7  # smaller matmul probes are dispatch bound on CPU: threads cannot help
REPEATS = 5  # timed calls per trial (median)
MODELS = {"resnet18": ("cifar10", 16), "gpt-mini": (None, 8), "gpt-tiny": (None, 8)}


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _fastest(cases: dict[str, Callable[[], object]], trials: int) -> dict[tuple[str, int], float]:
    best: dict[tuple[str, int], float] = {}
    for _ in range(trials):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, fn in cases.items():
                t = _median_s(fn, REPEATS)
                best[name, threads] = min(best.get((name, threads), t), t)
    return best


def _probe_family() -> dict[str, Callable[[], object]]:
    probes = matmul_probes(torch.device("cpu"), torch.float32)
    big = [p for p in probes if p.fwd_work >= MIN_PROBE_FLOPS]

    def family() -> None:
        with torch.no_grad():
            for p in big:
                p.run()

    return {"matmul probes (fwd, >= 1e7 FLOP)": family}


def _step(name: str) -> Callable[[], object]:
    dataset, batch = MODELS[name]
    built = resolve_model(name, dataset)
    module = build_module(built, torch.device("cpu"), 0)
    loss = loss_function(built)
    x, y = synthetic_batch(built, batch, torch.device("cpu"), 0)
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss(module(x), y).backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    cases = _probe_family()
    for name in filter(None, args.models.split(",")):
        cases[f"{name} step (batch {MODELS[name][1]})"] = _step(name)
    best = _fastest(cases, args.trials)
    print("| case | 1 thread ms | 2 threads ms | speed-up | serial fraction |")
    print("|---|---|---|---|---|")
    for name in cases:
        one, two = best[name, 1], best[name, 2]
        speedup = one / two
        print(
            f"| {name} | {one * 1e3:.1f} | {two * 1e3:.1f} | {speedup:.2f} | "
            f"{2 / speedup - 1:.3f} |"
        )


if __name__ == "__main__":
    main()
