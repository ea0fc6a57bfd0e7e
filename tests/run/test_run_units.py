"""Pure parts of the runtime: rank layout, plan checks, node commands, summaries."""

from __future__ import annotations

import dataclasses
import shlex
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.graph.split import split_program
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.launch._agent import describe_failure
from hetplan.run.launch._rank import is_peer_loss
from hetplan.run.launch.commands import node_commands, node_run
from hetplan.run.launch.spawn import failure_error
from hetplan.run.loop.job import RankResult
from hetplan.run.measurement.measure import percentile, summarize, with_prediction
from hetplan.run.setup.layout import (
    check_executable,
    pipeline_ranks,
    rank_roles,
    stage_ranks,
    tp_ranks,
)
from hetplan.run.setup.model import MLPSource, layer_names

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
LAYERS = ["fc0", "act0", "fc1", "act1", "head"]


def _hybrid(strategy: str = "hybrid", micro: int = 2) -> Plan:
    return Plan(
        model=ModelRef(name="mlp"),
        strategy=strategy,  # type: ignore[arg-type]
        global_batch=12,
        micro_batches=micro,
        pipelines=[
            PipelinePlan(
                stages=[
                    StagePlan(layers=LAYERS[:3], devices=[f"v100.{2 * p}"]),
                    StagePlan(layers=LAYERS[3:], devices=[f"v100.{2 * p + 1}"]),
                ],
                batch=b,
            )
            for p, b in enumerate([8, 4])
        ],
    )


def test_rank_roles_and_groups() -> None:
    plan = _hybrid()
    roles = rank_roles(plan)
    assert [(r.rank, r.pipeline, r.stage, r.device) for r in roles] == [
        (0, 0, 0, "v100.0"),
        (1, 0, 1, "v100.1"),
        (2, 1, 0, "v100.2"),
        (3, 1, 1, "v100.3"),
    ]
    assert [(r.batch, r.batch_offset) for r in roles] == [(8, 0), (8, 0), (4, 8), (4, 8)]
    assert pipeline_ranks(plan) == [[0, 1], [2, 3]]
    assert stage_ranks(plan) == [[0, 2], [1, 3]]


def test_what_does_not_run_says_so() -> None:
    """Every family runs; tensor parallelism with PipeDream and fp16 with an asynchronous
    plan do not, and say why."""
    stages = [
        StagePlan(layers=LAYERS[:2], devices=["a", "b"]),
        StagePlan(layers=LAYERS[2:], devices=["c", "d"]),
    ]
    plan = Plan(
        model=ModelRef(name="mlp"), strategy="pipedream", global_batch=4, tp=2,
        pipelines=[PipelinePlan(stages=stages, batch=4)],
    )  # fmt: skip
    with pytest.raises(InputError, match=r"^tp: tensor parallelism \(tp = 2\) runs with dp"):
        check_executable(plan, LAYERS)
    check_executable(dataclasses.replace(plan, strategy="1f1b"), LAYERS)
    fp16 = dataclasses.replace(plan, tp=1, pipelines=[PipelinePlan(stages=[
        StagePlan(layers=LAYERS[:2], devices=["a"]), StagePlan(layers=LAYERS[2:], devices=["c"])
    ], batch=4)], model=ModelRef(name="mlp", dtype="fp16"))  # fmt: skip
    with pytest.raises(InputError, match=r"^model.dtype: fp16's loss scaling"):
        check_executable(fp16, LAYERS)


def test_tensor_parallel_ranks_by_hand() -> None:
    """2 pipelines x 2 stages x 2 shards: rank (p * 2 + s) * 2 + t."""
    dev = iter("abcdefgh")
    pipes = [
        PipelinePlan(
            stages=[
                StagePlan(layers=ls, devices=[next(dev), next(dev)])
                for ls in (LAYERS[:2], LAYERS[2:])
            ],
            batch=4,
        )
        for _ in range(2)
    ]
    plan = Plan(
        model=ModelRef(name="mlp"), strategy="hybrid", global_batch=8, tp=2, pipelines=pipes
    )
    roles = rank_roles(plan)
    assert [(r.pipeline, r.stage, r.tp_rank, r.device) for r in roles[:4]] == [
        (0, 0, 0, "a"), (0, 0, 1, "b"), (0, 1, 0, "c"), (0, 1, 1, "d"),
    ]  # fmt: skip
    assert pipeline_ranks(plan, 1) == [[1, 3], [5, 7]]
    assert stage_ranks(plan) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert tp_ranks(plan) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_plan_checks_name_the_numbers() -> None:
    with pytest.raises(InputError, match=r"pipelines.1.batch \(5\) must be a multiple of"):
        plan = _hybrid(micro=2)
        plan.pipelines[1].batch = 5
        check_executable(plan, LAYERS)
    one = Plan(
        model=ModelRef(name="mlp"),
        strategy="1f1b",
        global_batch=8,
        micro_batches=1,
        pipelines=[_hybrid().pipelines[0]],
    )
    check_executable(one, LAYERS)  # hetplan's 1F1B runs any m (warm-up = min(S - s - 1, m))
    with pytest.raises(
        InputError, match=r"every layer of the model once; missing or repeated: extra$"
    ):
        check_executable(_hybrid(), [*LAYERS, "extra"])
    with pytest.raises(InputError, match=r"layer 'fc1' is not a layer of the model at depth 1"):
        check_executable(_hybrid(), ["fc0", "act0", "act1", "head"])


def test_stage_programs_keep_parameter_names() -> None:
    model = MLPSource(widths=(3, 4, 2)).build(0, "cpu")
    assert layer_names(MLPSource(widths=(3, 4, 2))) == ["fc0", "act0", "head"]
    stage = split_program(model, [["fc0"], ["act0", "head"]]).stages[1].module
    assert [n for n, _ in stage.named_parameters()] == ["head.weight", "head.bias"]
    assert stage.head is model.head


def test_node_commands_one_per_node_any_ranks_each() -> None:
    """Uneven nodes (3 ranks on v100, 1 on t4): one command per node, the first node (rank
    0's) first and hosting the rendezvous; the same command but --node."""
    cluster = load_cluster(CLUSTERS / "hetero-2node.yaml")
    plan = Plan(
        model=ModelRef(name="vgg11", dataset="cifar10"),
        strategy="gpipe",
        global_batch=8,
        micro_batches=4,
        pipelines=[
            PipelinePlan(
                stages=[
                    StagePlan(layers=["a"], devices=["v100.0"]),
                    StagePlan(layers=["b"], devices=["v100.1"]),
                    StagePlan(layers=["c"], devices=["v100.2"]),
                    StagePlan(layers=["d"], devices=["t4.1"]),
                ],
                batch=8,
            )
        ],
    )
    cmds = node_commands(
        plan, cluster, plan_path=Path("p.json"), cluster_path=Path("c.yaml"),
        rdzv="v100:29400", options=["--steps", "5"],
    )  # fmt: skip
    assert [shlex.split(c) for c in cmds] == [
        ["hetplan", "train", "p.json", "--cluster", "c.yaml", "--node", node,
         "--rdzv", "v100:29400", "--steps", "5"]
        for node in ("v100", "t4")
    ]  # fmt: skip
    first = node_run(plan, cluster, "v100", "127.0.0.1:29400")
    second = node_run(plan, cluster, "t4", "127.0.0.1:29400")
    assert (first.ranks, first.is_host, second.ranks, second.is_host) == (
        [0, 1, 2],
        True,
        [3],
        False,
    )
    assert first.nodes == ["v100", "v100", "v100", "t4"] and first.nnodes == 2
    assert first.run_id == second.run_id
    assert node_run(plan, cluster, "t4", "h:1", "job-42").run_id == "job-42"
    with pytest.raises(InputError, match="--node 'x': the plan places no device there"):
        node_run(plan, cluster, "x", "h:1")
    for bad in ("nohost", "h:", "h:0", "h:70000", ":5"):
        with pytest.raises(InputError, match="--rdzv"):
            node_run(plan, cluster, "t4", bad)


def test_a_failed_rank_names_its_node_and_a_silent_peer_names_itself() -> None:
    nodes = ["a", "a", "b"]
    err = failure_error(1, "ValueError: bad", "tb", nodes)
    assert str(err) == "rank 1 (node a) failed: ValueError: bad" and err.rank == 1
    seen = "RuntimeError: peer lost: rank 2 (node b) stopped responding (seen by rank 0 on node a)"
    assert str(failure_error(0, seen, "", nodes)) == (
        "rank 2 (node b) stopped responding (seen by rank 0 on node a)"
    )
    assert (
        str(failure_error(3, "exited with code 1", "", None)) == "rank 3 failed: exited with code 1"
    )


def test_summary_medians_and_error() -> None:
    plan = _hybrid()
    raw = [
        RankResult(
            rank=r, device=f"d{r}", pipeline=r // 2, stage=r % 2,
            step_s=[9.0, 1.0 + r, 2.0 + r, 3.0 + r],
            forward_s=[0.0, 0.25, 0.25, 0.25],
            backward_s=[0.0, 0.5, 0.5, 0.5],
            optimizer_s=[0.0, 0.125, 0.125, 0.125],
            loss=[0.5, 0.25, 0.25, 0.25] if r % 2 else [None] * 4,
            peak_memory_bytes=100, memory_source="peak RSS",
        )
        for r in range(4)
    ]  # fmt: skip
    m = summarize(plan, raw, warmup=1)
    # Slowest rank (3) per timed step: 4, 5, 6.
    assert m.iteration_s == [4.0, 5.0, 6.0]
    assert m.measured_iteration_s == 5.0
    assert m.iteration_p10_s == pytest.approx(4.2)
    assert m.loss == [1.0, 0.5, 0.5, 0.5]
    assert m.ranks[0].step_s == 2.0
    assert m.ranks[0].wait_s == pytest.approx(2.0 - 0.875)
    m = with_prediction(m, 4.0, "analytical")
    assert m.relative_error == pytest.approx(0.25)
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_failure_descriptions() -> None:
    killed = SimpleNamespace(exitcode=-signal.SIGKILL, signal_name=lambda: "SIGKILL")
    assert describe_failure(killed)[0] == "killed by signal SIGKILL (out of memory?)"
    msg = {"message": "RuntimeError: \n  Failed to run\n more", "extraInfo": {"py_callstack": "tb"}}
    raised = SimpleNamespace(exitcode=1, message=msg)
    assert describe_failure(raised) == ("RuntimeError: Failed to run", "tb")
    assert is_peer_loss(
        RuntimeError("[pair.cc:537] Read error [127.0.0.1]: Connection reset by peer")
    )
    assert not is_peer_loss(ValueError("Connection reset by peer"))


def test_the_failure_that_explains_the_others_is_reported_first() -> None:
    from hetplan.run.launch._agent import _root_cause_first

    failures = [
        (0, "RuntimeError: peer lost: lost the rendezvous store on node a: closed", ""),
        (1, "RuntimeError: Connection closed by peer", ""),
        (2, "RuntimeError: peer lost: rank 3 (node b) stopped responding (seen by rank 2)", ""),
        (4, "killed by signal SIGKILL (out of memory?)", ""),
    ]
    assert [f[0] for f in _root_cause_first(failures)] == [4, 2, 0, 1]
