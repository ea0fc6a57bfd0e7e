"""DTensor's dispatch on CPU ranks: TP's split modules and their optimizer step, by hand."""

from __future__ import annotations

import dataclasses

import pytest
from test_calibration import GRAPH, LAYER

from hetplan.cluster import device_type
from hetplan.cluster.spec import Device
from hetplan.cost import dtensor
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.dtensor import DTENSOR_STEP_S_PER_TENSOR, tp_dispatch_s, tp_step_host_s
from hetplan.cost.memory import optimizer_step_s
from hetplan.cost.tp_compute import tp_rank_costs

# A block: one attention (q, k, v, output) and one MLP (up, down), heads and width split by 4.
BLOCK = dataclasses.replace(
    LAYER, name="block", tp_units=2, tp_linears=6, tp_split=4, tp_tokens=1, tp_hidden=8
)
HEAD = dataclasses.replace(LAYER, name="head", tp_vocab="head", tp_split=4, tp_tokens=1)
NORM = dataclasses.replace(LAYER, name="norm")  # replicated
TOY = dataclasses.replace(GRAPH, layers=(BLOCK, HEAD, NORM), cut_bytes=(0, 0))


def cpu(speed: float = 1.0) -> Device:
    return Device(id="c.0", type=device_type("cpu"), node="c", index=0, speed=speed)


def gpu() -> Device:
    return Device(id="g.0", type=device_type("H100-SXM"), node="g", index=0)


@pytest.fixture
def per_module(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    cost = (100e-6, 250e-6)
    monkeypatch.setattr(dtensor, "DTENSOR_TP_MODULE_S", cost)
    return cost


def test_a_split_layer_pays_each_modules_dispatch_over_the_speed(per_module) -> None:
    f, b = per_module
    # Six Linears on a core shared by two ranks (speed 0.5).
    assert tp_dispatch_s(BLOCK, 2, cpu(0.5)) == pytest.approx((6 * f / 0.5, 6 * b / 0.5))
    assert tp_dispatch_s(HEAD, 4, cpu()) == pytest.approx((f, b))  # the head alone
    for layer, tp, dev in (
        (BLOCK, 1, cpu()),
        (BLOCK, 2, gpu()),
        (NORM, 2, cpu()),
        (BLOCK, 3, cpu()),
    ):
        assert tp_dispatch_s(layer, tp, dev) == (0.0, 0.0)  # alone, a GPU, replicated, unsplit


def test_tp_rank_costs_add_it_to_split_layers_only(per_module) -> None:
    f, b = per_module
    compute = AnalyticalCompute("fp32")
    plain = compute.layer_costs(TOY, cpu(), 8 / 2)
    ranks = tp_rank_costs(compute, TOY, cpu(), 8, 2)
    assert ranks[0].fwd_s == pytest.approx(plain[0].fwd_s + 6 * f)
    assert ranks[0].bwd_s == pytest.approx(plain[0].bwd_s + 6 * b)
    assert ranks[1].bwd_s == pytest.approx(plain[1].bwd_s + b)
    assert ranks[2] == compute.layer_costs(TOY, cpu(), 8)[2]  # replicated: whole, no DTensor


def test_the_optimizer_steps_a_weight_and_a_bias_per_linear_and_a_weight_per_vocab_module() -> None:
    # 6 Linears x 2 tensors + the head's weight = 13 DTensor parameters; the norm is plain.
    assert tp_step_host_s(TOY.layers, 2, cpu(0.5)) == pytest.approx(
        13 * DTENSOR_STEP_S_PER_TENSOR / 0.5
    )
    assert tp_step_host_s(TOY.layers, 1, cpu()) == 0.0
    assert tp_step_host_s(TOY.layers, 2, gpu()) == 0.0
    compute = AnalyticalCompute("fp32")
    alone = optimizer_step_s(compute, TOY, cpu(), TOY.layers, "adam", 1)
    split = optimizer_step_s(compute, TOY, cpu(), TOY.layers, "adam", 2)
    # The TP rank steps its share of the parameters (2/3 of them split by 2) plus the dispatch.
    assert split == pytest.approx(alone * (2 / 3 * 0.5 + 1 / 3) + 13 * DTENSOR_STEP_S_PER_TENSOR)


def test_an_fsdp_step_pays_per_parameter_tensor_on_a_cpu_rank() -> None:
    # Three parameter tensors (a weight, a bias, a norm's scale) and a layer with none.
    three = dataclasses.replace(LAYER, param_tensor_bytes=(64, 8, 8), param_tensor_rows=())
    none = dataclasses.replace(LAYER, name="pool", param_bytes=0, param_tensor_bytes=())
    assert dtensor.fsdp_step_host_s([three, none], on_cpu=True) == pytest.approx(
        3 * DTENSOR_STEP_S_PER_TENSOR
    )
    assert dtensor.fsdp_step_host_s([three, none], on_cpu=False) == 0.0
