"""Memory per device of a plan, against the device's capacity."""

from __future__ import annotations

from dataclasses import dataclass

from hetplan.cluster.spec import Cluster
from hetplan.cost import comm
from hetplan.cost.memory import (
    MemoryBreakdown,
    framework_overhead_bytes,
    is_gpu,
    ps_shard_scale,
    stage_memory,
)
from hetplan.cost.ties import stage_tied_params
from hetplan.graph.types import ModelGraph
from hetplan.planspec.plan import Plan
from hetplan.planspec.strategies import spec_of
from hetplan.units import fmt_bytes


@dataclass(frozen=True, kw_only=True)
class DeviceMemory:
    """What a device holds at its peak, and how much it has."""

    breakdown: MemoryBreakdown
    ps_shard_bytes: float
    """Parameters plus optimizer state of the PS shard it hosts (0 if none)."""
    capacity_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.breakdown.total + self.ps_shard_bytes


def plan_memory(
    plan: Plan,
    graph: ModelGraph,
    cluster: Cluster,
    ranges: list[list[tuple[int, int]]],
    micro_batch: list[int],
    bucket_bytes: list[float],
) -> dict[str, DeviceMemory]:
    """Peak memory of every device of the plan (workers and PS hosts); ``graph.dtype``
    bf16/fp16 is mixed precision (fp32 weights, gradients and state, see ``stage_memory``)."""
    num = plan.num_stages
    spec = spec_of(plan)
    sync = spec.syncs_replicas(plan)
    shards = _ps_shards(plan, graph)
    out: dict[str, DeviceMemory] = {}
    for p, pipe in enumerate(plan.pipelines):
        for s, stage in enumerate(pipe.stages):
            lo, hi = ranges[p][s]
            for dev_id in stage.devices:
                dev = cluster.device(dev_id)
                mem = stage_memory(
                    graph.layers[lo : hi + 1],
                    micro_batch=micro_batch[p],
                    in_flight=spec.in_flight(s, num, plan.micro_batches),
                    optimizer=plan.optimizer,
                    dtype=graph.dtype,
                    recompute=plan.recompute,
                    stashed_versions=spec.stashed_versions(s, num),
                    tp=plan.tp,
                    bucket_bytes=bucket_bytes[s] if sync else 0.0,
                    framework_bytes=framework_overhead_bytes(is_gpu(dev.type)),
                    received_bytes=float(graph.cut_bytes[lo - 1]) if lo > 0 else 0.0,
                    input_bytes=float(graph.cut_bytes[lo - 1] if lo > 0 else graph.input_bytes),
                    tied_params=stage_tied_params(graph, ranges[p], s, plan.tp),
                )
                out[dev_id] = DeviceMemory(
                    breakdown=mem,
                    ps_shard_bytes=shards.get(dev_id, 0.0),
                    capacity_bytes=dev.type.memory_bytes,
                )
    for dev_id, shard in shards.items():
        if dev_id not in out:
            dev = cluster.device(dev_id)
            fw = framework_overhead_bytes(is_gpu(dev.type))
            zero = MemoryBreakdown(
                weights=0,
                grads=0,
                optimizer=0,
                activations=0,
                stashed_weights=0,
                comm_buffers=0,
                framework=fw,
                total=fw,
            )
            out[dev_id] = DeviceMemory(
                breakdown=zero, ps_shard_bytes=shard, capacity_bytes=dev.type.memory_bytes
            )
    return out


def _ps_shards(plan: Plan, graph: ModelGraph) -> dict[str, float]:
    """Bytes each PS host keeps: its shard's parameter bytes times
    ``cost.memory.ps_shard_scale`` (weights, a gradient accumulator, the optimizer state)."""
    if not spec_of(plan).hosts_parameters or not plan.ps_devices:
        return {}
    tensors = [b for sizes in comm.layer_tensor_bytes(graph.layers) for b in sizes]
    assignment = comm.assign_ps_shards(tensors, len(plan.ps_devices), plan.ps_assignment)
    per_byte = ps_shard_scale(graph.dtype, plan.optimizer)
    out: dict[str, float] = {}
    for dev, idx in zip(plan.ps_devices, assignment, strict=True):
        nbytes = float(sum(tensors[i] for i in idx))
        out[dev] = out.get(dev, 0.0) + nbytes * per_byte
    return out


def infeasible_reasons(memory: dict[str, DeviceMemory]) -> list[str]:
    """One line per device that does not fit: device, bytes needed, bytes available."""
    reasons = []
    for dev, m in memory.items():
        if m.total_bytes > m.capacity_bytes:
            b = m.breakdown
            reasons.append(
                f"{dev}: out of memory: needs {fmt_bytes(m.total_bytes)} "
                f"({m.total_bytes:.0f} B), has "
                f"{fmt_bytes(m.capacity_bytes)} ({m.capacity_bytes:.0f} B): weights "
                f"{fmt_bytes(b.weights)}, grads {fmt_bytes(b.grads)}, optimizer "
                f"{fmt_bytes(b.optimizer)}, activations {fmt_bytes(b.activations)}"
                + (f", autocast weight copies {fmt_bytes(b.cast_cache)}" if b.cast_cache else "")
            )
    return reasons
