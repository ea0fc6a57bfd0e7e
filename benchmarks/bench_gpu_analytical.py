"""Analytical roofline against measured per-layer times on a real device.

Run after `hetplan profile MODEL --device cuda:0 --type TYPE` (the profile names the catalog
device type): `.venv/bin/python benchmarks/bench_gpu_analytical.py PROFILE.json ...`

For each profile it prices every layer with `AnalyticalCompute` on the catalog figures of the
profile's device type and compares with the measured fit at the profile's largest batch:
per-layer relative error of forward + backward (median and p90 of |error|, over layers that
take at least 1% of the step) and the whole model's error. The source thesis (000) reports a
25% average per-layer error for its analytical model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from hetplan.cluster import Device, device_type
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import load_profile

SIGNIFICANT = 0.01
"""Layers below this share of the measured step are left out of the per-layer statistics."""


def compare(path: Path) -> str:
    prof = load_profile(path)
    graph = build_graph(ModelRef(name=prof.model, dataset=prof.dataset, dtype=prof.dtype))
    dev = Device(id="d", type=device_type(prof.device_type), node="n", index=0)
    batch = max(prof.batch_sizes)
    measured = MeasuredCompute([prof]).layer_costs(graph, dev, batch)
    modelled = AnalyticalCompute(dtype=graph.dtype).layer_costs(graph, dev, batch)
    meas = np.array([c.fwd_s + c.bwd_s for c in measured])
    ana = np.array([c.fwd_s + c.bwd_s for c in modelled])
    big = meas >= SIGNIFICANT * meas.sum()
    err = np.abs(ana[big] / meas[big] - 1.0)
    lines = [
        f"{prof.model} {prof.dataset or ''} {prof.dtype} batch {batch} on {prof.device_name}"
        f" (catalog {prof.device_type}):",
        f"  whole model: measured {meas.sum() * 1e3:.2f} ms, analytical {ana.sum() * 1e3:.2f} ms,"
        f" error {ana.sum() / meas.sum() - 1:+.1%}",
        f"  per layer (|error|, {int(big.sum())} layers >= 1% of the step): median"
        f" {np.median(err):.1%}, p90 {np.percentile(err, 90):.1%}",
    ]
    for layer, m, a in zip(graph.layers, meas, ana, strict=True):
        lines.append(
            f"    {layer.name:12s} measured {m * 1e3:8.3f} ms  analytical {a * 1e3:8.3f} ms"
        )
    return "\n".join(lines)


def main() -> None:
    for arg in sys.argv[1:]:
        print(compare(Path(arg)), flush=True)


if __name__ == "__main__":
    main()
