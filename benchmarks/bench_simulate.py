"""Time schedule generation and simulation of a 64-device hybrid plan (8 pipelines x 8 stages,
32 micro-batches, 4 gradient buckets per stage). Target: simulation well under 50 ms.

Run: ``.venv/bin/python benchmarks/bench_simulate.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef
from hetplan.predict import plan_from_options, predict
from hetplan.schedule import CutWork, PipelineWork, StageWork, SyncBucket, synchronous, wsp
from hetplan.schedule.types import Schedule
from hetplan.simulate import simulate
from hetplan.simulate.engine import compile_schedule, run_times

PIPES, STAGES, MICRO, BUCKETS = 8, 8, 32, 4


def work() -> tuple[list[PipelineWork], list[list[SyncBucket]]]:
    pipes = []
    for r in range(PIPES):
        stages = tuple(
            StageWork(
                devices=(f"n{r}.{s}",),
                fwd_s=1e-3 * (1 + 0.1 * s),
                bwd_s=2e-3 * (1 + 0.1 * s),
                bwd_parts=tuple([2e-3 * (1 + 0.1 * s) / BUCKETS] * BUCKETS),
                opt_s=1e-4,
            )
            for s in range(STAGES)
        )
        cuts = tuple(CutWork(fwd_s=2e-4, bwd_s=2e-4, nbytes=1e6) for _ in range(STAGES - 1))
        pipes.append(PipelineWork(stages=stages, cuts=cuts, batch=MICRO * 4))
    buckets = [[SyncBucket(part=k, duration_s=5e-4) for k in range(BUCKETS)] for _ in range(STAGES)]
    return pipes, buckets


def best_ms(fn: Callable[[], object], repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def report(name: str, build: Callable[[], Schedule]) -> None:
    sched = build()
    dur, deps, res, names = compile_schedule(sched)
    print(f"{name}: {len(sched.actions)} actions, {len(names)} resources")
    print(f"  build schedule         {best_ms(build):8.2f} ms")
    print(f"  simulate (full)        {best_ms(lambda: simulate(sched)):8.2f} ms")
    print(
        f"  one-pass times only    {best_ms(lambda: run_times(dur, deps, res, len(names))):8.2f} ms"
    )
    print(f"  iteration time         {simulate(sched).iteration_time_s * 1e3:8.3f} ms (simulated)")


def bench_predict() -> None:
    """predict() end to end (pricing, memory, schedule, simulation) on the example clusters."""
    root = Path(__file__).resolve().parents[1] / "examples" / "clusters"
    compute = AnalyticalCompute()
    cases: list[tuple[str, str, str, dict[str, object]]] = [
        ("resnet50", "hetero-2node.yaml", "dp", {}),
        ("resnet50", "hetero-2node.yaml", "1f1b", {"pp": 8}),
        ("resnet50", "hetero-2node.yaml", "hybrid", {"pp": 4}),
        ("gpt2-medium", "big-64.yaml", "hybrid", {"pp": 8}),
        ("gpt2-medium", "big-64.yaml", "hybrid", {"pp": 8, "sync": "wsp", "staleness": 1}),
    ]
    print("predict() end to end (best of 3, graph extraction excluded):")
    for model, cfile, strategy, kw in cases:
        cluster = load_cluster(root / cfile)
        ref = ModelRef(name=model)
        graph = build_graph(ref)
        plan = plan_from_options(
            graph, cluster, model=ref, strategy=strategy, batch=1024, compute=compute, **kw
        )  # type: ignore[arg-type]
        ms = best_ms(lambda: predict(plan, graph, cluster, compute), repeat=3)  # noqa: B023
        print(f"  {model:12s} {cfile:18s} {strategy:7s} {kw!s:45s} {ms:8.1f} ms")


def main() -> None:
    pipes, buckets = work()
    report(
        f"hybrid BSP {PIPES}x{STAGES}, m={MICRO}",
        lambda: synchronous("hybrid", pipes, MICRO, order="1f1b", buckets=buckets),
    )
    report(
        f"hybrid WSP D=1 {PIPES}x{STAGES}, m={MICRO}", lambda: wsp(pipes, MICRO, 1, buckets=buckets)
    )
    bench_predict()


if __name__ == "__main__":
    main()
