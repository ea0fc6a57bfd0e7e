"""``predict`` says what each device's memory is made of (issue 26, item 5)."""

from __future__ import annotations

from hetplan.cli.predict_view import memory_lines
from hetplan.predict.predict import DevicePrediction


def _device(dev: str, memory: dict[str, float]) -> DevicePrediction:
    return DevicePrediction(
        id=dev,
        type="T4",
        role="worker",
        memory_bytes=sum(memory.values()),
        memory_capacity_bytes=16e9,
        memory=memory,
        busy_fraction=1.0,
        power_w=70.0,
        compute_s=1.0,
        exposed_comm_s=0.0,
        bubble_s=0.0,
    )


def test_one_line_per_breakdown_largest_device_and_term_first() -> None:
    late = {"activations": 2e9, "weights": 1e9, "stashed_weights": 0.0, "framework": 5e8}
    early = {"activations": 3e9, "weights": 1e9, "framework": 5e8}
    devices = [_device(f"a.{i}", late) for i in range(5)] + [_device("b.0", early)]
    lines = memory_lines(devices)
    assert lines[0] == "memory terms per device (largest first):"
    # b.0 holds 4.5 GB, the a.* 3.5 GB each; zero terms are left out.
    assert lines[1] == "  b.0: activations 3.00 GB, weights 1.00 GB, framework allowance 500.00 MB"
    assert lines[2] == (
        "  a.0, a.1, a.2 (+2): activations 2.00 GB, weights 1.00 GB, framework allowance 500.00 MB"
    )
    assert len(lines) == 3
