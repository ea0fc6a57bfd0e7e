"""``hetplan train`` writes its measured stage times back into the profile store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from train_helpers import cli, train_until_written
from writeback_helpers import LAYERS, LOCAL, REF, SHARED, gpipe, measured, store_with_import

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.select import compute_model
from hetplan.profile.store import load_profile, load_profiles
from hetplan.run.measurement.measure import Measurement
from hetplan.run.measurement.writeback import run_reason, write_measured
from hetplan.serde import load_file


def stage_sums(costs: list[Any], lo: int, hi: int) -> tuple[float, float]:
    return sum(c.fwd_s for c in costs[lo:hi]), sum(c.bwd_s for c in costs[lo:hi])


def test_new_profile_prices_each_stage_at_its_measured_time(tmp_path: Path) -> None:
    cluster = load_cluster(SHARED)
    plan = gpipe(["local.1", "local.2"])
    back = write_measured(measured(plan, [(6e-3, 9e-3), (4e-3, 5e-3)]), cluster, None, tmp_path)
    assert back.skipped == [] and [w.device_type for w in back.written] == ["cpu"]
    [w] = back.written
    assert (w.sizes, w.runs, w.steps, w.shadowed) == ((2,), (1,), 10, ())
    assert w.path.name == "cpu__resnet-tiny__3x32x32__b2__fp32__written-back.json"
    [profile] = load_profiles(tmp_path)
    assert profile.batch_sizes == (2,) and profile.source == "written-back"
    assert profile.batches[0].provenance is not None
    assert profile.batches[0].provenance.steps == 10
    assert any("sharing cores (local.1, local.2)" in n for n in profile.notes)
    graph = build_graph(REF)
    dev = cluster.device("local.1")  # speed 1/2: stored times are at full speed
    costs = MeasuredCompute([profile]).layer_costs(graph, dev, 2)
    assert {c.source for c in costs} == {"measured on cpu (written back)"}
    # Per micro-batch (2 per step) the stages cost what was measured.
    assert stage_sums(costs, 0, 2) == pytest.approx((3e-3, 4.5e-3), rel=1e-12)
    assert stage_sums(costs, 2, 5) == pytest.approx((2e-3, 2.5e-3), rel=1e-12)
    # ... shared between a stage's layers as the prediction (analytical here) shared it.
    analytical = AnalyticalCompute("fp32").layer_costs(graph, dev, 2)
    assert costs[2].fwd_s / costs[4].fwd_s == pytest.approx(
        analytical[2].fwd_s / analytical[4].fwd_s, rel=1e-12
    )


def test_a_profile_measured_on_purpose_is_never_edited_and_still_prices(tmp_path: Path) -> None:
    store = store_with_import(tmp_path)
    [(imported_path, imported)] = [(p, load_profile(p)) for p in store.glob("*.json")]
    before = imported_path.read_bytes()
    plan = gpipe(["local.0", "local.1"])
    m = measured(plan, [(8e-3, 6e-3), (0.0, 0.0)])  # the second stage measured nothing
    back = write_measured(m, load_cluster(LOCAL), None, store)
    [w] = back.written
    assert w.path.name == "cpu__resnet-tiny__3x32x32__b2__fp32__written-back.json"
    assert w.shadowed == (2,)  # the imported fit over 1 and 4 prices micro-batch 2
    assert imported_path.read_bytes() == before
    new = load_profile(w.path)
    at2 = {t.name: t for t in new.batches[0].layers}
    # Stage 1: 8 ms per step over 2 micro-batches, shared as the imported fits share it.
    assert at2["stem"].fwd.median_s + at2["layer1_0"].fwd.median_s == pytest.approx(4e-3)
    assert at2["stem"].fwd.median_s / at2["layer1_0"].fwd.median_s == pytest.approx(
        imported.fit("stem").fwd.at(2) / imported.fit("layer1_0").fwd.at(2)
    )
    for name in LAYERS[2:]:  # unmeasured: the imported costs at that size
        assert at2[name].bwd.median_s == pytest.approx(imported.fit(name).bwd.at(2))
    # The imported profile still prices every size, micro-batch 2 included.
    graph, dev = build_graph(REF), load_cluster(LOCAL).device("local.0")
    costs = MeasuredCompute(load_profiles(store)).layer_costs(graph, dev, 2)
    assert {c.source for c in costs} == {"measured on cpu"}
    assert costs[0].fwd_s == pytest.approx(imported.fit("stem").fwd.at(2))


def test_written_back_figures_fill_a_size_a_one_size_profile_lacks(tmp_path: Path) -> None:
    """A profiled file of micro-batch 4 only prices 4; the write-back at 2 prices 2."""
    store = store_with_import(tmp_path, sizes=(4,), source="profiled")
    plan = gpipe(["local.0", "local.1"])  # micro-batch 2
    back = write_measured(
        measured(plan, [(8e-3, 6e-3), (6e-3, 4e-3)]), load_cluster(LOCAL), None, store
    )
    assert [w.shadowed for w in back.written] == [()]
    graph, dev = build_graph(REF), load_cluster(LOCAL).device("local.0")
    model = MeasuredCompute(load_profiles(store))
    assert {c.source for c in model.layer_costs(graph, dev, 2)} == {
        "measured on cpu (written back)"
    }
    assert {c.source for c in model.layer_costs(graph, dev, 4)} == {"measured on cpu"}


def test_partial_cover_without_a_stored_profile_writes_nothing(tmp_path: Path) -> None:
    plan = gpipe(["local.0", "local.1"])
    m = measured(plan, [(8e-3, 6e-3), (0.0, 0.0)])
    back = write_measured(m, load_cluster(LOCAL), None, tmp_path)
    assert back.written == []
    assert back.skipped == [
        "stages on cpu at micro-batch 2 cover 2 of resnet-tiny's 5 layers and the store has no "
        "profile of cpu at that size to complete them"
    ]
    assert list(tmp_path.iterdir()) == []


def test_runs_that_cannot_be_written_back_say_why() -> None:
    plan = gpipe(["local.0", "local.1"])
    assert run_reason(measured(plan, [(1.0, 1.0)] * 2, steps=0)) == "the run timed no step"
    assert "no compute" in (run_reason(measured(plan, [(0.0, 0.0)] * 2)) or "")
    redo = dataclasses.replace(plan, recompute=True)
    assert "recomputation" in (run_reason(measured(redo, [(1.0, 1.0)] * 2)) or "")
    assert "asynchronous" in (
        run_reason(measured(dataclasses.replace(plan, strategy="pipedream"), [(1.0, 1.0)] * 2))
        or ""
    )


@pytest.mark.slow  # three real one-rank runs (more on a busy machine): about 25 s on 2 cores
def test_train_writes_back_and_the_next_prediction_uses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = Plan(
        model=REF, strategy="dp", global_batch=4, micro_batches=2,
        pipelines=[PipelinePlan(batch=4, stages=[StagePlan(layers=LAYERS, devices=["local.0"])])],
    )  # fmt: skip
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dataclasses.asdict(plan)))
    store, out = tmp_path / "store", tmp_path / "m.json"
    argv = ["train", str(plan_file), "--cluster", str(LOCAL), "--out", str(out)]
    report = train_until_written([*argv, "--profiles", str(store)], capsys)
    [path] = list(store.glob("cpu__*.json"))
    assert path.name.endswith("__b2__fp32__written-back.json")
    [written] = report["profiles_written"]
    assert written["path"] == str(path) and written["device_type"] == "cpu"
    assert (written["micro_batches"], written["runs"], written["steps"]) == ([2], [1], 30)
    m = load_file(Measurement, out)
    assert m.prediction_source == "analytical"  # the store was empty before the run
    rank = m.ranks[0]

    graph = build_graph(REF)
    cluster = load_cluster(LOCAL)
    pred = predict(plan, graph, cluster, compute_model("fp32", directory=store))
    assert pred.cost_source == "measured on cpu (written back)"
    ops = [o for o in pred.timeline.spans() if o.iteration == 0]
    fwd = sum(o.end - o.start for o in ops if o.kind == "fwd")
    bwd = sum(o.end - o.start for o in ops if o.kind == "bwd")
    assert (fwd, bwd) == pytest.approx((rank.forward_s, rank.backward_s), rel=1e-9)

    quiet = tmp_path / "quiet"
    short = [*argv, "--steps", "2", "--warmup", "0", "--profiles", str(quiet)]
    text = cli([*short, "--no-save-profile", "--json"], capsys)
    assert json.loads(text)["profiles_written"] == []
    assert "the run timed 2 step(s); a write-back needs at least 5" in cli(short, capsys)
    assert not list(quiet.glob("*.json"))
