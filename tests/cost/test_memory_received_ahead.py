"""A later 1F1B stage holds the next micro-batch's received input during its backward (the
runtime posts a receive when the previous stage sends), and a WSP stage that reads data holds
two iterations' batches as PipeDream's does (issue 26, item 4): ``received_ahead``,
``with_inputs_ahead`` and what ``predict`` charges, counted by hand on a two-layer graph."""

from __future__ import annotations

import pytest
from test_memory_precision import CUT_FP32, ClusterFactory, _plan, two_layers

from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.memory import stage_memory, with_inputs_ahead
from hetplan.planspec import ModelRef
from hetplan.planspec.order import Order, in_flight, received_ahead
from hetplan.predict import plan_from_options, predict


@pytest.mark.parametrize(
    ("order", "stage", "stages", "n", "ahead"),
    [
        ("1f1b", 0, 2, 4, 0),  # the first stage reads its input from the batch
        ("1f1b", 1, 2, 4, 1),  # the last: F0 B0 while stage 0 sent F1
        ("1f1b", 1, 3, 8, 1),  # a middle stage
        ("1f1b", 1, 2, 1, 0),  # no micro-batch after the in-flight one
        ("1f1b", 1, 3, 2, 0),  # m < S: both in flight at once
        ("gpipe", 1, 2, 4, 0),  # peaks after its last forward
    ],
)
def test_received_ahead(order: Order, stage: int, stages: int, n: int, ahead: int) -> None:
    assert received_ahead(order, stage, stages, n) == ahead
    assert ahead + in_flight(order, stage, stages, n) <= n


def test_with_inputs_ahead_adds_whole_cuts_to_stage_inputs() -> None:
    graph = two_layers("fp32")
    mem = stage_memory(graph.layers[1:], micro_batch=4, in_flight=1, optimizer="adam",
                       received_bytes=CUT_FP32)  # fmt: skip
    more = with_inputs_ahead(mem, CUT_FP32, micro_batch=4, ahead=1)
    assert more.stage_inputs - mem.stage_inputs == CUT_FP32 * 4
    assert more.total - mem.total == CUT_FP32 * 4
    assert with_inputs_ahead(mem, CUT_FP32, micro_batch=4, ahead=0) is mem


@pytest.mark.parametrize(("strategy", "ahead"), [("1f1b", 1), ("pipedream", 1), ("gpipe", 0)])
def test_predict_charges_the_input_received_ahead_on_later_stages(
    strategy: str, ahead: int, make_cluster: ClusterFactory
) -> None:
    graph, clus = two_layers("fp32"), make_cluster([2])
    plan = _plan(graph, clus, strategy, micro_batches=2)  # 2 micro-batches of 4 samples
    pred = predict(plan, graph, clus, AnalyticalCompute())
    flight = 2 if strategy == "gpipe" else 1  # stage 1's in-flight micro-batches
    stage_inputs = [d.memory.get("stage_inputs", 0) for d in pred.devices]
    assert stage_inputs == [0, CUT_FP32 * 4 * (flight + ahead)]


@pytest.mark.parametrize(("sync", "batches"), [("bsp", 1), ("wsp", 2)])
def test_wsp_stages_that_read_data_hold_two_batches(
    sync: str, batches: int, make_cluster: ClusterFactory
) -> None:
    graph, clus = two_layers("fp32"), make_cluster([4])
    plan = plan_from_options(
        graph, clus, model=ModelRef(name="syn"), strategy="hybrid", batch=8,
        optimizer="adam", micro_batches=2, dp=2, sync=sync,
    )  # fmt: skip
    pred = predict(plan, graph, clus, AnalyticalCompute())
    first = plan.pipelines[0].stages[0].devices[0]
    last = plan.pipelines[0].stages[-1].devices[0]
    held = {d.id: d.memory.get("input_batch", 0) for d in pred.devices}
    # Each pipeline's batch is 4 samples of 4 B. Stage 0's first layer has parameters: it
    # saves its micro-batches' inputs (its 2 in flight: the whole batch), already counted in
    # its activations; the last stage reads the batch for its targets and, finishing each
    # iteration before it reads the next, holds one.
    assert held[first] == 4 * 4 * (batches - 1)
    assert held[last] == 4 * 4
