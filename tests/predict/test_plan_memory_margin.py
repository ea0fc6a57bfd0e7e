"""``predict``'s three memory verdicts: fits, may not fit (within the feasibility margin), does
not fit; in its reasons, warnings and JSON."""

from __future__ import annotations

import json

from predict_synthetic import FixedCompute, cluster, graph

from hetplan.cost.memory import FRAMEWORK_OVERHEAD_BYTES
from hetplan.cost.memory_margin import GPU_MEMORY_MARGIN
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import Prediction, predict

PLAN = Plan(
    model=ModelRef(name="syn"),
    strategy="dp",
    global_batch=4,
    pipelines=[PipelinePlan(stages=[StagePlan(layers=["l0", "l1"], devices=["n0.0"])], batch=4)],
)
G = graph(2, params=10_000_000)  # 40 MB of weights per layer


def _predict(capacity: float) -> Prediction:
    return predict(PLAN, G, cluster(1, memory=capacity), FixedCompute())


def test_verdicts_at_the_boundaries() -> None:
    total = _predict(1e12).devices[0].memory_bytes
    fw = float(FRAMEWORK_OVERHEAD_BYTES)  # the synthetic type "X" is a GPU
    with_margin = fw + GPU_MEMORY_MARGIN * (total - fw)
    cases = [(with_margin, "fits"), (with_margin - 1, "may not fit"), (total, "may not fit"),
             (total - 1, "does not fit")]  # fmt: skip
    for capacity, verdict in cases:
        pred = _predict(capacity)
        dev = pred.devices[0]
        assert dev.memory_verdict == verdict, capacity
        assert dev.memory_margin == GPU_MEMORY_MARGIN
        assert pred.memory_verdict == verdict
        assert pred.feasible == (verdict != "does not fit")
        assert len(pred.memory_warnings) == (verdict == "may not fit")
        assert len(pred.infeasible_reasons) == (verdict == "does not fit")
        data = json.loads(json.dumps(pred.to_json()))
        assert data["memory_verdict"] == verdict
        assert data["devices"][0]["memory_verdict"] == verdict


def test_reasons_and_warnings_name_the_margin() -> None:
    total = _predict(1e12).devices[0].memory_bytes
    (warning,) = _predict(total).memory_warnings
    assert warning.startswith("n0.0: may not fit: needs ")
    assert f"with its x{GPU_MEMORY_MARGIN:.2f} feasibility margin" in warning
    assert f"has {total / 1e6:.2f} MB ({total:.0f} B)" in warning
    (reason,) = _predict(total - 1).infeasible_reasons
    assert reason.startswith("n0.0: out of memory: needs ")
    assert f"with its x{GPU_MEMORY_MARGIN:.2f} feasibility margin), has " in reason


def test_roomy_device_fits_without_warnings() -> None:
    pred = _predict(1e12)
    assert pred.memory_verdict == "fits" and not pred.memory_warnings
