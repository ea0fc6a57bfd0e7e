"""Per-layer compute of the zoo's small models on this CPU: measured against the analytical
model without calibration, with this CPU's calibration (``hetplan calibrate``), and with a
per-layer profile (fitted on the other micro-batch sizes: the size predicted is held out).

    .venv/bin/python benchmarks/bench_calibrated.py [--models resnet-tiny,vgg11] [--cpu 0]

Everything runs in this process pinned to one core with one thread (the catalog's ``cpu``
type). Measured: the median over timed steps of the sum of every layer's forward and
backward time (``hetplan profile``'s hooks). Prints a markdown table and the median |error|
of each model (error = (measured - predicted) / predicted).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Device
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.graph.types import OP_CLASSES, ModelGraph
from hetplan.planspec import ModelRef
from hetplan.profile.calibrate import calibrate
from hetplan.profile.fit import fit_linear
from hetplan.profile.model import ProfileRequest, profile_model
from hetplan.profile.timing import thread_scope
from hetplan.profile.types import Profile

MODELS = {"resnet-tiny": "cifar10", "vgg11": "cifar10", "mobilenetv2": "cifar10", "gpt-tiny": None}
SIZES = (1, 2, 4, 8, 16)


def held_out(profile: Profile, batch: int) -> float:
    """Sum over layers of fwd + bwd at ``batch`` from fits over the other sizes."""
    others = [b for b in profile.batches if b.batch != batch]
    total = 0.0
    for i in range(len(profile.fits)):
        xs = [float(b.batch) for b in others]
        total += fit_linear(xs, [b.layers[i].fwd.median_s for b in others]).at(batch)
        total += fit_linear(xs, [b.layers[i].bwd.median_s for b in others]).at(batch)
    return total


def predicted(compute: AnalyticalCompute, graph: ModelGraph, dev: Device, batch: int) -> float:
    return sum(c.fwd_s + c.bwd_s for c in compute.layer_costs(graph, dev, batch))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    cpus = (args.cpu,)
    with thread_scope(1, cpus):
        cal = calibrate("cpu", torch.device("cpu"), "fp32", OP_CLASSES)
    dev = Device(id="c", type=device_type("cpu"), node="n", index=0)
    plain, calibrated = AnalyticalCompute("fp32"), AnalyticalCompute("fp32", calibrations=[cal])
    print(f"torch {torch.__version__}, {cal.device_name}, core {args.cpu}, 1 thread, fp32")
    print("| model | micro-batch | measured ms | uncalibrated | calibrated | profile (held out) |")
    print("|---|---|---|---|---|---|")
    errors: dict[str, list[list[float]]] = {}
    for name in args.models.split(","):
        ref = ModelRef(name=name, dataset=MODELS.get(name))
        graph = build_graph(ref)
        req = ProfileRequest(
            model=name, dataset=ref.dataset, batch_sizes=SIZES, cpus=cpus, threads=1,
            steps=args.steps, warmup=3,
        )  # fmt: skip
        profile = profile_model(req)
        for bt in profile.batches:
            measured = sum(t.fwd.median_s + t.bwd.median_s for t in bt.layers)
            preds = (
                predicted(plain, graph, dev, bt.batch),
                predicted(calibrated, graph, dev, bt.batch),
                held_out(profile, bt.batch),
            )
            errs = [(measured - p) / p for p in preds]
            errors.setdefault(name, []).append(errs)
            cells = " | ".join(
                f"{p * 1e3:.2f} ({e:+.0%})" for p, e in zip(preds, errs, strict=True)
            )
            print(f"| {name} | {bt.batch} | {measured * 1e3:.2f} | {cells} |", flush=True)
    print()
    print("| model | median abs error: uncalibrated | calibrated | profile (held out) |")
    print("|---|---|---|---|")
    every: list[list[float]] = []
    for name, rows in errors.items():
        every.extend(rows)
        meds = [statistics.median(abs(r[k]) for r in rows) for k in range(3)]
        print(f"| {name} | " + " | ".join(f"{m:.0%}" for m in meds) + " |")
    meds = [statistics.median(abs(r[k]) for r in every) for k in range(3)]
    print("| all | " + " | ".join(f"{m:.0%}" for m in meds) + " |")


if __name__ == "__main__":
    main()
