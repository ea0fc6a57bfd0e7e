"""Staleness in ``hetplan plan``: the table column, the JSON fields, the explanation of an
asynchronous winner, synchronous plans by default (issue 27), ``--asynchronous`` and the old
``--sync-only``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main
from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.plan.objective import parse_objective
from hetplan.plan.search import Ranked, SearchOptions, search
from hetplan.planspec import ModelRef
from hetplan.usecases.plan import without_asynchronous

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = str(CLUSTERS / "local-cpu.yaml")
# gpt-tiny on two CPU devices, batch 2: asynchronous PipeDream is the fastest what-if plan (at
# 16 the later stage's wait for the tied embedding's gradient, cost.ties, tips it to dp; at 4
# and 8 too, since the cluster's all-reduce was measured back to back: 1.7 ms, from 3.7)
GPT = ["--model", "gpt-tiny", "--batch", "2", "--cluster", LOCAL, "--analytical"]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def _plan(argv: list[str], tmp: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, text, err = _run(["plan", *GPT, *argv, "--out", str(tmp / "p.json"), "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(text)
    return data


def _rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [data["best"], *data["candidates"], *data["baselines"].values(), *data["pareto"]]


def test_json_has_staleness_for_every_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan(["--what-if", "--asynchronous"], tmp_path, capsys)
    for row in _rows(data):
        assert {"asynchronous", "staleness", "staleness_text"} <= set(row)
        sync = row["family"] != "pipedream"
        assert row["asynchronous"] is not sync
        if sync:
            assert (row["staleness"], row["staleness_text"]) == (0, "sync")
    pipe = data["best"]
    assert pipe["family"] == "pipedream"
    stages, m = len(pipe["plan"]["pipelines"][0]["stages"]), pipe["plan"]["micro_batches"]
    assert pipe["staleness"] == -(-(stages - 1) // m) >= 1
    assert pipe["staleness_text"] == f"async ≤{pipe['staleness']} it"


def test_asynchronous_winner_is_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan(["--what-if", "--asynchronous"], tmp_path, capsys)
    best = data["best"]
    n = best["staleness"]
    line = next(r for r in data["reasons"] if "asynchronous" in r)
    assert line.startswith(f"{best['label']} is asynchronous: ")
    assert f"stale by up to {n} iteration" in line
    assert "iteration time only" in line and "not modelled" in line


def test_synchronous_winner_gets_no_staleness_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan(["--sync-only"], tmp_path, capsys)
    assert not any(row["asynchronous"] for row in _rows(data))
    assert not any("asynchronous" in r for r in data["reasons"])


def test_table_shows_the_staleness(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --wide: a staleness column; the default table (100 columns): a tag in the plan cell
    argv = ["plan", *GPT, "--what-if", "--asynchronous", "--out", str(tmp_path / "p.json")]
    code, text, err = _run([*argv, "--wide"], capsys)
    assert code == 0, err
    header = next(x for x in text.splitlines() if "iteration" in x and "plan" in x)
    assert "staleness" in header
    rows = [x for x in text.splitlines() if x.startswith("│") and "ms" in x]
    assert rows and all(("│ sync " in x) or ("│ async ≤" in x) for x in rows)
    assert any("pipedream" in x and "async ≤1 it" in x for x in rows)
    assert "is asynchronous" in text and "not modelled" in text
    code, text, err = _run(argv, capsys)
    assert code == 0, err
    header = next(x for x in text.splitlines() if "iteration" in x and "plan" in x)
    assert "staleness" not in header
    rows = [x for x in text.splitlines() if x.startswith("│") and "ms" in x]
    assert any("pipedream" in x and "(async ≤1 it)" in x for x in rows)
    assert not any("sync" in x for x in rows if "pipedream" not in x)


@pytest.mark.parametrize("flags", [[], ["--sync-only"]])
def test_plans_are_synchronous_by_default(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same search with --asynchronous picks PipeDream (test above); without, it is not
    # planned at all, and --sync-only (the old option) changes nothing.
    data = _plan(["--what-if", *flags], tmp_path, capsys)
    assert data["best"]["family"] != "pipedream"
    assert all(c["family"] != "pipedream" for c in data["candidates"])
    assert not any(row["asynchronous"] for row in _rows(data))
    plan = json.loads((tmp_path / "p.json").read_text())
    assert plan["strategy"] != "pipedream"


def test_naming_an_asynchronous_family_asks_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plan(["--strategies", "pipedream"], tmp_path, capsys)
    assert data["best"]["family"] == "pipedream" and data["best"]["asynchronous"]


def test_sync_only_with_asynchronous_is_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    argv = ["plan", *GPT, "--sync-only", "--asynchronous", "--out", str(out)]
    code, stdout, err = _run(argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "--sync-only" in err and "--asynchronous" in err
    assert stdout == "" and not out.exists()


@pytest.mark.parametrize("strategies", ["pipedream", "dp,pipedream"])
@pytest.mark.parametrize("what_if", [[], ["--what-if"]])
def test_sync_only_with_pipedream_is_one_line_error(
    strategies: str, what_if: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    argv = ["plan", *GPT, *what_if, "--sync-only", "--strategies", strategies, "--out", str(out)]
    code, stdout, err = _run(argv, capsys)
    assert code == 2
    assert err.startswith("hetplan: error: ") and err.count("\n") == 1, err
    assert "--sync-only" in err and "--strategies" in err and "pipedream" in err
    assert stdout == "" and not out.exists()


def test_tune_takes_asynchronous(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = _run(["tune", "--help"], capsys)
    assert code == 0 and "--asynchronous" in text


def _as_wsp(r: Ranked) -> Ranked:
    plan = dataclasses.replace(r.candidate.plan, sync="wsp", staleness=1)
    return dataclasses.replace(r, candidate=dataclasses.replace(r.candidate, build=lambda: plan))


def test_without_asynchronous_drops_wsp_hybrids() -> None:
    # The search makes no WSP plan today: turn a searched BSP hybrid into one.
    ref = ModelRef(name="gpt-tiny")
    cluster = load_cluster(CLUSTERS / "local-cpu-4on2.yaml")
    opts = SearchOptions(batch=16, objective=parse_objective("time"), families=("dp", "hybrid"))
    ranking = search(ref, build_graph(ref), cluster, AnalyticalCompute(), opts)
    hybrids = [r for r in ranking.ranked if r.candidate.family == "hybrid"]
    assert hybrids and len(hybrids) < len(ranking.ranked)
    assert without_asynchronous(ranking, cluster) is ranking  # nothing to drop
    wsp = [_as_wsp(r) if r in hybrids else r for r in ranking.ranked]
    ranking = dataclasses.replace(ranking, ranked=wsp)
    kept = without_asynchronous(ranking, cluster)
    assert kept.ranked == [r for r in wsp if r.candidate.family != "hybrid"]
    assert kept.rejected["asynchronous (add --asynchronous)"] == len(hybrids)
    assert "asynchronous (add --asynchronous)" not in ranking.rejected  # the original is untouched
    assert kept.pareto and all(r in kept.ranked for r in kept.pareto)
    assert kept.reasons[0].startswith(kept.best.candidate.label)
