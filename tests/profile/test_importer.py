"""``hetplan import-profile``: per-layer costs from a CSV or JSON file drive predictions."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hetplan.cli.cmd_profile import register
from hetplan.cluster import load_cluster
from hetplan.graph import build_graph
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.select import compute_model
from hetplan.profile.store import PROFILE_DIR_ENV, load_profile, load_profiles
from hetplan.profile.types import Profile
from hetplan.serde import from_data, to_data

LOCAL = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "local-cpu.yaml"
MODEL = "resnet-tiny"  # cifar10 by default: input 3x32x32
LAYERS = ("stem", "layer1_0", "layer2_0", "pool", "head")
# Per layer at micro-batch 4: forward and backward seconds (distinct, so sums are telling).
TIMES = {name: (1e-3 * (i + 1), 2.5e-3 * (i + 1)) for i, name in enumerate(LAYERS)}
HEADER = ["layer", "device_type", "dtype", "micro_batch", "tp", "fwd_s", "bwd_s"]


def rows(
    batch: int = 4, tp: int = 1, scale: float = 1.0, kind: str = "cpu"
) -> list[dict[str, Any]]:
    return [
        {"layer": n, "device_type": kind, "dtype": "fp32", "micro_batch": batch, "tp": tp,
         "fwd_s": f * scale, "bwd_s": b * scale}
        for n, (f, b) in TIMES.items()
    ]  # fmt: skip


def write_csv(path: Path, data: list[dict[str, Any]], header: list[str] = HEADER) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in data:
            w.writerow([r.get(c, "") for c in header])
    return path


def invoke(args: list[str], store: Path) -> Any:
    app = typer.Typer()

    @app.callback()
    def group() -> None:
        """Test app."""

    register(app)
    return CliRunner().invoke(app, args, env={"COLUMNS": "200", PROFILE_DIR_ENV: str(store)})


def import_ok(file: Path, store: Path, *extra: str) -> Any:
    result = invoke(["import-profile", str(file), "--model", MODEL, *extra], store)
    assert result.exit_code == 0, result.output
    return result


def one_device_plan() -> Plan:
    return Plan(
        model=ModelRef(name=MODEL),
        strategy="dp",
        global_batch=4,
        pipelines=[
            PipelinePlan(batch=4, stages=[StagePlan(layers=list(LAYERS), devices=["local.0"])])
        ],
    )


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_imported_costs_price_a_one_device_plan(tmp_path: Path, fmt: str) -> None:
    store = tmp_path / "store"
    file = tmp_path / f"rows.{fmt}"
    if fmt == "csv":
        write_csv(file, rows())
    else:
        file.write_text(json.dumps([{k: v for k, v in r.items() if k != "tp"} for r in rows()]))
    result = import_ok(file, store)
    [path] = list(store.glob("*.json"))
    assert path.name == "cpu__resnet-tiny__3x32x32__b4__fp32.json"
    assert f"stored in {path}" in result.output
    profile = load_profile(path)
    assert profile.tp == 1 and profile.optimizer == "none"
    assert profile.source == "imported"
    assert any("prices micro-batch 4 only" in n for n in profile.notes)

    plan = one_device_plan()
    graph = build_graph(plan.model)
    pred = predict(plan, graph, load_cluster(LOCAL), compute_model("fp32", directory=store))
    assert pred.cost_source == "measured on cpu"
    hand = sum(f + b for f, b in TIMES.values())
    ops = list(pred.timeline.spans())
    compute = sum(o.end - o.start for o in ops if o.kind in ("fwd", "bwd"))
    assert compute == pytest.approx(hand, rel=1e-12)
    # The one thing predict adds to a single device's step: the optimizer step, which the file
    # does not give (priced analytically: SGD over resnet-tiny's 0.01M parameters, ~us).
    opt = sum(o.end - o.start for o in ops if o.kind == "optimizer")
    assert 0 < opt < 1e-3 * hand
    assert pred.iteration_time_s == pytest.approx(hand + opt, rel=1e-12)


def test_two_sizes_fit_both_exactly_and_tp_rows_stay_apart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    data = rows(batch=2) + rows(batch=8, scale=3.0) + rows(batch=8, tp=2, scale=0.6)
    import_ok(write_csv(tmp_path / "rows.csv", data), store)
    names = sorted(p.name for p in store.glob("*.json"))
    assert names == [
        "cpu__resnet-tiny__3x32x32__b2-8__fp32.json",
        "cpu__resnet-tiny__3x32x32__b8__fp32__tp2.json",
    ]
    single = load_profile(store / names[0])
    for name, (f, b) in TIMES.items():
        fit = single.fit(name)
        assert fit.fwd.at(2) == pytest.approx(f) and fit.fwd.at(8) == pytest.approx(3 * f)
        assert fit.bwd.at(2) == pytest.approx(b) and fit.bwd.at(8) == pytest.approx(3 * b)

    graph = build_graph(ModelRef(name=MODEL))
    dev = load_cluster(LOCAL).device("local.0")
    model = MeasuredCompute(load_profiles(store))
    per_rank = model.tp_layer_costs(graph, dev, 8, 2)
    assert per_rank is not None
    assert [c.fwd_s for c in per_rank] == pytest.approx([0.6 * f for f, _ in TIMES.values()])
    assert {c.source for c in per_rank} == {"measured on cpu (tp 2)"}
    assert model.tp_layer_costs(graph, dev, 8, 4) is None
    # A single device is priced from the tp = 1 profile only.
    one = model.layer_costs(graph, dev, 8)
    assert [c.bwd_s for c in one] == pytest.approx([3 * b for _, b in TIMES.values()])


def test_profile_files_without_tp_still_load(make_profile: Callable[..., Profile]) -> None:
    data = to_data(make_profile())
    del data["tp"]
    assert from_data(Profile, data, "old.json").tp == 1


def _bad_rows() -> list[tuple[str, list[dict[str, Any]], list[str], str]]:
    """(case, rows, header, what the message must say)."""
    base, h = rows(), HEADER
    first, rest = base[0], base[1:]

    def at0(**cells: Any) -> list[dict[str, Any]]:
        return [dict(first, **cells), *rest]

    neg = [*base[:3], dict(base[3], fwd_s=-1), base[4]]
    return [
        ("unknown layer", at0(layer="stemm"), h, "row 1 (line 2), column layer: 'stemm' is not"),
        (
            "duplicate",
            [*base, dict(base[2])],
            h,
            "row 6 (line 7), column layer: duplicate of row 3",
        ),
        ("missing layer", base[:-1], h, "micro_batch 4, tp 1: missing layers head"),
        ("text time", at0(bwd_s="fast"), h, "row 1 (line 2), column bwd_s: 'fast'"),
        ("negative", neg, h, "row 4 (line 5), column fwd_s: '-1'"),
        ("nan", at0(fwd_s="nan"), h, "row 1 (line 2), column fwd_s: 'nan'"),
        ("batch 0", at0(micro_batch=0), h, "row 1 (line 2), column micro_batch: 0 is below 1"),
        ("batch 2.5", at0(micro_batch=2.5), h, "row 1 (line 2), column micro_batch: '2.5'"),
        ("tp 0", at0(tp=0), h, "row 1 (line 2), column tp: 0 is below 1"),
        ("dtype", at0(dtype="fp8"), h, "row 1 (line 2), column dtype: 'fp8'"),
        ("empty cell", at0(device_type=""), h, "row 1 (line 2), column device_type: empty"),
        ("no column", base, [c for c in h if c != "bwd_s"], "header: missing column 'bwd_s'"),
        ("extra column", base, [*h, "speed"], "header: unknown column 'speed'"),
    ]


@pytest.mark.parametrize(
    ("case", "data", "header", "message"),
    _bad_rows(),
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_bad_csv_is_one_line_and_writes_nothing(
    tmp_path: Path, case: str, data: list[dict[str, Any]], header: list[str], message: str
) -> None:
    store = tmp_path / "store"
    file = write_csv(tmp_path / "bad.csv", data, header)
    result = invoke(["import-profile", str(file), "--model", MODEL], store)
    assert result.exit_code == 2, (case, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hetplan: error: {file}: "), lines
    assert message in lines[0], (case, lines[0])
    assert not store.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"rows": []}', "expected a JSON list of row objects"),
        ("[1]", "row 1: expected an object"),
        ('[{"layer": "stem"}]', "row 1: missing column 'device_type'"),
        ('[{"layer": "stem", "device_type": "cpu", "dtype": "fp32", "micro_batch": true, '
         '"fwd_s": 1, "bwd_s": 1}]', "row 1, column micro_batch: True is not an integer"),
        ("[", "invalid JSON"),
        ("[]", "no rows"),
    ],
)  # fmt: skip
def test_bad_json_is_one_line_and_writes_nothing(
    tmp_path: Path, content: str, message: str
) -> None:
    store = tmp_path / "store"
    file = tmp_path / "bad.json"
    file.write_text(content)
    result = invoke(["import-profile", str(file), "--model", MODEL], store)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not store.exists()


def test_output_paths(tmp_path: Path) -> None:
    two = write_csv(tmp_path / "two.csv", rows() + rows(kind="A100-40GB"))
    out = tmp_path / "one.json"
    result = invoke(["import-profile", str(two), "--model", MODEL, "--out", str(out)], tmp_path)
    assert result.exit_code == 2
    assert "the file gives 2 profiles" in result.output and not out.exists()
    (tmp_path / "file").write_text("")
    below_file = tmp_path / "file" / "x.json"
    result = invoke(
        ["import-profile", str(two), "--model", MODEL, "--out", str(below_file)], tmp_path
    )
    assert result.exit_code == 2 and "--out" in result.output
    one = write_csv(tmp_path / "one.csv", rows(kind="A100-40GB"))
    import_ok(one, tmp_path / "store", "--out", str(out))
    assert load_profile(out).device_type == "A100-40GB"
