"""Synthetic model, cluster and compute model of known cost for the predict tests."""

from __future__ import annotations

from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.cost.types import LayerCost
from hetplan.graph.types import LayerInfo, ModelGraph

FWD_PER_SAMPLE = 1e-3  # s per sample per layer on a speed-1 device
BWD_PER_SAMPLE = 2e-3


def graph(n: int = 4, params: int = 1000, cut: int = 0, saved: int = 100) -> ModelGraph:
    layers = tuple(
        LayerInfo(
            name=f"l{i}",
            fwd_flops=1.0,
            bwd_flops=2.0,
            params=params,
            param_bytes=4 * params,
            param_tensor_bytes=(4 * params,),
            out_bytes=cut,
            saved_bytes=saved,
            fwd_io_bytes=0,
            bwd_io_bytes=0,
        )
        for i in range(n)
    )
    return ModelGraph(
        name="syn",
        input_shape=(1,),
        input_bytes=4,
        dtype="fp32",
        layers=layers,
        cut_bytes=(cut,) * (n - 1),
    )


def device_type(memory: float = 16e9, price: float | None = None) -> DeviceType:
    return DeviceType(
        name="X",
        peak_flops={"fp32": 1e12},
        memory_bandwidth=1e11,
        memory_bytes=memory,
        idle_power_w=50.0,
        max_power_w=250.0,
        price_per_hour=price,
        memory_efficiency=0.8,
    )


def cluster(
    n: int = 4,
    memory: float = 16e9,
    speeds: tuple[float, ...] = (),
    price: float | None = None,
    overhead: float = 0.0,
) -> Cluster:
    t = device_type(memory, price)
    devices = tuple(
        Device(id=f"n0.{i}", type=t, node="n0", index=i, speed=speeds[i] if speeds else 1.0)
        for i in range(n)
    )
    link = Link(kind="test", bandwidth=10e9, latency_s=1e-5)
    return Cluster(
        name="syn", devices=devices, intra_links={"n0": link}, collective_overhead_s=overhead
    )


class FixedCompute:
    """Linear in the batch, divided by the device's speed; no other device dependence."""

    def layer_costs(self, graph: ModelGraph, device: Device, batch: float) -> list[LayerCost]:
        return [
            LayerCost(
                fwd_s=FWD_PER_SAMPLE * batch / device.speed,
                bwd_s=BWD_PER_SAMPLE * batch / device.speed,
                source="fixed",
            )
            for _ in graph.layers
        ]
