"""``predict`` says what each device's memory is made of (issue 26, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_layer_sources_in_runs_of_consecutive_layers() -> None:
    from hetplan.cli.predict_view import source_lines

    sources = {
        "T4": {"a": "measured on T4", "b": "measured on T4", "c": "analytical", "d": "analytical"},
        "cpu": {"e": "calibrated on cpu"},
    }
    assert source_lines(sources) == [
        "cost source per layer (--json: layer_sources):",
        "  T4: a..b (2 layers): measured on T4; c..d (2 layers): analytical",
        "  cpu: e: calibrated on cpu",
    ]
    # One source for every layer: the headline says it.
    assert source_lines({"T4": {"a": "analytical", "b": "analytical"}}) == []


def test_predict_json_names_the_source_of_every_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from hetplan.cli.main import main
    from hetplan.graph import build_graph
    from hetplan.planspec import ModelRef

    cluster = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu.yaml"
    argv = ["predict", "--model", "gpt-tiny", "--batch", "8", "--cluster", str(cluster)]
    argv += ["--strategy", "dp", "--analytical", "--profiles", str(tmp_path), "--json"]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert (done.value.code or 0) == 0
    data = json.loads(capsys.readouterr().out)
    names = [x.name for x in build_graph(ModelRef(name="gpt-tiny")).layers]
    (kind,) = data["layer_sources"]  # the local cluster's one device type
    assert list(data["layer_sources"][kind]) == names  # every layer, in the model's order
    assert set(data["layer_sources"][kind].values()) == {data["cost_source"]}


def test_margin_line_names_the_fullest_device_with_its_margin() -> None:
    from dataclasses import replace

    from hetplan.cli.predict_view import margin_lines

    # b.0: 0.5 GB allowance + 1.3 x 3 GB = 4.4 GB of 16 GB; a.0: 0.5 + 1.3 x 11 = 14.8 GB
    b = replace(_device("b.0", {"activations": 3e9, "framework": 5e8}), memory_margin=1.3)
    a = replace(
        _device("a.0", {"activations": 11e9, "framework": 5e8}),
        memory_margin=1.3,
        memory_verdict="fits",
    )
    c = replace(_device("c.0", {"weights": 1e9}), type="cpu", memory_margin=2.0)
    assert margin_lines([b, a, c]) == [
        "feasibility margin (measured error of predicted peaks, allocator fragmentation; "
        "docs/cost-models.md section 6): x1.30 on T4, x2.00 on cpu on the terms other than the "
        "framework allowance; fullest with it: a.0 needs 14.80 GB of 16.00 GB (fits)"
    ]
    assert margin_lines([]) == []
