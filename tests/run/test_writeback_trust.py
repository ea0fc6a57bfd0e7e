"""Write-back learns only from good data: steady, long enough, device-timed runs; merged as a
median over runs; a single micro-batch size never prices another size."""

from __future__ import annotations

from pathlib import Path

import pytest
from writeback_helpers import CLUSTERS, LOCAL, REF, gpipe, measured

from hetplan.cli.writeback_view import writeback_json, writeback_lines
from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import load_profiles
from hetplan.run.loop.job import RankResult
from hetplan.run.measurement.measure import RankFigures, summarize
from hetplan.run.measurement.writeback import WriteBack, Written, run_reason, write_measured
from hetplan.run.measurement.writeback_gate import rank_reason

GPUS = CLUSTERS / "homogeneous-4gpu.yaml"  # 4 x A100-40GB


def test_short_runs_are_not_written_back() -> None:
    plan = gpipe(["local.0", "local.1"])
    why = run_reason(measured(plan, [(1.0, 1.0)] * 2, steps=4))
    assert why is not None and "timed 4 step(s)" in why and "at least 5" in why
    assert run_reason(measured(plan, [(1.0, 1.0)] * 2, steps=5)) is None


def test_unsteady_runs_are_not_written_back(tmp_path: Path) -> None:
    plan = gpipe(["local.0", "local.1"])
    # 11 iteration times 1.00, 1.01, ..., 1.10 s: p10 and p90 are the 2nd and 10th values
    # exactly (positions 0.1 * 10 and 0.9 * 10), 1.01 and 1.09: p90/p10 = 1.079.
    steady = [1.0 + i / 100 for i in range(11)]
    assert run_reason(measured(plan, [(1.0, 1.0)] * 2, 11, steady)) is None
    # Stretch the top half: 1.0..1.05, then 1.4..1.8: p90 = 1.7, p10 = 1.01: 1.68 > 1.25.
    wild = steady[:6] + [1.4 + i / 10 for i in range(5)]
    m = measured(plan, [(1.0, 1.0)] * 2, 11, wild)
    why = run_reason(m)
    assert why is not None and "too unstable" in why and "1.68" in why
    back = write_measured(m, load_cluster(LOCAL), None, tmp_path)
    assert back.written == [] and back.skipped == [why]
    assert list(tmp_path.iterdir()) == []


def _rank(device: str, timing: str) -> RankFigures:
    return RankFigures(
        rank=0, device=device, pipeline=0, stage=0, step_s=1.0, forward_s=0.4, backward_s=0.6,
        optimizer_s=0.0, wait_s=0.0, peak_memory_bytes=0, memory_source="tensor bytes",
        timing=timing,
    )  # fmt: skip


def test_gpu_ranks_timed_by_the_host_clock_are_not_trusted(tmp_path: Path) -> None:
    gpus, cpus = load_cluster(GPUS), load_cluster(LOCAL)
    gpu = gpus.devices[0].id
    why = rank_reason(_rank(gpu, "host clock"), gpus)
    assert why is not None and "kernel launches" in why and "A100-40GB" in why
    assert rank_reason(_rank(gpu, "cuda events"), gpus) is None
    assert rank_reason(_rank("local.0", "host clock"), cpus) is None
    # Through the write-back: nothing of the host-timed GPU ranks reaches the store.
    plan = gpipe([gpus.devices[0].id, gpus.devices[1].id])
    back = write_measured(measured(plan, [(4e-3, 8e-3)] * 2), gpus, None, tmp_path)
    assert back.written == [] and len(back.skipped) == 2
    assert all("kernel launches" in s for s in back.skipped)
    assert not list(tmp_path.glob("*.json"))


def _stage_costs(store: Path, batch: int) -> tuple[float, float]:
    """Forward and backward of the first stage (layers 0-1) at ``batch``, from the store."""
    graph, dev = build_graph(REF), load_cluster(LOCAL).device("local.0")
    costs = MeasuredCompute(load_profiles(store)).layer_costs(graph, dev, batch)
    return sum(c.fwd_s for c in costs[:2]), sum(c.bwd_s for c in costs[:2])


def test_runs_merge_by_a_median_weighted_by_steps(tmp_path: Path) -> None:
    plan, cluster = gpipe(["local.0", "local.1"]), load_cluster(LOCAL)
    # Stage 1 per step (2 micro-batches): 8 ms then 12 ms forward over 10 steps each.
    write_measured(measured(plan, [(8e-3, 16e-3), (4e-3, 4e-3)]), cluster, None, tmp_path)
    assert _stage_costs(tmp_path, 2) == pytest.approx((4e-3, 8e-3), rel=1e-9)
    back = write_measured(measured(plan, [(12e-3, 24e-3), (4e-3, 4e-3)]), cluster, None, tmp_path)
    assert [w.runs for w in back.written] == [(2,)]
    assert len(list(tmp_path.glob("*.json"))) == 1  # one written-back file, merged
    # Equal steps: the median of two is their mean, (4 + 6) / 2 ms per micro-batch forward.
    assert _stage_costs(tmp_path, 2) == pytest.approx((5e-3, 10e-3), rel=1e-9)
    # A third run of 30 steps at 6 ms holds 30 of 50 steps: more than half, so it is the median.
    m = measured(plan, [(12e-3, 24e-3), (4e-3, 4e-3)], steps=30)
    write_measured(m, cluster, None, tmp_path)
    assert _stage_costs(tmp_path, 2) == pytest.approx((6e-3, 12e-3), rel=1e-9)
    [p] = load_profiles(tmp_path)
    prov = p.batches[0].provenance
    assert prov is not None and (prov.runs, prov.steps) == (3, 50)


def test_one_size_does_not_move_another_size_beyond_the_spread(tmp_path: Path) -> None:
    """Written back at micro-batch 2 only: micro-batch 4 keeps its price within the run's own
    spread (it is priced as before, by the analytical model)."""
    plan, cluster = gpipe(["local.0", "local.1"]), load_cluster(LOCAL)
    graph, dev = build_graph(REF), cluster.device("local.0")
    before = sum(c.fwd_s + c.bwd_s for c in AnalyticalCompute("fp32").layer_costs(graph, dev, 4))
    # Iteration times 1.00..1.10 s: p90/p10 = 1.09 / 1.01 (see the unsteady test).
    times = [1.0 + i / 100 for i in range(11)]
    bound = 1.09 / 1.01 - 1
    # Measured stage times ~10x the analytical: through the origin they would move size 4 10x.
    stage = 10 * sum(c.fwd_s for c in AnalyticalCompute("fp32").layer_costs(graph, dev, 2))
    m = measured(plan, [(2 * stage, 4 * stage), (stage, 2 * stage)], 11, times)
    assert write_measured(m, cluster, None, tmp_path).written
    model = MeasuredCompute(load_profiles(tmp_path))
    after = sum(c.fwd_s + c.bwd_s for c in model.layer_costs(graph, dev, 4))
    assert abs(after - before) / before <= bound
    # ... while micro-batch 2 is priced at what was measured (stage 1: 2 x stage per 2).
    assert _stage_costs(tmp_path, 2)[0] == pytest.approx(stage, rel=1e-9)


def test_a_second_size_gives_a_line_through_both(tmp_path: Path) -> None:
    cluster = load_cluster(LOCAL)
    two, four = gpipe(["local.0", "local.1"], 2), gpipe(["local.0", "local.1"], 1)
    write_measured(measured(two, [(8e-3, 16e-3), (4e-3, 4e-3)]), cluster, None, tmp_path)
    write_measured(measured(four, [(6e-3, 12e-3), (3e-3, 3e-3)]), cluster, None, tmp_path)
    # Stage 1 forward per micro-batch: 4 ms at 2, 6 ms at 4: the line 2 ms + 1 ms * b.
    assert _stage_costs(tmp_path, 2)[0] == pytest.approx(4e-3, rel=1e-9)
    assert _stage_costs(tmp_path, 4)[0] == pytest.approx(6e-3, rel=1e-9)
    assert _stage_costs(tmp_path, 3)[0] == pytest.approx(5e-3, rel=1e-9)
    assert _stage_costs(tmp_path, 1)[0] == pytest.approx(3e-3, rel=1e-9)
    [p] = load_profiles(tmp_path)
    assert p.batch_sizes == (2, 4) and len(p.history) == 2
    assert not any("one micro-batch size" in n for n in p.notes)


def test_the_written_back_file_is_renamed_with_its_sizes(tmp_path: Path) -> None:
    """Its name lists the batch set: adding a size writes the new name, the old file goes."""
    cluster = load_cluster(LOCAL)
    for micro_batches in (2, 1):  # micro-batch 2, then 4
        plan = gpipe(["local.0", "local.1"], micro_batches)
        write_measured(measured(plan, [(1e-3, 1e-3)] * 2), cluster, None, tmp_path)
    assert [p.name for p in tmp_path.glob("*.json")] == [
        "cpu__resnet-tiny__3x32x32__b2-4__fp32__written-back.json"
    ]


def test_train_says_what_it_wrote_or_why_not() -> None:
    path = Path("/store/cpu__m__8__b2-4__fp32__written-back.json")
    w = Written(device_type="cpu", path=path, sizes=(2, 4), runs=(3, 1), steps=30, spread=1.12,
                shadowed=(4,))  # fmt: skip
    [line, why] = writeback_lines(WriteBack(written=[w], skipped=["the run timed no step"]))
    assert line == (
        "profile of cpu written back with the measured stage times: micro-batch 2, 4 (median "
        "of 3 runs, 1 run; this run 30 timed steps, p90/p10 1.12): "
        f"{path}; at micro-batch 4 the profile of cpu measured on purpose still prices it "
        "(written-back figures never replace it)"
    )
    assert why == "profile not written back: the run timed no step"
    assert writeback_lines(None) == ["profile not written back: --no-save-profile"]
    data = writeback_json(WriteBack(written=[w]))
    assert data["profiles_written"][0]["micro_batches"] == [2, 4]
    assert data["profiles_written"][0]["shadowed_by_profile"] == [4]


def test_the_gate_judges_each_rank_compute_where_the_run_kept_it() -> None:
    plan = gpipe(["local.0", "local.1"])
    # Per step: forward 1.0..1.10 s (11 steps after 1 warm-up), backward 0: p90/p10 = 1.09/1.01.
    fwd = [5.0] + [1.0 + i / 100 for i in range(11)]
    raw = [
        RankResult(rank=r, device=d, pipeline=0, stage=r, step_s=[3.0] * 12,
                   forward_s=fwd, backward_s=[0.0] * 12, optimizer_s=[0.0] * 12,
                   loss=[1.0] * 12, peak_memory_bytes=1, memory_source="tensor bytes")
        for r, d in enumerate(plan.devices)
    ]  # fmt: skip
    m = summarize(plan, raw, warmup=1)
    assert [r.compute_spread for r in m.ranks] == pytest.approx([1.09 / 1.01] * 2)
    assert run_reason(m) is None
    # A steady iteration but one rank's compute spread 1.5: refused, naming the figure.
    m.ranks[1].compute_spread = 1.5
    assert "p90/p10 over the 11 timed steps is 1.50" in (run_reason(m) or "")
    # Wild iterations but steady compute: the compute is what is written, so it passes.
    m.ranks[1].compute_spread = 1.1
    m.iteration_s = [1.0, 3.0] * 6
    assert run_reason(m) is None
