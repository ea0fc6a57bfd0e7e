"""predict() on synthetic layers of known cost: exact expectations."""

from __future__ import annotations

import json
import math

import pytest
from predict_synthetic import BWD_PER_SAMPLE, FWD_PER_SAMPLE, FixedCompute, cluster, graph

from hetplan.cost import comm
from hetplan.errors import InputError
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.predict import plan_from_options, predict

REF = ModelRef(name="syn")


def _plan(
    strategy: str, pipes: list[list[tuple[list[str], list[str]]]], batch: list[int], **kw: object
) -> Plan:
    return Plan(
        model=REF,
        strategy=strategy,
        global_batch=sum(batch),  # type: ignore[arg-type]
        pipelines=[
            PipelinePlan(stages=[StagePlan(layers=ls, devices=d) for ls, d in p], batch=b)
            for p, b in zip(pipes, batch, strict=True)
        ],
        **kw,  # type: ignore[arg-type]
    )


# Bytes moved per parameter by an fp32 optimizer step, by hand: SGD reads p, g and writes p
# (3 x 4 B); momentum also reads and writes its buffer (5 x 4 B); Adam reads p, g, m, v and
# writes p, m, v (7 x 4 B).
HAND_BYTES_PER_PARAM = {"sgd": 12.0, "momentum": 20.0, "adam": 28.0}


def _opt_s(params: float, optimizer: str = "sgd") -> float:
    # the synthetic device: 1e11 B/s at the default 0.8 memory efficiency
    return params * HAND_BYTES_PER_PARAM[optimizer] / (1e11 * 0.8)


def test_gpipe_matches_eq_6_1_plus_optimizer() -> None:
    g = graph(4, cut=0)
    c = cluster(4)
    stages = [([f"l{i}"], [f"n0.{i}"]) for i in range(4)]
    m, batch = 8, 32
    pred = predict(_plan("gpipe", [stages], [batch], micro_batches=m), g, c, FixedCompute())
    mb = batch // m
    per_stage = (FWD_PER_SAMPLE + BWD_PER_SAMPLE) * mb
    t_seq = m * 4 * per_stage
    expected = t_seq * (4 + m - 1) / (4 * m) + _opt_s(1000)
    assert pred.iteration_time_s == pytest.approx(expected, abs=1e-9)
    assert pred.samples_per_s == pytest.approx(batch / expected)
    assert pred.cost_source == "fixed"
    assert pred.micro_batch_sizes == [4]


def test_data_parallel_is_compute_plus_allreduce() -> None:
    g = graph(4, params=1000)  # 16 KB of gradients: one DDP bucket
    c = cluster(2, overhead=50e-6)
    pipes = [[(["l0", "l1", "l2", "l3"], [f"n0.{r}"])] for r in range(2)]
    pred = predict(_plan("dp", pipes, [16, 16]), g, c, FixedCompute())
    compute = 4 * (FWD_PER_SAMPLE + BWD_PER_SAMPLE) * 16
    ar = comm.allreduce_time(16000.0, ["n0.0", "n0.1"], c)
    assert ar > 50e-6
    assert pred.iteration_time_s == pytest.approx(compute + ar + _opt_s(4000), rel=1e-12)
    for d in pred.devices:
        assert d.exposed_comm_s == pytest.approx(ar)
        assert d.busy_fraction == pytest.approx((compute + _opt_s(4000)) / pred.iteration_time_s)
        assert d.power_w == pytest.approx(50 + 200 * d.busy_fraction)
    assert pred.power_w == pytest.approx(sum(d.power_w for d in pred.devices))
    assert pred.energy_j_per_iteration == pytest.approx(pred.power_w * pred.iteration_time_s)


def test_uneven_micro_batches_round_up() -> None:
    g = graph(2)
    c = cluster(2)
    stages = [(["l0"], ["n0.0"]), (["l1"], ["n0.1"])]
    pred = predict(_plan("1f1b", [stages], [10], micro_batches=4), g, c, FixedCompute())
    assert pred.micro_batch_sizes == [3]  # ceil(10 / 4)
    per = (FWD_PER_SAMPLE + BWD_PER_SAMPLE) * 3
    assert pred.iteration_time_s == pytest.approx(per * (2 + 4 - 1) + _opt_s(1000))


def test_epoch_energy_edp_and_dollars() -> None:
    g = graph(2)
    c = cluster(1, price=3.6)
    plan = _plan("dp", [[(["l0", "l1"], ["n0.0"])]], [8])
    pred = predict(plan, g, c, FixedCompute(), dataset_size=100)
    assert pred.iterations_per_epoch == math.ceil(100 / 8)
    assert pred.epoch_time_s == pytest.approx(13 * pred.iteration_time_s)
    assert pred.energy_j_per_epoch == pytest.approx(pred.power_w * pred.epoch_time_s)
    assert pred.edp == pytest.approx(pred.energy_j_per_epoch * pred.epoch_time_s)
    assert pred.edp_basis == "epoch"
    assert pred.dollars_per_epoch == pytest.approx(3.6 * pred.epoch_time_s / 3600)
    assert predict(plan, g, cluster(1), FixedCompute()).dollars_per_epoch is None


def test_infeasible_plan_is_an_answer_with_numbers() -> None:
    g = graph(2, params=10_000_000)  # 40 MB weights per layer
    c = cluster(1, memory=100e6)
    pred = predict(_plan("dp", [[(["l0", "l1"], ["n0.0"])]], [4]), g, c, FixedCompute())
    assert not pred.feasible
    (reason,) = pred.infeasible_reasons
    assert reason.startswith("n0.0: out of memory: needs ")
    assert "(100000000 B)" in reason
    dev = pred.devices[0]
    assert dev.memory_bytes > dev.memory_capacity_bytes == 100e6
    assert json.loads(json.dumps(pred.to_json()))["feasible"] is False


def test_memory_counts_in_flight_micro_batches() -> None:
    g = graph(2, params=0, saved=1000)
    c = cluster(2)
    stages = [(["l0"], ["n0.0"]), (["l1"], ["n0.1"])]
    gp = predict(_plan("gpipe", [stages], [16], micro_batches=4), g, c, FixedCompute())
    fb = predict(_plan("1f1b", [stages], [16], micro_batches=4), g, c, FixedCompute())
    # GPipe keeps all 4 micro-batches of 4 samples; 1F1B stage 0 keeps 2 (its warm-up depth).
    assert gp.devices[0].memory["activations"] == 1000 * 4 * 4
    assert fb.devices[0].memory["activations"] == 1000 * 4 * 2
    assert fb.devices[1].memory["activations"] == 1000 * 4 * 1


@pytest.mark.parametrize(
    ("pipes", "field"),
    [
        ([[(["l0"], ["n0.0"]), (["l2", "l3"], ["n0.1"])]], "pipelines.0.stages.1.layers.0"),
        ([[(["l0", "l1"], ["n0.0"]), (["l2"], ["n0.1"])]], "pipelines.0.stages"),
        ([[(["l0", "l1"], ["n0.0"]), (["l2", "zz"], ["n0.1"])]], "pipelines.0.stages.1.layers.1"),
        ([[(["l0", "l1"], ["n0.0"]), (["l2", "l3"], ["n9.9"])]], "pipelines.0.stages.1.devices.0"),
    ],
)
def test_plan_checked_against_graph_and_cluster(pipes: list, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError, match=field.replace(".", r"\.")):
        predict(_plan("gpipe", pipes, [4]), graph(4), cluster(2), FixedCompute())


def test_every_strategy_predicts() -> None:
    g = graph(4)
    c = cluster(4)
    for strategy, kw in [
        ("dp", {}),
        ("ps", {}),
        ("ps", {"ps_async": True}),
        ("gpipe", {"pp": 4}),
        ("1f1b", {"pp": 4}),
        ("pipedream", {"pp": 4}),
        ("hybrid", {"dp": 2}),
        ("hybrid", {"dp": 2, "sync": "wsp", "staleness": 1}),
    ]:
        plan = plan_from_options(g, c, model=REF, strategy=strategy, batch=32, **kw)  # type: ignore[arg-type]
        pred = predict(plan, g, c, FixedCompute())
        assert pred.feasible and pred.iteration_time_s > 0, strategy
        assert pred.samples_per_s == pytest.approx(32 / pred.iteration_time_s)
        assert 0 < pred.power_w <= 4 * 250


def test_plan_from_options_partition_and_speed_split() -> None:
    g = graph(6)
    c = cluster(3, speeds=(1.0, 0.5, 0.5))
    plan = plan_from_options(g, c, model=REF, strategy="dp", batch=40, compute=FixedCompute())
    assert [p.batch for p in plan.pipelines] == [20, 10, 10]  # in proportion to speed 2:1:1
    pipe = plan_from_options(g, c, model=REF, strategy="gpipe", batch=12, partition=[0, 1, 4])
    assert [s.layers for s in pipe.pipelines[0].stages] == [
        ["l0"],
        ["l1", "l2", "l3"],
        ["l4", "l5"],
    ]
    assert pipe.micro_batches == 12  # min(4 * pp, batch)
    even = plan_from_options(g, c, model=REF, strategy="1f1b", batch=8, micro_batch_size=2)
    assert [len(s.layers) for s in even.pipelines[0].stages] == [2, 2, 2]
    assert even.micro_batches == 4
    with pytest.raises(InputError, match="--partition"):
        plan_from_options(g, c, model=REF, strategy="gpipe", partition=[0, 3, 2])
    with pytest.raises(InputError, match="needs 6 devices"):
        plan_from_options(g, c, model=REF, strategy="hybrid", dp=2, pp=3)


@pytest.mark.parametrize("batch", [2, 16])
def test_dp_exposed_comm_matches_per_layer_overlap_model(batch: int) -> None:
    # Two independent implementations of DDP's overlap must agree: the simulated timeline and
    # cost.comm.overlapped_allreduce_exposed over the same buckets and per-layer backward times.
    g = graph(6, params=30_000_000)  # 120 MB per layer: several 2 MiB-capped buckets
    c = cluster(2, memory=64e9, overhead=1e-4)
    layers = [f"l{i}" for i in range(6)]
    plan = _plan("dp", [[(layers, ["n0.0"])], [(layers, ["n0.1"])]], [batch, batch], bucket_mb=2.0)
    pred = predict(plan, g, c, FixedCompute())
    buckets = comm.ddp_buckets([[120_000_000]] * 6, 2 * 2**20)
    bwd = [BWD_PER_SAMPLE * batch] * 6

    def allreduce(nbytes: float) -> float:
        return comm.allreduce_time(nbytes, ["n0.0", "n0.1"], c)

    exposed = comm.overlapped_allreduce_exposed(bwd, buckets, allreduce)
    assert exposed > 0
    compute = 6 * (FWD_PER_SAMPLE + BWD_PER_SAMPLE) * batch
    assert pred.devices[0].exposed_comm_s == pytest.approx(exposed, rel=1e-12)
    assert pred.iteration_time_s == pytest.approx(compute + exposed + _opt_s(180e6), rel=1e-12)


def test_recompute_reruns_forward_in_backward() -> None:
    g = graph(2)
    c = cluster(2)
    stages = [(["l0"], ["n0.0"]), (["l1"], ["n0.1"])]
    base = predict(_plan("gpipe", [stages], [8], micro_batches=2), g, c, FixedCompute())
    redo = predict(
        _plan("gpipe", [stages], [8], micro_batches=2, recompute=True), g, c, FixedCompute()
    )
    # Two stages, two micro-batches of 4: (f + b) * 3 slots becomes (2 f + b) * 3.
    extra = FWD_PER_SAMPLE * 4 * (2 + 2 - 1)
    assert redo.iteration_time_s - base.iteration_time_s == pytest.approx(extra)


@pytest.mark.parametrize(("strategy", "every_f", "last_f"), [("gpipe", 3, 2), ("1f1b", 3, 1)])
def test_recompute_except_last_skips_one_forward_per_stage(
    strategy: str, every_f: int, last_f: int
) -> None:
    """torchgpipe's ``except_last``: each stage's last micro-batch is not recomputed. By hand,
    2 stages, 2 micro-batches of 4, f = 4 ms forward, b = 8 ms backward (b + f recomputed),
    free cuts; the iteration beyond the optimizer step:

    - GPipe: stage 1 runs F0 F1 from f and its B0 from 3f; stage 0's B0 follows it, then its
      B1. Without recomputation 3f + 3b; every micro-batch recomputed 3f + 3(b + f) =
      6f + 3b; except the last, stage 0's B1 is b: 3f + 2(b + f) + b = 5f + 3b.
    - 1F1B (stage 0: F0 F1 B0 B1, stage 1: F0 B0 F1 B1): the path is F0 on both stages,
      stage 1's B0, F1 and B1, then stage 0's B1: 3f + 3b without recomputation,
      2f + 3(b + f) + f = 6f + 3b with every micro-batch, and except the last both B1 are b:
      2f + (b + f) + f + 2b = 4f + 3b.
    """
    g = graph(2)
    c = cluster(2)
    stages = [(["l0"], ["n0.0"]), (["l1"], ["n0.1"])]
    f = FWD_PER_SAMPLE * 4

    def time(**kw: object) -> float:
        plan = _plan(strategy, [stages], [8], micro_batches=2, **kw)
        return predict(plan, g, c, FixedCompute()).iteration_time_s

    base = time()
    assert time(recompute=True) - base == pytest.approx(every_f * f)
    assert time(recompute=True, recompute_mode="except_last") - base == pytest.approx(last_f * f)


def test_recompute_mode_shows_in_the_prediction() -> None:
    g = graph(2)
    c = cluster(2)
    stages = [(["l0"], ["n0.0"]), (["l1"], ["n0.1"])]
    plain = predict(_plan("gpipe", [stages], [8], micro_batches=2), g, c, FixedCompute())
    redo = {"recompute": True, "recompute_mode": "except_last"}
    last = predict(_plan("gpipe", [stages], [8], micro_batches=2, **redo), g, c, FixedCompute())
    assert plain.recompute == "off"
    assert last.recompute == "except each iteration's last micro-batch (torchgpipe's default)"
    assert json.loads(json.dumps(last.to_json()))["recompute"] == last.recompute


def test_partition_sets_the_number_of_stages() -> None:
    g = graph(6)
    c = cluster(4)
    plan = plan_from_options(g, c, model=REF, strategy="1f1b", batch=8, partition=[2, 4])
    assert [s.layers[0] for s in plan.pipelines[0].stages] == ["l0", "l2", "l4"]
    assert plan.devices == ["n0.0", "n0.1", "n0.2"]
