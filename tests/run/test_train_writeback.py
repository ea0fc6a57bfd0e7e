"""``hetplan train`` writes its measured stage times back into the profile store."""

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
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.profile.importer import import_file
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.select import compute_model
from hetplan.profile.store import load_profiles, save_profile
from hetplan.run.measure import Measurement, RankFigures
from hetplan.run.writeback import run_reason, write_measured
from hetplan.serde import load_file

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LOCAL = CLUSTERS / "local-cpu.yaml"
SHARED = CLUSTERS / "local-cpu-hetero.yaml"  # local.1 and local.2 share core 1 (speed 1/2)
LAYERS = ["stem", "layer1_0", "layer2_0", "pool", "head"]
REF = ModelRef(name="resnet-tiny")


def gpipe(devices: list[str], micro_batches: int = 2, **extra: Any) -> Plan:
    stages = [StagePlan(layers=LAYERS[:2], devices=[devices[0]]),
              StagePlan(layers=LAYERS[2:], devices=[devices[1]])]  # fmt: skip
    return Plan(
        model=REF, strategy="gpipe", global_batch=4, micro_batches=micro_batches,
        pipelines=[PipelinePlan(batch=4, stages=stages)], **extra,
    )  # fmt: skip


def measured(plan: Plan, per_rank: list[tuple[float, float]], steps: int = 3) -> Measurement:
    """A run of ``plan`` whose rank r measured (forward, backward) seconds per step."""
    ranks = [
        RankFigures(
            rank=r, device=d, pipeline=0, stage=r, step_s=f + b, forward_s=f, backward_s=b,
            optimizer_s=0.0, wait_s=0.0, peak_memory_bytes=0, memory_source="tensor bytes",
        )
        for r, (d, (f, b)) in enumerate(zip(plan.devices, per_rank, strict=True))
    ]  # fmt: skip
    return Measurement(
        plan=plan, cluster="test", steps=steps, warmup=1, measured_iteration_s=1.0,
        iteration_p10_s=1.0, iteration_p90_s=1.0, iteration_s=[1.0] * steps,
        loss=[0.0] * (steps + 1), ranks=ranks,
    )  # fmt: skip


def stage_sums(costs: list[Any], lo: int, hi: int) -> tuple[float, float]:
    return sum(c.fwd_s for c in costs[lo:hi]), sum(c.bwd_s for c in costs[lo:hi])


def test_new_profile_prices_each_stage_at_its_measured_time(tmp_path: Path) -> None:
    cluster = load_cluster(SHARED)
    plan = gpipe(["local.1", "local.2"])
    back = write_measured(measured(plan, [(6e-3, 9e-3), (4e-3, 5e-3)]), cluster, None, tmp_path)
    assert back.skipped == [] and [k for k, _ in back.written] == ["cpu"]
    [profile] = load_profiles(tmp_path)
    assert profile.batch_sizes == (2,)
    assert any("sharing cores (local.1, local.2)" in n for n in profile.notes)
    graph = build_graph(REF)
    dev = cluster.device("local.1")  # speed 1/2: stored times are at full speed
    costs = MeasuredCompute([profile]).layer_costs(graph, dev, 2)
    assert {c.source for c in costs} == {"measured on cpu"}
    # Per micro-batch (2 per step) the stages cost what was measured.
    assert stage_sums(costs, 0, 2) == pytest.approx((3e-3, 4.5e-3), rel=1e-12)
    assert stage_sums(costs, 2, 5) == pytest.approx((2e-3, 2.5e-3), rel=1e-12)
    # ... shared between a stage's layers as the prediction (analytical here) shared it.
    analytical = AnalyticalCompute("fp32").layer_costs(graph, dev, 2)
    assert costs[2].fwd_s / costs[4].fwd_s == pytest.approx(
        analytical[2].fwd_s / analytical[4].fwd_s, rel=1e-12
    )


def _store_with_import(tmp_path: Path) -> Path:
    rows = [
        {"layer": n, "device_type": "cpu", "dtype": "fp32", "micro_batch": b,
         "fwd_s": (i + 1) * b * 1e-4, "bwd_s": (i + 1) * (1 + b) * 1e-4}
        for b in (1, 4) for i, n in enumerate(LAYERS)
    ]  # fmt: skip
    file = tmp_path / "rows.json"
    file.write_text(json.dumps(rows))
    store = tmp_path / "store"
    [profile] = import_file(file, "resnet-tiny")
    save_profile(profile, store)
    return store


def test_merge_adds_the_size_and_keeps_unmeasured_layers(tmp_path: Path) -> None:
    store = _store_with_import(tmp_path)
    [old] = load_profiles(store)
    plan = gpipe(["local.0", "local.1"])
    m = measured(plan, [(8e-3, 6e-3), (0.0, 0.0)])  # the second stage measured nothing
    back = write_measured(m, load_cluster(LOCAL), None, store)
    assert [p.name for _, p in back.written] == ["cpu__resnet-tiny__3x32x32__b1-2-4__fp32.json"]
    assert [p.name for p in store.glob("*.json")] == [back.written[0][1].name]  # old one gone
    [new] = load_profiles(store)
    assert new.batch_sizes == (1, 2, 4)
    assert new.batches[0] == old.batches[0] and new.batches[2] == old.batches[1]
    at2 = {t.name: t for t in new.batches[1].layers}
    assert at2["stem"].fwd.median_s + at2["layer1_0"].fwd.median_s == pytest.approx(4e-3)
    assert at2["stem"].fwd.median_s / at2["layer1_0"].fwd.median_s == pytest.approx(
        old.fit("stem").fwd.at(2) / old.fit("layer1_0").fwd.at(2)
    )
    for name in LAYERS[2:]:
        assert at2[name].bwd.median_s == pytest.approx(old.fit(name).bwd.at(2))
    assert not any("one micro-batch size" in n for n in new.notes)


def test_partial_cover_without_a_stored_profile_writes_nothing(tmp_path: Path) -> None:
    plan = gpipe(["local.0", "local.1"])
    m = measured(plan, [(8e-3, 6e-3), (0.0, 0.0)])
    back = write_measured(m, load_cluster(LOCAL), None, tmp_path)
    assert back.written == []
    assert back.skipped == [
        "stages on cpu at micro-batch 2 cover 2 of resnet-tiny's 5 layers and the store has no "
        "profile of cpu to complete them"
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


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    return out.out


@pytest.mark.slow  # two real one-rank runs of a few steps: about 10-20 s on 2 busy cores
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
    argv = ["train", str(plan_file), "--cluster", str(LOCAL), "--steps", "2", "--warmup", "1"]
    text = _cli([*argv, "--out", str(out), "--profiles", str(store)], capsys)
    [path] = list(store.glob("cpu__*.json"))
    assert f"profile of cpu written back with the measured stage times: {path}" in text
    m = load_file(Measurement, out)
    assert m.prediction_source == "analytical"  # the store was empty before the run
    rank = m.ranks[0]

    graph = build_graph(REF)
    cluster = load_cluster(LOCAL)
    pred = predict(plan, graph, cluster, compute_model("fp32", directory=store))
    assert pred.cost_source == "measured on cpu"
    ops = [o for o in pred.timeline.spans() if o.iteration == 0]
    fwd = sum(o.end - o.start for o in ops if o.kind == "fwd")
    bwd = sum(o.end - o.start for o in ops if o.kind == "bwd")
    assert (fwd, bwd) == pytest.approx((rank.forward_s, rank.backward_s), rel=1e-9)

    quiet = tmp_path / "quiet"
    text = _cli(
        [*argv, "--out", str(out), "--profiles", str(quiet), "--no-save-profile", "--json"], capsys
    )
    assert json.loads(text)["profiles_written"] == []
    assert not list(quiet.glob("*.json"))
