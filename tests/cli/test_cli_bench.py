"""``hetplan bench`` end to end: the cluster's links measured, then one tiny model, 2 ranks,
one timed step in each of two interleaved rounds (real processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetplan.cli.main import main
from hetplan.cluster.config import load_cluster_config
from hetplan.predict.error_bars import load_history
from hetplan.profile.store import load_profile


def test_bench_tiny_case_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    argv = [
        "bench", "--quick", "--models", "resnet-tiny:4", "--cluster-names", "local-cpu",
        "--strategies", "dp,planner", "--steps", "1", "--warmup", "0", "--rounds", "2",
        "--out", str(out),
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
        assert len(c["rounds_s"]) == 2  # two rounds; the case's time is their median (mean)
        assert c["measured_s"] == pytest.approx(sum(c["rounds_s"]) / 2)
    assert len(data["selections"]) == 1
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert (out / "scatter.png").is_file()
    # the links measured here first (two real ranks), and the cases priced on that copy
    measured = load_cluster_config(out / "clusters" / "local-cpu.yaml")
    (pair,) = measured.pairs
    assert pair.link.bandwidth_GBps is not None and pair.link.bandwidth_GBps > 0
    notes = json.loads((out / "results.json").read_text())["notes"]
    assert [n for n in notes if n.startswith("links: local-cpu: pairs ")]
    # profiled into the store before the cluster's runs and again after them, merged
    (stored,) = (tmp_path / "profiles").glob("*.json")
    profile = load_profile(stored)
    assert [b.provenance.runs for b in profile.batches if b.provenance] == [2] * len(
        profile.batches
    )
    assert len(profile.history) == 2 * len(profile.batches)
    # each measured case added to the store's error history (issue 27, item 1)
    history = load_history(tmp_path / "profiles")
    assert [r.origin for r in history] == ["bench", "bench"]
    cases = {c["strategy"]: c for c in data["cases"]}
    assert [r.measured_s for r in history] == pytest.approx(
        [cases["dp"]["measured_s"], cases["planner"]["measured_s"]]
    )


def test_bench_rejects_unknown_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--strategies", "bogus"])
    assert exc.value.code == 2
    assert "--strategies: 'bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--rounds", "0"])
    assert exc.value.code == 2
    assert "--rounds: 0; expected a positive integer" in capsys.readouterr().err


def test_bench_rerenders_a_saved_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = {
        "model": "m", "cluster": "local-cpu", "strategy": "dp", "label": "dp x2", "ranks": 2,
        "predicted_s": 0.1, "measured_s": 0.125, "measured_p10_s": 0.11,
        "measured_p90_s": 0.13, "plan": {},
    }  # fmt: skip
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps({"quick": True, "steps": 1, "warmup": 0, "cases": [case]}))
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--from-results", str(saved), "--out", str(tmp_path), "--json"])
    assert (exc.value.code or 0) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["median_error"] == pytest.approx(0.25)
    assert data["selection_accuracy"] is None  # no planner case
    assert "+25.0%" in (tmp_path / "report.md").read_text()
