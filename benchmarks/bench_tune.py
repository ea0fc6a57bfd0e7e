"""Does ``hetplan tune``'s short, adaptive trials pick what long runs would?

For each model on a local CPU cluster: plan the top K candidates, run ``tune`` (adaptive
trials, then the winner trains on), then measure every candidate again with a long run (20
timed steps after 3 warm-up) in the same session. Reports the trials' lengths and stop
reasons, the predicted, trial-measured and long-run iteration times, and the regret of tune's
pick: its long-run time over the best long-run time (1.00 = the pick is the truly fastest).

    .venv/bin/python benchmarks/bench_tune.py [--models blobs,gpt-tiny] [--top 3] [--steps 40]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from hetplan.run.train import measure_plan
from hetplan.run.tune import TuneSettings, tune
from hetplan.usecases.plan import SearchRequest, search_plans
from hetplan.usecases.tune import candidates_of

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "blobs": (f"{ROOT}/examples/data/blobs.py:model", f"{ROOT}/examples/data/blobs.py:dataset"),
    "gpt-tiny": ("gpt-tiny", None),
    "resnet-tiny": ("resnet-tiny", None),
}
LONG_STEPS = 20  # timed steps of the reference measurement of each candidate
LONG_WARMUP = 3


def one(name: str, cluster: Path, top: int, steps: int, batch: int) -> list[str]:
    model, data = MODELS[name]
    dataset = "cifar10" if name == "resnet-tiny" else None
    req = SearchRequest(model=model, cluster=cluster, batch=batch, dataset=dataset)
    found = search_plans(req)
    clus, opts = found.cluster, found.options
    cands = candidates_of(found.ranking, top)
    settings = TuneSettings(objective=opts.objective, steps=steps, data=data)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = tune(cands, clus, settings, Path(tmp))
    tune_s = time.perf_counter() - start
    long = [
        measure_plan(c.plan, clus, steps=LONG_STEPS, warmup=LONG_WARMUP).measured_iteration_s
        for c in cands
    ]
    best = min(range(len(long)), key=lambda i: long[i])
    rows = []
    for i, t in enumerate(result.trials):
        mark = (" (chosen)" if i == result.chosen else "") + (" (long best)" if i == best else "")
        rows.append(
            f"| {name} | {i + 1}{mark} | {t.candidate.label} | {t.steps} | "
            f"{t.measurement.stopped or 'max steps'} | {1e3 * t.candidate.predicted_s:.3f} | "
            f"{1e3 * t.measurement.measured_iteration_s:.3f} | {1e3 * long[i]:.3f} |"
        )
    regret = long[result.chosen] / long[best]
    rows.append(
        f"| {name} | | tune {tune_s:.0f} s, {result.total_steps} steps; regret "
        f"{regret:.2f} | | | | | |"
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="blobs,gpt-tiny,resnet-tiny")
    parser.add_argument(
        "--cluster", type=Path, default=ROOT / "examples/clusters/local-cpu-hetero.yaml"
    )
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    print("| model | trial | plan | steps | stopped | predicted ms | trial ms | long-run ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for row in one(name, args.cluster, args.top, args.steps, args.batch):
            print(row, flush=True)


if __name__ == "__main__":
    main()
