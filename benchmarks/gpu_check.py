"""The GPU self-check: the ``gpu`` tests, then dp on one GPU for a few zoo models measured
against the prediction, written as a short markdown report for docs/benchmarks.md.

    make gpu-check                                   # with the project's .venv
    PYTHONPATH=src python3 benchmarks/gpu_check.py   # from source (a GPU image's own torch)

Per model (the training runs of ../shared/gpu-truth/h100/train): the measured iteration
(median of the timed steps, wall clock), the device-timed forward, backward, optimizer and idle
time of the last step (CUDA events: they add up to the step), the allocator's peak memory, the
NVML energy per iteration with its implied mean power, and the prediction (the store's
profiles where it has them, else the calibrated or catalog model) with its error. Nothing is
written back to the profile store (``measure_plan`` runs the plan; only ``hetplan train``
writes back): the check does not change later predictions.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from hetplan.cluster.config import cluster_from_data
from hetplan.cluster.spec import Cluster
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.trace import COMPUTE_KINDS, idle_gaps
from hetplan.predict import predict
from hetplan.profile.model import guess_device_type
from hetplan.profile.select import compute_model
from hetplan.run.measurement.measure import Measurement
from hetplan.run.train import measure_plan


@dataclass(frozen=True)
class Case:
    model: str
    dtype: str
    batch: int
    optimizer: str


CASES = (
    Case("gpt2", "bf16", 16, "adam"),
    Case("resnet50", "bf16", 128, "sgd"),
    Case("vgg16", "fp32", 64, "sgd"),
)
"""The whole-step runs of ../shared/gpu-truth/h100/train (81.5, 60.7 and 52.9 ms there)."""


def _cluster(device_type: str) -> Cluster:
    data = {"name": "one-gpu", "nodes": [{"name": "n", "devices": [{"type": device_type}]}]}
    return cluster_from_data(data, "<gpu check>")


def _plan(case: Case) -> Plan:
    layers = [layer.name for layer in build_graph(case.model).layers]
    stage = StagePlan(layers=layers, devices=["n.0"])
    return Plan(
        model=ModelRef(name=case.model, dtype=case.dtype),
        strategy="dp", global_batch=case.batch, optimizer=case.optimizer,  # type: ignore[arg-type]
        pipelines=[PipelinePlan(stages=[stage], batch=case.batch)],
    )  # fmt: skip


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{1e3 * s:.1f}"


def _row(case: Case, m: Measurement, predicted: float, source: str) -> str:
    r = m.ranks[0]
    last = r.actions
    per = {k: sum(s.duration for s in last if s.kind == k) for k in COMPUTE_KINDS}
    idle = sum(g.duration for g in idle_gaps(last, *r.last_step, r.device))
    energy = m.energy_j_per_iteration
    watts = "-" if energy is None else f"{energy / m.measured_iteration_s:.0f}"
    err = (m.measured_iteration_s - predicted) / predicted
    valid = getattr(m, "energy_invalid", None)
    e_txt = "-" if energy is None else f"{energy:.1f}" + (" (invalid)" if valid else "")
    return (
        f"| {case.model} {case.dtype} b{case.batch} | {_ms(m.measured_iteration_s)} | "
        f"{_ms(per['fwd'])} / {_ms(per['bwd'])} / {_ms(per['optimizer'])} / {_ms(idle)} | "
        f"{r.timing} | {r.peak_memory_bytes / 1e9:.2f} | {e_txt} | {watts} | "
        f"{_ms(predicted)} ({source}) | {100 * err:+.1f}% |"
    )


def _gpu_tests() -> str:
    """Run the ``gpu`` tests; their summary line."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    return "\n".join([*failed, lines[-1] if lines else f"pytest exited {done.returncode}"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu-check.md"))
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-tests", action="store_true", help="only the benchmarks")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpu check: torch sees no CUDA device", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    dtype_name = guess_device_type(name) or "H100-SXM"
    lines = [
        f"GPU self-check, {datetime.date.today().isoformat()}: {name} (catalog type "
        f"{dtype_name}), torch {torch.__version__}, CUDA {torch.version.cuda}.",
        "",
    ]
    if not args.no_tests:
        lines += ["`pytest -m gpu`:", "", "```", _gpu_tests(), "```", ""]
    lines += [
        f"dp on one GPU, {args.steps} timed steps after {args.warmup} warm-up:",
        "",
        "| model | step ms | fwd / bwd / opt / idle ms (last step) | timing | peak GB | "
        "J / iter | W | predicted ms | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cluster = _cluster(dtype_name)
    for case in CASES:
        plan = _plan(case)
        m = measure_plan(plan, cluster, steps=args.steps, warmup=args.warmup)
        compute = compute_model(case.dtype)
        pred = predict(plan, build_graph(plan.model), cluster, compute)
        lines.append(_row(case, m, pred.iteration_time_s, pred.cost_source))
        print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
