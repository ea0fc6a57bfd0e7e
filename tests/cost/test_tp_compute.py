"""One TP rank's compute: split layers at 1/tp of the micro-batch, on the compute model's
curve (efficiency falls with the matrices), replicated layers whole, measured per-rank costs
where the store has them."""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_calibration import CAL, DEVICE, GRAPH, LAYER

from hetplan.cluster.spec import Device
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.tp_compute import tp_rank_costs
from hetplan.cost.types import LayerCost
from hetplan.graph.types import ModelGraph

SPLIT = dataclasses.replace(LAYER, name="split", tp_units=1, tp_split=4, tp_tokens=1, tp_hidden=8)
REPLICATED = dataclasses.replace(LAYER, name="replicated")
TWO = dataclasses.replace(GRAPH, layers=(SPLIT, REPLICATED), cut_bytes=(0,))


def test_a_split_layer_runs_its_smaller_kernels_less_efficiently() -> None:
    compute = AnalyticalCompute("fp32", calibrations=[CAL])
    whole = compute.layer_costs(TWO, DEVICE, 4)
    ranks = tp_rank_costs(compute, TWO, DEVICE, 4, 2)
    # Matmul part by hand: 2 kernels of 4 * 1e6 / 2 FLOPs whole, of 2 * 1e6 / 2 per rank, on
    # a curve of slope 1/2 in log-log: the rank's share is 1/sqrt(2) of the whole, not 1/2.
    matmul_whole = 2 * 1e-5 * math.sqrt(2e6 / 1e5)
    matmul_rank = 2 * 1e-5 * math.sqrt(1e6 / 1e5)
    memory_rank = 3 * 1e-6 * (2 * 4000 / 3 / 1e3) ** (2 / 3)
    assert ranks[0].fwd_s == pytest.approx(matmul_rank + memory_rank)
    assert matmul_rank / matmul_whole == pytest.approx(1 / math.sqrt(2))
    assert ranks[0].fwd_s > whole[0].fwd_s / 2
    assert ranks[1] == whole[1]  # replicated: whole on every rank


def test_tp_1_is_the_layer_costs() -> None:
    compute = AnalyticalCompute("fp32")
    assert tp_rank_costs(compute, TWO, DEVICE, 4, 1) == compute.layer_costs(TWO, DEVICE, 4)


class WithMeasuredTp(AnalyticalCompute):
    """A compute model that holds per-rank costs measured at tp = 2 (as MeasuredCompute)."""

    def tp_layer_costs(
        self, graph: ModelGraph, device: Device, batch: int, tp: int
    ) -> list[LayerCost] | None:
        if tp != 2:
            return None
        return [LayerCost(fwd_s=1.0, bwd_s=2.0, source="measured on toy (tp 2)")] * 2


def test_measured_per_rank_costs_win() -> None:
    compute = WithMeasuredTp("fp32")
    assert [c.source for c in tp_rank_costs(compute, TWO, DEVICE, 4, 2)] == [
        "measured on toy (tp 2)"
    ] * 2
    assert tp_rank_costs(compute, TWO, DEVICE, 4, 4)[0].source == "analytical"
