"""The planner tells CPU devices apart by their threads: one core and six are not one class.

The expected ratio is Amdahl's closed form written out here: six threads take
``s + (1 - s) / 6`` of one thread's time, ``s`` the model's named serial fraction.
"""

from __future__ import annotations

import pytest

from hetplan.cluster.catalog import device_type
from hetplan.cluster.spec import Cluster, Device, Link
from hetplan.cost.compute import AnalyticalCompute
from hetplan.cost.threads import SERIAL_FRACTION
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.plan.classes import symmetry
from hetplan.plan.pricing import Pricing

S = SERIAL_FRACTION
CPU = device_type("cpu")
CLUSTER = Cluster(
    name="c",
    devices=(
        Device(id="n0.0", type=CPU, node="n0", index=0, cpus=(0,)),
        Device(id="n0.1", type=CPU, node="n0", index=1, cpus=(1, 2, 3, 4, 5, 6)),
        Device(id="n0.2", type=CPU, node="n0", index=2, cpus=(7, 8, 9, 10, 11, 12)),
    ),
    intra_links={"n0": Link(kind="shm", bandwidth=1e9, latency_s=1e-6)},
)
GRAPH = ModelGraph(
    name="m", input_shape=(8,), input_bytes=32, dtype="fp32", cut_bytes=(4,),
    layers=tuple(
        LayerInfo(name=n, fwd_flops=1e6, bwd_flops=2e6, params=0, param_bytes=4, out_bytes=4,
                  saved_bytes=4, fwd_io_bytes=8, bwd_io_bytes=8)
        for n in ("l0", "l1")
    ),
)  # fmt: skip


def test_one_core_and_six_are_separate_classes() -> None:
    sym = symmetry(CLUSTER)
    assert [(c.threads, c.devices) for c in sym.classes] == [
        (1, (("n0.0",),)),
        (6, (("n0.1", "n0.2"),)),
    ]


def test_pricing_does_not_share_one_core_and_six() -> None:
    pricing = Pricing(graph=GRAPH, cluster=CLUSTER, compute=AnalyticalCompute())
    one = pricing.step_time("n0.0", 4)
    six = pricing.step_time("n0.1", 4)
    assert six / one == pytest.approx(S + (1 - S) / 6)
    assert pricing.step_time("n0.2", 4) == six
