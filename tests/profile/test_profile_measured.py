"""MeasuredCompute: measured, scaled and analytical sources with hand-computed values."""

import pytest

from hetplan.cluster.spec import Device, DeviceType
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.types import LayerCost
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.profile.measured import MeasuredCompute, profile_matches


def layer(name: str, fwd: float, bwd: float, param_bytes: int = 0) -> LayerInfo:
    return LayerInfo(
        name=name, fwd_flops=fwd, bwd_flops=bwd, params=0, param_bytes=param_bytes,
        out_bytes=4, saved_bytes=4, fwd_io_bytes=8, bwd_io_bytes=8,
    )  # fmt: skip


GRAPH = ModelGraph(
    name="m",
    input_shape=(8,),
    input_bytes=32,
    dtype="fp32",
    layers=(layer("l0", 100.0, 200.0, 300), layer("l1", 300.0, 300.0, 100)),
    cut_bytes=(4,),
)


def dtype_(name: str, flops: float) -> DeviceType:
    return DeviceType(
        name=name, peak_flops={"fp32": flops}, memory_bandwidth=1e9, memory_bytes=1e9,
        idle_power_w=1.0, max_power_w=2.0,
    )  # fmt: skip


A, B, C = dtype_("A", 1000.0), dtype_("B", 4000.0), dtype_("C", 1e6)
TYPES = {"A": A, "B": B, "C": C}


def dev(t: DeviceType, speed: float = 1.0) -> Device:
    return Device(id="n0.0", type=t, node="n0", index=0, speed=speed)


class FlopsOnly:
    """Analytical stand-in: batch * FLOPs / peak / speed (ratios are then easy by hand)."""

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        peak = device.type.peak_flops["fp32"] * device.speed
        return [
            LayerCost(
                fwd_s=batch * x.fwd_flops / peak,
                bwd_s=batch * x.bwd_flops / peak,
                source="analytical",
            )
            for x in graph.layers
        ]


# l0: fwd 1 ms + 0.1 ms/sample, bwd 2 ms + 0.2 ms/sample; l1: fwd 3 ms, bwd 1 ms + 1 ms/sample;
# the loss (billed to l1, the last layer): fwd 0.1 ms, bwd 0.2 ms
LOSS_F, LOSS_B = 1e-4, 2e-4
FITS = {"l0": (1e-3, 1e-4, 2e-3, 2e-4), "l1": (3e-3, 0.0, 1e-3, 1e-3)}


def test_measured_type_uses_the_fit_divided_by_speed(make_profile) -> None:
    model = MeasuredCompute([make_profile(device_type="A", fits=FITS)], fallback=FlopsOnly())
    costs = model.layer_costs(GRAPH, dev(A, speed=0.5), batch=4)
    assert [c.source for c in costs] == ["measured on A"] * 2
    assert costs[0].fwd_s == pytest.approx((1e-3 + 4e-4) / 0.5)
    assert costs[0].bwd_s == pytest.approx((2e-3 + 8e-4) / 0.5)
    assert costs[1].fwd_s == pytest.approx((3e-3 + LOSS_F) / 0.5)
    assert costs[1].bwd_s == pytest.approx((5e-3 + LOSS_B) / 0.5)
    without_loss = MeasuredCompute(
        [make_profile(device_type="A", fits=FITS)], fallback=FlopsOnly(), include_loss=False
    )
    assert without_loss.layer_costs(GRAPH, dev(A), batch=4)[1].bwd_s == pytest.approx(5e-3)


def test_unmeasured_type_is_scaled_by_the_analytical_ratio(make_profile) -> None:
    model = MeasuredCompute(
        [make_profile(device_type="A", fits=FITS)], fallback=FlopsOnly(), types=TYPES
    )
    costs = model.layer_costs(GRAPH, dev(B, speed=0.5), batch=2)
    # B has 4x A's FLOP/s: every analytical ratio is 1/4; speed 0.5 doubles the time
    assert [c.source for c in costs] == ["scaled from A"] * 2
    assert costs[0].fwd_s == pytest.approx((1e-3 + 2e-4) / 4 / 0.5)
    assert costs[1].bwd_s == pytest.approx((1e-3 + 2e-3 + LOSS_B) / 4 / 0.5)


def test_scaling_picks_the_closest_measured_type(make_profile) -> None:
    profiles = [
        make_profile(device_type="C", fits={"l0": (1.0, 0, 1.0, 0), "l1": (1.0, 0, 1.0, 0)}),
        make_profile(device_type="A", fits=FITS),
    ]
    model = MeasuredCompute(profiles, fallback=FlopsOnly(), types=TYPES)
    # B (4000 FLOP/s) is 4x from A and 250x from C: scaled from A
    assert {c.source for c in model.layer_costs(GRAPH, dev(B), batch=1)} == {"scaled from A"}


def test_no_matching_profile_falls_back(make_profile) -> None:
    profiles = [
        make_profile(device_type="A", model="other", fits=FITS),
        make_profile(device_type="A", dtype="bf16", fits=FITS),
        make_profile(device_type="A", input_shape=(9,), fits=FITS),
        make_profile(device_type="A", fits={"l0": (1.0, 0, 1.0, 0)}),  # lacks l1
        make_profile(device_type="unknown-type", fits=FITS),  # cannot be resolved for scaling
    ]
    model = MeasuredCompute(profiles, fallback=FlopsOnly(), types=TYPES)
    assert not any(profile_matches(p, GRAPH) for p in profiles[:4])
    costs = model.layer_costs(GRAPH, dev(B), batch=2)
    assert costs == FlopsOnly().layer_costs(GRAPH, dev(B), batch=2)
    assert costs[0].source == "analytical"


def test_default_fallback_is_the_analytical_roofline(make_profile) -> None:
    model = MeasuredCompute([make_profile(device_type="A", fits=FITS)], types=TYPES)
    got = model.layer_costs(GRAPH, dev(B), batch=2)
    ana = AnalyticalCompute("fp32")
    ratio_fwd0 = (
        ana.layer_costs(GRAPH, dev(B), 2)[0].fwd_s / ana.layer_costs(GRAPH, dev(A), 2)[0].fwd_s
    )
    assert got[0].fwd_s == pytest.approx((1e-3 + 2e-4) * ratio_fwd0)
    # cached answers are equal and independent copies
    again = model.layer_costs(GRAPH, dev(B), batch=2)
    assert again == got and again is not got


def test_catalog_types_resolve_without_a_mapping(make_profile) -> None:
    v100 = MeasuredCompute([make_profile(device_type="V100-32GB", fits=FITS)], fallback=FlopsOnly())
    costs = v100.layer_costs(GRAPH, dev(B), batch=1)
    assert costs[0].source == "scaled from V100-32GB"


def test_optimizer_time_is_shared_by_parameter_bytes(make_profile) -> None:
    model = MeasuredCompute([make_profile(device_type="A", fits=FITS)], fallback=FlopsOnly())
    # the profile's optimizer step takes 50 ms; l0 holds 3/4 of the parameter bytes
    assert model.optimizer_s(GRAPH, dev(A)) == pytest.approx(0.05)
    assert model.optimizer_s(GRAPH, dev(A, speed=0.5), ["l0"]) == pytest.approx(0.075)
    assert model.optimizer_s(GRAPH, dev(B)) is None
