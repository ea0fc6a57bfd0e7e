"""``hetplan plan`` end to end through the console entry point, and its hand-over to
``hetplan predict``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main
from hetplan.cli.plan_view import table_rows
from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.plan.objective import parse_objective
from hetplan.plan.search import SearchOptions, search
from hetplan.plan.stamp import cluster_digest
from hetplan.planspec import ModelRef, Plan
from hetplan.serde import from_data, load_file

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
HETERO = str(CLUSTERS / "hetero-2node.yaml")
EDGE = str(CLUSTERS / "edge.yaml")
LOCAL = str(CLUSTERS / "local-cpu.yaml")
VGG = ["--model", "vgg11", "--dataset", "cifar10", "--batch", "64"]

TINY = """
from torch import nn

def tiny():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(inplace=True), nn.Linear(16, 3)), (6,)
"""


@pytest.fixture(autouse=True)
def empty_profile_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "profiles"
    store.mkdir()
    monkeypatch.setenv("HETPLAN_PROFILE_DIR", str(store))
    return store


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def plan_json(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, text, err = _run(["plan", *argv, "--out", str(out), "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(text)
    return data


def predict_json(plan: Path, cluster: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, text, err = _run(["predict", "--plan", str(plan), "--cluster", cluster, "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(text)
    return data


def test_json_shape_and_plan_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    data = plan_json(["--cluster", HETERO, *VGG], out, capsys)
    assert {"best", "candidates", "rejected"} <= set(data)
    assert data["plan_file"] == str(out)
    best = data["best"]
    assert best == data["candidates"][0]
    assert {"family", "label", "plan", "prediction", "score"} <= set(best)
    assert isinstance(data["rejected"], dict)
    assert all(isinstance(v, int) and v > 0 for v in data["rejected"].values())
    # ranked best first by the objective (time): iteration times ascend
    times = [c["prediction"]["iteration_time_s"] for c in data["candidates"]]
    assert times == sorted(times)
    assert all(c["prediction"]["feasible"] for c in data["candidates"])
    # the file holds the winner exactly, stamped with the cluster it was made for
    plan = load_file(Plan, out)
    assert plan.cluster == "hetero-2node" and plan.cluster_digest == cluster_digest(
        load_cluster(Path(HETERO))
    )
    assert plan == dataclasses.replace(
        from_data(Plan, best["plan"], "best"), cluster_digest=plan.cluster_digest
    )
    assert plan.global_batch == 64 and plan.model.name == "vgg11"
    assert {"dp-equal", "equal-pipeline"} <= set(data["baselines"])


@pytest.mark.parametrize(
    ("cluster", "extra"),
    [(HETERO, []), (EDGE, ["--objective", "energy"]), (HETERO, ["--strategies", "1f1b"])],
)
def test_predict_gives_the_same_prediction(
    cluster: str, extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    data = plan_json(["--cluster", cluster, *VGG, *extra], out, capsys)
    best = data["best"]["prediction"]
    again = predict_json(out, cluster, capsys)
    for key in ("iteration_time_s", "energy_j_per_iteration", "samples_per_s", "power_w"):
        assert again[key] == pytest.approx(best[key], rel=1e-12, abs=0.0), key
    assert again["feasible"] is True
    assert again["strategy"] == data["best"]["plan"]["strategy"]


def test_energy_on_edge_leaves_a_device_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    data = plan_json(["--cluster", EDGE, *VGG, "--objective", "energy"], out, capsys)
    assert data["objective"] == "energy"
    assert len(load_file(Plan, out).devices) < 3
    energies = [c["prediction"]["energy_j_per_iteration"] for c in data["candidates"]]
    assert energies[0] == min(energies)


def test_strategies_restrict_the_families(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = plan_json(["--cluster", HETERO, *VGG, "--strategies", "dp"], tmp_path / "p.json", capsys)
    searched = {c["family"] for c in data["candidates"] if c["baseline"] is None}
    assert searched == {"dp"}


def test_limits_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--cluster", HETERO, *VGG, "--max-devices", "2", "--max-power", "400"]
    data = plan_json(argv, tmp_path / "p.json", capsys)
    for c in data["candidates"]:
        assert len(from_data(Plan, c["plan"], "c").devices) <= 2
        assert c["prediction"]["power_w"] <= 400


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--cluster", HETERO, *VGG, "--objective", "speed"],
            "--objective: unknown metric 'speed'",
        ),
        (["--cluster", HETERO, "--model", "no-such-model"], "no-such-model"),
        (["--cluster", "/nonexistent/cluster.yaml", *VGG], "/nonexistent/cluster.yaml"),
        (["--cluster", HETERO, *VGG, "--strategies", "magic"], "--strategies"),
        (
            ["--cluster", HETERO, "--model", "vgg11", "--batch", "0"],
            "--batch must be between 1 and",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_file(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    code, stdout, err = _run(["plan", *argv, "--out", str(out)], capsys)
    assert code == 2
    assert err.startswith("hetplan: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not out.exists()
    assert stdout == ""


def test_no_feasible_plan_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    argv = ["plan", "--cluster", HETERO, *VGG, "--deadline", "0.001", "--out", str(out)]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert err.startswith("hetplan: error: no feasible plan for vgg11") and err.count("\n") == 1
    assert "limit: time (" in err
    assert not out.exists()


def test_human_output_has_table_stage_map_and_baselines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = plan_json(["--cluster", HETERO, *VGG], tmp_path / "a.json", capsys)
    out = tmp_path / "plan.json"
    code, text, err = _run(["plan", "--cluster", HETERO, *VGG, "--out", str(out)], capsys)
    assert code == 0, err
    best = data["best"]
    assert "best plans per strategy family (objective: time)" in text
    assert f"winner: {best['label']}" in text
    plan = from_data(Plan, best["plan"], "best")
    # alike pipelines share a line: "pipelines 0-3 (4 x, batch 16 each): [a..b (n layers) on
    # TYPE id, id: used of capacity]"
    stage_map = [x for x in text.splitlines() if x.strip().startswith(("pipeline ", "pipelines "))]
    assert 1 <= len(stage_map) <= len(plan.pipelines)
    for pipe in plan.pipelines:
        line = next(x for x in stage_map if f" {pipe.stages[0].devices[0]}" in x)
        assert f"batch {pipe.batch}" in line
        for stage in pipe.stages:
            assert f"({len(stage.layers)} layers) on " in line
            assert stage.layers[0] in line and stage.layers[-1] in line
    # baseline rows (label and tag may wrap inside their table cell: rejoin the plan cells;
    # a baseline that is the same plan as a searched one is named in that row's "also:")
    cells: list[str] = []
    for x in text.splitlines():
        if x.startswith("│"):
            number, cell = (c.strip() for c in x.split("│")[1:3])
            if number:
                cells.append(cell)
            else:
                cells[-1] += " " + cell
    for name, base in data["baselines"].items():
        assert any(
            f"{name} baseline" in c and (c.startswith(base["label"]) or "also:" in c) for c in cells
        )
    assert "time-energy Pareto front" in text
    assert f"wrote {out}" in text
    for reason in data["reasons"]:
        assert f"- {reason}" in text
    written = load_file(Plan, out)  # same search, same winner
    assert written == dataclasses.replace(plan, cluster_digest=written.cluster_digest)


def test_table_keeps_the_best_searched_plan_of_a_family_behind_its_baseline() -> None:
    # ResNet-50 at batch 64 on the two-node cluster: the equal-pipeline baseline (gpipe)
    # ranks just above the best searched gpipe plan
    ref = ModelRef(name="resnet50", dataset="imagenet")
    opts = SearchOptions(batch=64, objective=parse_objective("time"))
    ranking = search(ref, build_graph(ref), load_cluster(Path(HETERO)), AnalyticalCompute(), opts)
    base = ranking.baselines["equal-pipeline"]
    rest = [r for r in ranking.ranked if r is not base]
    first = next(i for i, r in enumerate(rest) if r.candidate.family == "gpipe")
    # (already so with today's costs; reordered in case they change)
    ranking = dataclasses.replace(ranking, ranked=[*rest[:first], base, *rest[first:]])
    rows = table_rows(ranking, 20)
    assert ranking.baselines["equal-pipeline"] in rows
    assert ("gpipe", None) in [(r.candidate.family, r.candidate.baseline) for r in rows]


def test_predict_agrees_with_plan_when_a_profile_is_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "tiny.py"
    model.write_text(TINY)
    name = f"{model}:tiny"
    argv = ["profile", name, "--batches", "1,4,8", "--warmup", "1", "--steps", "2", "--json"]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    out = tmp_path / "plan.json"
    data = plan_json(["--cluster", LOCAL, "--model", name, "--batch", "8"], out, capsys)
    assert data["best"]["prediction"]["cost_source"].startswith("measured")
    again = predict_json(out, LOCAL, capsys)
    assert again["cost_source"] == data["best"]["prediction"]["cost_source"]
    assert again["iteration_time_s"] == pytest.approx(
        data["best"]["prediction"]["iteration_time_s"], rel=1e-12
    )


def test_time_limit_writes_the_best_plan_found_and_says_what_was_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    big = str(Path(HETERO).with_name("big-64.yaml"))
    data = plan_json(["--cluster", big, "--model", "gpt-tiny", "--time-limit", "0"], out, capsys)
    assert "simulating" in data["time_limited"]
    assert data["simulated"] >= 1
    assert any(r.startswith("time limit reached") for r in data["reasons"])
    plan = load_file(Plan, out)
    again = predict_json(out, big, capsys)
    assert again["feasible"] and plan.strategy == data["best"]["plan"]["strategy"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-devices", "0", "--max-devices must be >= 1 (got 0)"),
        ("--max-power", "-5", "--max-power must be > 0 (got -5)"),
        ("--deadline", "0", "--deadline must be > 0 (got 0)"),
        ("--budget", "-1", "--budget must be > 0 (got -1)"),
        ("--time-limit", "-1", "--time-limit must be >= 0 seconds (got -1)"),
    ],
)
def test_impossible_limits_name_their_option(
    option: str, value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    argv = ["plan", "--cluster", HETERO, *VGG, option, value, "--out", str(out)]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert err.strip() == f"hetplan: error: {message}"
    assert not out.exists()
