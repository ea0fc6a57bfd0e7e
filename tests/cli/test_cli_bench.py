"""``hetplan bench`` end to end: one tiny model, 2 ranks, one timed step (real processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main


def test_bench_tiny_case_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    argv = [
        "bench", "--quick", "--models", "resnet-tiny:4", "--cluster-names", "local-cpu",
        "--strategies", "dp,planner", "--steps", "1", "--warmup", "0", "--out", str(out),
        "--profile-dir", str(tmp_path / "profiles"), "--json",
    ]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert (exc.value.code or 0) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("median_error", "p90_error", "selection_accuracy", "worst_pick_slowdown",
                "speedup_vs_dp", "speedup_vs_equal_pipeline", "cases"):  # fmt: skip
        assert key in data
    strategies = sorted(c["strategy"] for c in data["cases"])
    assert strategies == ["dp", "planner"]
    for c in data["cases"]:
        assert c["measured_s"] > 0 and c["predicted_s"] > 0
        assert c["error"] == pytest.approx((c["measured_s"] - c["predicted_s"]) / c["predicted_s"])
    assert len(data["selections"]) == 1
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert (out / "scatter.png").is_file()
    assert list((tmp_path / "profiles").glob("*.json"))  # profiled once into the store


def test_bench_rejects_unknown_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--strategies", "ps"])
    assert exc.value.code == 2
    assert "--strategies: 'ps'" in capsys.readouterr().err
