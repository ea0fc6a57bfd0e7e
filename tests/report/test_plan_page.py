"""The plan page: its data against the prediction, its HTML, and its rendering in Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, Plan
from hetplan.predict import Prediction, plan_from_options, predict
from hetplan.report.plan_page import render_plan_page, write_plan_page
from hetplan.report.plan_page_data import (
    KIND_NAMES,
    ParetoPoint,
    gantt_data,
    memory_rows,
    stage_layers,
)
from hetplan.report.plan_page_figures import memory_figure

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "hetero-2node.yaml"
CHROMIUM_TIMEOUT_S = 120
FORWARD_RGB = (76, 114, 176)  # KIND_COLORS["fwd"]


@pytest.fixture(scope="module")
def planned() -> tuple[Plan, Prediction]:
    """gpt-tiny, hybrid: 4 replicas x 2 stages, 4 micro-batches on 8 devices (every kind of
    a synchronous pipeline: forward, backward, send, allreduce, optimizer)."""
    cluster = load_cluster(CLUSTER)
    ref = ModelRef(name="gpt-tiny")
    graph = build_graph(ref)
    compute = AnalyticalCompute()
    plan = plan_from_options(
        graph, cluster, model=ref, strategy="hybrid", batch=32, pp=2, micro_batches=4,
        compute=compute,
    )  # fmt: skip
    return plan, predict(plan, graph, cluster, compute)


def _participants(resources: tuple[str, ...]) -> set[str]:
    """Devices named by resource strings (``compute:d``, ``comm:d``, ``link:a>b``)."""
    out: set[str] = set()
    for res in resources:
        _, rest = res.split(":", 1)
        out.update(rest.split(">"))
    return out


def _expected_bars(pred: Prediction) -> Counter[str]:
    """Bars per kind, counted from the schedule: one per device an action occupies, a send
    as ``send`` on its sender and ``recv`` on its receiver."""
    want: Counter[str] = Counter()
    for act in pred.timeline.schedule.actions:
        if act.kind == "send":
            want["send"] += 1
            want["recv"] += 1
        else:
            want[act.kind] += len(_participants(act.resources))
    return want


def test_bars_per_kind_match_the_timeline(planned: tuple[Plan, Prediction]) -> None:
    _, pred = planned
    g = gantt_data(pred)
    ops = pred.timeline.spans()
    assert {o.kind for o in ops} == {"fwd", "bwd", "send", "allreduce", "optimizer"}
    assert Counter(b.kind for b in g.bars) == _expected_bars(pred)
    assert g.total_bars == len(g.bars) == sum(_expected_bars(pred).values())
    assert g.omitted == []
    # Each op of a kind is drawn (compute ops exactly once, on their own device).
    for kind in ("fwd", "bwd", "optimizer", "allreduce", "send"):
        want = {i for i, o in enumerate(ops) if o.kind == kind}
        assert {b.op for b in g.bars if b.kind == kind} == want, kind
    assert {b.op for b in g.bars if b.kind == "recv"} == {i for i, o in enumerate(ops)
                                                          if o.kind == "send"}  # fmt: skip
    for b in g.bars:
        op = ops[b.op]
        assert (b.start_s, b.end_s) == (op.start, op.end)
        if b.kind in ("fwd", "bwd", "optimizer"):
            assert b.row == op.device
        if b.kind == "recv":
            assert b.row == op.peer != op.device
    assert g.rows == list(pred.timeline.schedule.devices)
    # Legend: every kind, named in words.
    assert g.kinds == ["fwd", "bwd", "optimizer", "send", "recv", "allreduce"]
    assert all(k in KIND_NAMES for k in g.kinds)


def test_hover_names_stage_layers_microbatch_and_bytes(
    planned: tuple[Plan, Prediction],
) -> None:
    plan, pred = planned
    g = gantt_data(pred, layers=stage_layers(plan))
    first_stage = plan.pipelines[0].stages[0].layers
    fwd = next(b for b in g.bars if b.kind == "fwd" and pred.timeline.spans()[b.op].stage == 0)
    assert fwd.hover.startswith("<b>forward</b>")
    assert f"{first_stage[0]} … {first_stage[-1]} ({len(first_stage)} layers)" in fwd.hover
    assert "micro-batch " in fwd.hover and "duration " in fwd.hover
    send = next(b for b in g.bars if b.kind == "send")
    act = pred.timeline.schedule.actions[send.op]
    assert act.nbytes > 0 and "bytes 65.54 KB" in send.hover
    assert f"to {act.peer}" in send.hover


def test_memory_rows_are_the_prediction_s(planned: tuple[Plan, Prediction]) -> None:
    _, pred = planned
    rows = memory_rows(pred)
    assert [r.device for r in rows] == [d.id for d in pred.devices]
    assert [r.used_bytes for r in rows] == [d.memory_bytes for d in pred.devices]
    assert [r.capacity_bytes for r in rows] == [d.memory_capacity_bytes for d in pred.devices]
    assert rows[0].capacity_bytes == pytest.approx(32e9, rel=0.1)  # a V100-32GB
    assert not any(r.over for r in rows)
    assert len(memory_rows(pred, max_rows=3)) == 3


def test_over_capacity_device_is_its_own_trace(planned: tuple[Plan, Prediction]) -> None:
    _, pred = planned
    over = _with_oversized_first_device(pred)
    fig = memory_figure(memory_rows(over))
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["predicted memory (over capacity)"].x) == [over.devices[0].id]
    assert list(by_name["predicted memory (fits)"].x) == [d.id for d in over.devices[1:]]
    gb = [d.memory_bytes / 1e9 for d in over.devices[1:]]
    assert list(by_name["predicted memory (fits)"].y) == pytest.approx(gb)
    assert len(by_name["capacity"].x) == len(over.devices)


def test_bar_cap_keeps_the_earliest_and_says_so(planned: tuple[Plan, Prediction]) -> None:
    _, pred = planned
    full = gantt_data(pred)
    g = gantt_data(pred, max_bars=10)
    assert len(g.bars) == 10 < full.total_bars == g.total_bars
    assert max(b.start_s for b in g.bars) <= sorted(b.start_s for b in full.bars)[10]
    assert any(f"first 10 of these {full.total_bars} bars" in o for o in g.omitted)
    # The optimizer steps come last: none survives, and the page says so.
    assert any("optimizer step" in o and o.startswith("No bar") for o in g.omitted)
    page = render_plan_page(pred, title="capped", max_bars=10)
    assert f"(10 of {full.total_bars} bars drawn)" in page
    assert f"Only the first 10 of these {full.total_bars} bars" in page


def test_row_cap_says_how_many_devices_are_left_out(planned: tuple[Plan, Prediction]) -> None:
    _, pred = planned
    g = gantt_data(pred, max_rows=3)
    devices = list(pred.timeline.schedule.devices)
    assert g.rows == devices[:3]
    assert {b.row for b in g.bars} <= set(devices[:3])
    left = g.total_bars - len(g.bars)
    assert left > 0
    assert g.omitted[0] == (
        f"Only the first 3 of {len(devices)} devices are drawn: the {left} bars of the other "
        f"{len(devices) - 3} devices are left out."
    )


def test_page_without_search(planned: tuple[Plan, Prediction], tmp_path: Path) -> None:
    _, pred = planned
    path = tmp_path / "plan.html"
    write_plan_page(path, pred, title="gpt-tiny <hybrid> & co")
    page = path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["plan.html"]  # no temporary left
    assert "<title>gpt-tiny &lt;hybrid&gt; &amp; co</title>" in page
    assert "came from <code>predict</code>" in page
    assert 'id="pareto"' not in page
    assert 'id="gantt"' in page and 'id="memory"' in page
    # plotly.js inline exactly once, nothing fetched from the network.
    assert len(re.findall(r"plotly\.js v\d", page)) == 1
    assert "<script src=" not in page
    for term in ("strategy", "iteration time", "throughput", "energy per iteration", "power"):
        assert f"<td>{term}</td>" in page
    assert "<td>hybrid</td>" in page
    assert '<td class="ok">yes</td>' in page


def test_page_with_search(planned: tuple[Plan, Prediction]) -> None:
    plan, pred = planned
    points = [
        ParetoPoint("fast", 0.01, 9.0, True),
        ParetoPoint("frugal", 0.03, 4.0, True),
        ParetoPoint("neither", 0.04, 10.0, False),
    ]
    page = render_plan_page(pred, title="t", pareto=points, chosen=points[0], plan=plan)
    assert 'id="pareto"' in page
    assert "3 candidates priced by the search, 2 of them on the Pareto front" in page
    assert "came from <code>predict</code>" not in page


def test_importing_the_page_does_not_import_plotly() -> None:
    code = (
        "import sys, hetplan.report.plan_page, hetplan.report.plan_page_figures; "
        "assert 'plotly' not in sys.modules, 'plotly imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _with_oversized_first_device(pred: Prediction) -> Prediction:
    first = pred.devices[0]
    big = replace(first, memory_bytes=2 * first.memory_capacity_bytes)
    return replace(pred, devices=[big, *pred.devices[1:]], feasible=False,
                   infeasible_reasons=[f"{first.id}: out of memory (test)"])  # fmt: skip


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", "--virtual-time-budget=5000",
    ]  # fmt: skip
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True,
                          timeout=CHROMIUM_TIMEOUT_S, check=False)  # fmt: skip


def _section(dom: str, div_id: str, next_id: str | None) -> str:
    start = dom.index(f'id="{div_id}"')
    return dom[start : dom.index(f'id="{next_id}"', start) if next_id else len(dom)]


def _legend(section: str) -> list[str]:
    return re.findall(r'class="legendtext"[^>]*>([^<]*)<', section)


def test_page_renders_in_headless_chromium(
    planned: tuple[Plan, Prediction], tmp_path: Path
) -> None:
    plan, pred = planned
    over = _with_oversized_first_device(pred)
    points = [ParetoPoint("a", 0.01, 9.0, True), ParetoPoint("b", 0.02, 12.0, False)]
    page = tmp_path / "plan.html"
    write_plan_page(page, over, title="browser", pareto=points, chosen=points[0], plan=plan)
    done = _chromium(["--dump-dom", page.as_uri()], tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert dom.count('class="main-svg"') >= 6  # plotly draws two per figure
    gantt = _section(dom, "gantt", "memory")
    memory = _section(dom, "memory", "pareto")
    pareto = _section(dom, "pareto", None)
    # Every Gantt bar is drawn, and the legend names each kind in words.
    assert gantt.count('<g class="point">') == sum(_expected_bars(pred).values())
    assert gantt.count('<g class="trace bars"') == 6
    assert _legend(gantt) == [
        "forward", "backward", "optimizer step", "send (point-to-point)",
        "receive (point-to-point)", "allreduce (gradient sync)",
    ]  # fmt: skip
    assert "time in the iteration (ms)" in gantt
    # One memory bar per device (the oversized one in its own red trace) and the capacity.
    assert memory.count('<g class="point">') == len(pred.devices)
    assert "fill: rgb(198, 40, 40)" in memory  # the over-capacity colour
    assert _legend(memory) == [
        "predicted memory (fits)", "predicted memory (over capacity)", "capacity",
    ]  # fmt: skip
    assert "memory (GB)" in memory
    assert _legend(pareto) == ["other candidates", "Pareto front", "this plan"]


def test_page_screenshot_is_not_blank(planned: tuple[Plan, Prediction], tmp_path: Path) -> None:
    _, pred = planned
    page = tmp_path / "plan.html"
    write_plan_page(page, pred, title="screenshot")
    png = tmp_path / "shot.png"
    done = _chromium(
        [f"--screenshot={png}", "--window-size=1200,1400", page.as_uri()], tmp_path / "profile"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    from PIL import Image

    with Image.open(png) as img:
        rgb = img.convert("RGB")
        assert rgb.size == (1200, 1400)
        colors = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
    assert len(colors) > 50  # text, bars, axes: not a blank page
    assert FORWARD_RGB in colors  # the forward bars were painted
