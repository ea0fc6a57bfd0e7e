"""A block torch.fx cannot trace (``self.mask[:s, :s]`` with a traced ``s``) is named with its
error in ``inspect``, ``predict`` and ``plan``, and no tensor-parallel plan is offered for the
model (issue 30, item 5): before, the search swallowed the error and a TP rank was priced as
computing the whole block, without a word."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from hetplan.cli.main import main
from hetplan.cluster import load_cluster
from hetplan.cost.compute import AnalyticalCompute
from hetplan.graph import build_graph
from hetplan.graph.resolve import load_function
from hetplan.graph.tp_units import search_tp_units
from hetplan.plan.tp import has_tp_units, untraced_notes
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import predict

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "homogeneous-4gpu.yaml"
MODEL = f"{Path(__file__).with_name('untraceable_model.py')}:model"
ERROR = "TypeError: slice indices must be integers or None or have an __index__ method"
LAYERS = ["emb", "block0", "block1", "head"]


def _inspect_note(block: str) -> str:
    return (
        f"tensor parallelism not offered: torch.fx could not trace {block}.attn ({ERROR}), so "
        f"the attention and MLP units of layer {block} are unknown and every TP rank would "
        "compute that layer whole"
    )


PLAN_NOTE = (
    "no tensor-parallel plan offered: torch.fx could not trace a module in layers block0, "
    f"block1 (block0.attn: {ERROR}), so the attention and MLP units there are unknown "
    "(`hetplan inspect` names each)"
)
PREDICT_NOTE = (
    "tp 2: torch.fx could not trace a module in layers block0, block1 (block0.attn: "
    f"{ERROR}): every TP rank computes such a layer whole (its attention and MLP units are "
    "unknown)"
)


# --- the search: which modules it reports ------------------------------------------------------


def test_the_search_reports_the_deepest_untraceable_module() -> None:
    net, _ = load_function(MODEL)()
    units, failures = search_tp_units(net, LAYERS)
    # block0 fails, so does block0.attn; the attention's q/k/v/o and the block's up/down are
    # all lost, and only the deepest module is named (block0 itself is not)
    assert units == []
    assert failures == [("block0.attn", ERROR), ("block1.attn", ERROR)]


class _Sdpa(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (p(x).unflatten(-1, (2, 8)).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2))


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class _Branchy(nn.Module):
    """Untraceable itself (control flow on a value) around traceable children, with a
    Linear-ReLU-Linear ``16 -> inner -> out`` of its own (``a``, ``b``) after them if given."""

    def __init__(self, inner: int = 0, out: int = 0) -> None:
        super().__init__()
        self.attn, self.mlp = _Sdpa(), _Mlp()
        self.a: nn.Module = nn.Linear(16, inner) if inner else nn.Identity()
        self.b: nn.Module = nn.Linear(inner, out) if inner else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x + self.attn(x)
        return self.b(F.relu(self.a(x + self.mlp(x))))


def test_a_module_whose_children_cover_its_linears_is_no_failure() -> None:
    units, failures = search_tp_units(_Branchy(), [""])
    assert [(u.kind, u.module) for u in units] == [("attention", "attn"), ("mlp", "mlp")]
    assert failures == []


def test_uncovered_linears_that_cannot_form_a_unit_are_no_failure() -> None:
    # a 16 -> 8 -> 3 classifier: no d -> f -> d pair, so nothing TP could have split
    units, failures = search_tp_units(_Branchy(8, 3), [""])
    assert len(units) == 2
    assert failures == []


def test_uncovered_linears_that_may_form_a_unit_are_a_failure() -> None:
    # 16 -> 32 -> 16 outside the children: an MLP the trace would have found
    units, failures = search_tp_units(_Branchy(32, 16), [""])
    assert len(units) == 2
    assert failures == [("", "TraceError: symbolically traced variables cannot be used as "
                         "inputs to control flow")]  # fmt: skip


# --- the graph, the planner and predict --------------------------------------------------------


def test_the_untraceable_blocks_are_named_with_their_error() -> None:
    graph = build_graph(MODEL)
    by_name = {layer.name: layer for layer in graph.layers}
    assert {n: x.tp_error for n, x in by_name.items()} == {
        "emb": "",
        "block0": f"block0.attn: {ERROR}",
        "block1": f"block1.attn: {ERROR}",
        "head": "",
    }
    assert [n for n in graph.notes if "torch.fx" in n] == [
        _inspect_note("block0"),
        _inspect_note("block1"),
    ]
    # the blocks are priced whole; the vocabulary pair (100 rows) still splits, as `train` would
    assert [(x.tp_units, x.tp_split, x.tp_vocab) for x in graph.layers] == [
        (0, 100, "embedding"),
        (0, 0, ""),
        (0, 0, ""),
        (0, 100, "head"),
    ]
    assert not has_tp_units(graph)  # no TP plan is offered
    assert untraced_notes(graph) == [PLAN_NOTE]


def test_a_traceable_transformer_keeps_its_units() -> None:
    graph = build_graph("gpt-tiny")
    assert has_tp_units(graph)
    assert sum(layer.tp_units for layer in graph.layers) == 8  # 4 blocks x (attention + MLP)
    assert not any(layer.tp_error for layer in graph.layers)
    assert not [n for n in graph.notes if "torch.fx" in n]
    assert untraced_notes(graph) == []
    assert graph.untraced() == ""


def _plan(tp: int) -> Plan:
    graph = build_graph(MODEL)
    stage = StagePlan(layers=[x.name for x in graph.layers], devices=["n0.0", "n0.1"][:tp])
    return Plan(model=ModelRef(name=MODEL), strategy="dp", global_batch=2, tp=tp,
                pipelines=[PipelinePlan(stages=[stage], batch=2)])  # fmt: skip


def test_predict_of_a_tp_plan_says_the_blocks_are_computed_whole() -> None:
    graph = build_graph(MODEL)
    cluster = load_cluster(CLUSTER)
    at_two = predict(_plan(2), graph, cluster, AnalyticalCompute()).notes
    assert [n for n in at_two if n.startswith("tp 2")] == [PREDICT_NOTE]
    at_one = predict(_plan(1), graph, cluster, AnalyticalCompute()).notes
    assert not [n for n in at_one if "torch.fx" in n]


# --- the commands ------------------------------------------------------------------------------


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    return " ".join(out.out.split())  # rich wraps long lines


def test_inspect_predict_and_plan_print_the_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = ["--cluster", str(CLUSTER), "--analytical"]
    inspect = _run(["inspect", MODEL], capsys)
    assert f"note: {_inspect_note('block0')}" in inspect
    assert f"note: {_inspect_note('block1')}" in inspect
    predicted = _run(["predict", "--model", MODEL, *cluster, "--strategy", "dp", "--tp", "2",
                      "--batch", "8"], capsys)  # fmt: skip
    assert f"note: {PREDICT_NOTE}" in predicted
    plan = ["plan", "--model", MODEL, *cluster, "--batch", "8", "--out", str(tmp_path / "p.json")]
    assert f"note: {PLAN_NOTE}" in _run(plan, capsys)
    assert json.loads(_run([*plan, "--json"], capsys))["notes"] == [PLAN_NOTE]
    page = tmp_path / "p.html"
    _run([*plan, "--html", str(page)], capsys)
    assert html.escape(PLAN_NOTE) in page.read_text()


def test_train_of_a_tp_plan_says_the_blocks_run_whole() -> None:
    from hetplan.usecases.train import tp_notes

    def plan(devices: list[str]) -> Plan:
        stage = StagePlan(layers=LAYERS, devices=devices)
        return Plan(model=ModelRef(name=MODEL), strategy="gpipe", global_batch=4,
                    micro_batches=1, tp=len(devices),
                    pipelines=[PipelinePlan(batch=4, stages=[stage])])  # fmt: skip

    assert tp_notes(plan(["g.0", "g.1"])) == [PREDICT_NOTE]
    assert tp_notes(plan(["g.0"])) == []
