"""Every plan ``hetplan plan`` writes is one ``hetplan train`` runs, or ``plan`` refused it up
front: the zoo's small models on the example CPU clusters, each runnable family, and a model
whose forward cannot be cut into stages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hetplan.cli.main import main

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"

BRANCHY = """
import torch
from torch import nn

class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 3)

    def forward(self, x):
        h = self.a(x)
        if h.shape[0] > 0:  # Python control flow on a traced value: torch.fx cannot trace it
            h = torch.relu(h)
        return self.b(h)

def branchy():
    return Branchy(), (6,)
"""


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def _plan_then_train(
    argv: list[str], cluster: Path, tmp: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    plan = tmp / "plan.json"
    code, _, err = _run(["plan", *argv, "--cluster", str(cluster), "--out", str(plan), "--json"],
                        capsys)  # fmt: skip
    assert code == 0, err
    args = ["train", str(plan), "--cluster", str(cluster), "--steps", "1", "--warmup", "0"]
    code, out, err = _run([*args, "--json", "--out", str(tmp / "m.json")], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    assert len(data["losses"]) == 1 and data["losses"][0] > 0
    pipes = json.loads(plan.read_text())["pipelines"]
    # One rank per device of every stage (a tensor-parallel stage has tp devices).
    assert len(data["ranks"]) == sum(len(s["devices"]) for p in pipes for s in p["stages"])
    assert Path(data["trace_chart"]).is_file()
    # Every rank's forward is in the comparison, measured from the executed trace itself.
    rows = data["trace_comparison"]["rows"]
    fwd = {r["device"]: r["measured_s"] for r in rows if r["kind"] == "fwd"}
    spans = {r["device"]: sum(a["end"] - a["start"] for a in r["actions"] if a["kind"] == "fwd")
             for r in data["ranks"]}  # fmt: skip
    assert fwd == pytest.approx(spans) and all(v > 0 for v in fwd.values())
    return data


@pytest.mark.parametrize("cluster", ["local-cpu", "local-cpu-4on2", "local-cpu-hetero"])
@pytest.mark.parametrize("model", ["gpt-tiny", "resnet-tiny", "bert-tiny"])
def test_planned_zoo_plans_run(
    model: str, cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--model", model, "--batch", "12", "--analytical"]
    _plan_then_train(argv, CLUSTERS / f"{cluster}.yaml", tmp_path, capsys)


@pytest.mark.parametrize("family", ["dp", "ps", "gpipe", "1f1b", "pipedream", "hybrid"])
def test_each_runnable_family_runs(
    family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--model", "gpt-tiny", "--batch", "16", "--strategies", family, "--analytical"]
    data = _plan_then_train(argv, CLUSTERS / "local-cpu-4on2.yaml", tmp_path, capsys)
    assert all(r["memory_source"] == "tensor bytes" for r in data["ranks"])
    assert all(r["predicted_memory_bytes"] > 0 for r in data["ranks"])


def test_model_that_cannot_be_cut_is_refused_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "branchy.py"
    src.write_text(BRANCHY)
    model = f"{src}:branchy"
    cluster = str(CLUSTERS / "local-cpu.yaml")
    plan = tmp_path / "plan.json"
    code, out, err = _run(["plan", "--model", model, "--cluster", cluster, "--batch", "8",
                           "--out", str(plan), "--json"], capsys)  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert json.loads(plan.read_text())["strategy"] == "dp"
    assert any("cannot be traced" in reason for reason in data["rejected"])
    argv = ["predict", "--model", model, "--cluster", cluster, "--strategy", "gpipe"]
    code, _, err = _run([*argv, "--batch", "8"], capsys)
    assert code == 2
    assert "cannot be traced into stages" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("family", "edit"),
    [("hybrid", {"sync": "wsp", "staleness": 1}), ("ps", {"ps_async": True, "staleness": 1})],
)
def test_asynchronous_variants_run(
    family: str, edit: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The planner proposes BSP hybrids and synchronous servers; the same plan files edited
    to WSP or an asynchronous server (what ``predict --sync wsp`` / ``--ps-async`` price) run."""
    cluster = CLUSTERS / "local-cpu-4on2.yaml"
    plan = tmp_path / "plan.json"
    argv = ["plan", "--model", "gpt-tiny", "--batch", "16", "--strategies", family,
            "--analytical", "--cluster", str(cluster), "--out", str(plan)]  # fmt: skip
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    data = json.loads(plan.read_text())
    plan.write_text(json.dumps({**data, **edit}))
    args = ["train", str(plan), "--cluster", str(cluster), "--steps", "3", "--warmup", "1"]
    code, out, err = _run([*args, "--out", str(tmp_path / "m.json")], capsys)
    assert code == 0, err
    assert "asynchronous (" in out and "the iterations needed to converge are not" in out
    losses = json.loads((tmp_path / "m.json").read_text())["loss"]
    assert len(losses) == 4 and all(x > 0 for x in losses)  # warm-up step included


@pytest.mark.parametrize("family", ["dp", "1f1b"])
def test_screened_tensor_parallel_plans_run(
    family: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tensor-parallel candidates the planner screens (on CPU they rarely win, so they are
    taken from the screening) are plan files ``train`` runs."""
    from collections import Counter

    from hetplan.cluster import load_cluster
    from hetplan.cost.compute import AnalyticalCompute
    from hetplan.graph import build_graph
    from hetplan.plan.context import Context
    from hetplan.plan.objective import parse_objective
    from hetplan.plan.options import SearchOptions
    from hetplan.plan.pricing import Pricing
    from hetplan.plan.screen import screen
    from hetplan.planspec import ModelRef
    from hetplan.serde import to_data

    cluster_path = CLUSTERS / "local-cpu-4on2.yaml"
    cluster = load_cluster(cluster_path)
    graph = build_graph("gpt-tiny")
    pricing = Pricing(graph=graph, cluster=cluster, compute=AnalyticalCompute())
    ctx = Context(model=ModelRef(name="gpt-tiny"), graph=graph, pricing=pricing, batch=16)
    opts = SearchOptions(batch=16, objective=parse_objective("time"), families=(family,))
    pool = [c for c in screen(ctx, cluster, opts, Counter(), None) if c.plan.tp == 2]
    assert pool, "no tensor-parallel candidate screened"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(to_data(pool[0].plan)))
    args = ["train", str(plan), "--cluster", str(cluster_path), "--steps", "2", "--warmup", "0"]
    code, out, err = _run([*args, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert len(data["ranks"]) == len(pool[0].plan.devices) and data["losses"][0] > 0


def test_separate_parameter_server_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A planned parameter server edited so that one device only serves (no worker): the
    run has a server-only rank after the three workers, and the report names it."""
    cluster = CLUSTERS / "local-cpu-4on2.yaml"
    plan = tmp_path / "plan.json"
    argv = ["plan", "--model", "gpt-tiny", "--batch", "12", "--strategies", "ps",
            "--analytical", "--cluster", str(cluster), "--out", str(plan)]  # fmt: skip
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    data = json.loads(plan.read_text())
    devices = [p["stages"][0]["devices"][0] for p in data["pipelines"]]
    workers = data["pipelines"][:-1]
    for p in workers:
        p["batch"] = data["global_batch"] // len(workers)
    data.update(pipelines=workers, ps_devices=[devices[0], devices[-1]])
    plan.write_text(json.dumps(data))
    args = ["train", str(plan), "--cluster", str(cluster), "--steps", "2", "--warmup", "0"]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    assert f"{devices[-1]}   server" in out
