"""Memory per device of a plan, against the device's capacity."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from hetplan.cluster.spec import Cluster
from hetplan.cost import comm
from hetplan.cost.memory import (
    MemoryBreakdown,
    batches_held,
    framework_overhead_bytes,
    input_batch_bytes,
    is_gpu,
    model_input_saved,
    ps_flat_bytes,
    ps_shard_scale,
    stage_input_kept,
    stage_memory,
    with_inputs_ahead,
)
from hetplan.cost.memory_margin import Verdict, memory_margin, memory_verdict, with_margin
from hetplan.cost.ties import stage_tied_params
from hetplan.graph.types import ModelGraph
from hetplan.planspec.order import received_ahead
from hetplan.planspec.plan import Plan
from hetplan.planspec.strategies import spec_of
from hetplan.predict.backward_peak import backward_peak
from hetplan.predict.sharded import rank_breakpoints, sharded_breakdown
from hetplan.predict.window_memory import WindowStates
from hetplan.predict.zero1 import owned_fractions
from hetplan.units import MiB, fmt_bytes


@dataclass(frozen=True, kw_only=True)
class DeviceMemory:
    """What a device holds at its peak, and how much it has."""

    breakdown: MemoryBreakdown
    ps_shard_bytes: float
    """What hosting a PS shard adds (``cost.memory.ps_shard_scale``; 0 if none)."""
    capacity_bytes: float
    margin: float = 1.0
    """The device kind's feasibility margin (``cost.memory_margin.memory_margin``)."""

    @property
    def total_bytes(self) -> float:
        return self.breakdown.total + self.ps_shard_bytes

    @property
    def with_margin_bytes(self) -> float:
        """What the device must have for the plan to fit with the margin
        (``cost.memory_margin.with_margin``)."""
        return with_margin(self.total_bytes, self.breakdown.framework, self.margin)

    @property
    def verdict(self) -> Verdict:
        """``fits``, ``may not fit`` or ``does not fit`` (``cost.memory_margin``)."""
        return memory_verdict(
            self.total_bytes, self.breakdown.framework, self.capacity_bytes, self.margin
        )


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
    flat = ps_flat_bytes(graph.layers, graph.dtype) if spec.hosts_parameters else 0.0
    zero1 = spec.shards_optimizer_only(plan)
    owned = owned_fractions(graph, len(plan.pipelines)) if zero1 else []
    out: dict[str, DeviceMemory] = {}
    windows = WindowStates(plan, graph, ranges[0]) if spec.windowed(plan) else None
    # a flushed step's phases (predict/backward_peak.py); recomputation keeps its own count
    flushed = spec.executor(plan) == "flushed"
    same: dict[tuple[int, int, int, int, int, bool, float], MemoryBreakdown] = {}
    runs: dict[tuple[int, int], list[int]] = {}
    for p, pipe in enumerate(plan.pipelines):
        for s, stage in enumerate(pipe.stages):
            lo, hi = ranges[p][s]
            layers = graph.layers[lo : hi + 1]
            n = spec.in_flight(s, num, plan.micro_batches)
            held = (
                spec.recompute_held(
                    s, num, plan.micro_batches, except_last=plan.recompute_mode == "except_last"
                )
                if plan.recompute
                else None  # only recomputation reads it
            )
            input_bytes = float(graph.cut_bytes[lo - 1] if lo > 0 else graph.input_bytes)
            kept = stage_input_kept(
                model_input_saved(layers[0], graph.input_bytes), graph.input_bytes,
                micro_batch=micro_batch[p], in_flight=n, recompute=plan.recompute, held=held,
            )  # fmt: skip
            batch = _held_batch(plan, graph, s, pipe.batch, n, kept)
            for dev_id in stage.devices:
                dev = cluster.device(dev_id)
                # Replicas of one stage on one kind of device with one batch hold the same
                # (a datacenter's hundreds of data-parallel replicas: priced once); a sharded
                # replica's state depends on its run of ranks, a ZeRO-1 one's on its share.
                key = (s, lo, hi, micro_batch[p], pipe.batch, is_gpu(dev.type),
                       _rank_key(plan, graph, p, lo, hi, owned, runs))  # fmt: skip
                mem = same.get(key)
                if mem is None:
                    mem = stage_memory(
                        layers,
                        micro_batch=micro_batch[p],
                        in_flight=n,
                        optimizer=plan.optimizer,
                        dtype=graph.dtype,
                        recompute=plan.recompute,
                        held=held,
                        # no stashed_versions: every stashing plan is windowed (copies walked)
                        tp=plan.tp,
                        bucket_bytes=bucket_bytes[s] if sync else 0.0,
                        framework_bytes=framework_overhead_bytes(is_gpu(dev.type)),
                        received_bytes=float(graph.cut_bytes[lo - 1]) if lo > 0 else 0.0,
                        input_bytes=input_bytes,
                        tied_params=stage_tied_params(graph, ranges[p], s, plan.tp),
                        optimizer_state=not spec.hosts_parameters,
                        ps_buffers=flat,
                        batch_bytes=batch,
                        accumulates=plan.micro_batches > 1 and not spec.gathers_weights(plan),
                    )
                    if spec.gathers_weights(plan):
                        mem = sharded_breakdown(mem, plan, graph, p, layers)
                    elif zero1:  # ZeRO-1: its owned tensors' state
                        mem = mem.with_terms(optimizer=mem.optimizer * owned[p])
                    if flushed and (held is None or held.inputs == 0):  # nothing checkpointed
                        mem = backward_peak(
                            mem, layers, micro_batch=micro_batch[p],
                            micro_batches=plan.micro_batches, optimizer=plan.optimizer,
                            dtype=graph.dtype, tp=plan.tp, bucket_cap_bytes=plan.bucket_mb * MiB,
                            first=lo, foreach=is_gpu(dev.type),
                        )  # fmt: skip
                    same[key] = mem
                if windows is not None:
                    mem = windows.held(dev_id, mem)
                if s > 0:
                    mem = with_inputs_ahead(
                        mem, float(graph.cut_bytes[lo - 1]), micro_batch=micro_batch[p],
                        ahead=_received_ahead(plan, s),
                    )  # fmt: skip
                out[dev_id] = DeviceMemory(
                    breakdown=mem,
                    ps_shard_bytes=shards.get(dev_id, 0.0),
                    capacity_bytes=dev.type.memory_bytes,
                    margin=memory_margin(is_gpu(dev.type)),
                )
    for dev_id, shard in shards.items():
        if dev_id not in out:
            out[dev_id] = _server_only(cluster, dev_id, shard, flat)
    return out


def _rank_key(
    plan: Plan,
    graph: ModelGraph,
    replica: int,
    lo: int,
    hi: int,
    owned: list[float],
    runs: dict[tuple[int, int], list[int]],
) -> float:
    """What of its replica index a stage's memory depends on: none (-1), ZeRO-1's owned share,
    or a sharded stage's run of ranks holding the same bytes
    (:func:`hetplan.predict.sharded.rank_breakpoints`, cached per stage in ``runs``)."""
    spec = spec_of(plan)
    if spec.shards_optimizer_only(plan):
        return owned[replica]
    if not spec.gathers_weights(plan):
        return -1
    if (lo, hi) not in runs:
        runs[(lo, hi)] = rank_breakpoints(graph.layers[lo : hi + 1], len(plan.pipelines))
    return bisect.bisect_right(runs[(lo, hi)], replica)


def _held_batch(
    plan: Plan, graph: ModelGraph, stage: int, batch: int, n: int, kept: float
) -> float:
    """``cost.memory.input_batch_bytes`` of a stage with ``n`` micro-batches in flight whose
    pipeline's batch is ``batch`` samples: the first and the last stage read it (the last for
    its targets; the runtime reads the whole batch on both); on the first the activations
    already count ``kept`` bytes of it (its micro-batches' inputs). None on middle stages."""
    if stage not in (0, plan.num_stages - 1):
        return 0.0
    spec = spec_of(plan)  # WSP's window streams its iterations as PipeDream's does
    iterations = batches_held(
        continuous=spec.continuous or spec.windowed(plan), in_flight=n,
        micro_batches=plan.micro_batches,
    )  # fmt: skip
    samples = batch * iterations
    return input_batch_bytes(graph.input_bytes, samples, kept if stage == 0 else 0.0)


def _received_ahead(plan: Plan, stage: int) -> int:
    """``planspec.order.received_ahead`` of ``stage`` (windowed plans stream their micro-batches
    across iterations)."""
    spec = spec_of(plan)
    m = plan.micro_batches
    streams = spec.continuous or spec.windowed(plan)
    return received_ahead(spec.order, stage, plan.num_stages, m + plan.num_stages if streams else m)


def _server_only(cluster: Cluster, dev_id: str, shard: float, flat: float) -> DeviceMemory:
    """A PS host that runs no stage: its shard (``shard``), the flat buffers of every shard
    it joins the push and pull of (``flat``) and the framework allowance."""
    dev = cluster.device(dev_id)
    fw = framework_overhead_bytes(is_gpu(dev.type))
    zero = MemoryBreakdown(
        weights=0,
        grads=0,
        optimizer=0,
        activations=0,
        stashed_weights=0,
        comm_buffers=flat,
        framework=fw,
        total=fw + flat,
    )
    return DeviceMemory(
        breakdown=zero,
        ps_shard_bytes=shard,
        capacity_bytes=dev.type.memory_bytes,
        margin=memory_margin(is_gpu(dev.type)),
    )


def _ps_shards(plan: Plan, graph: ModelGraph) -> dict[str, float]:
    """Bytes each PS host keeps for its shard: the shard's parameter bytes times
    ``cost.memory.ps_shard_scale`` (as a worker's host or a server-only rank)."""
    if not spec_of(plan).hosts_parameters or not plan.ps_devices:
        return {}
    tensors = [b for sizes in comm.layer_tensor_bytes(graph.layers) for b in sizes]
    assignment = comm.assign_ps_shards(tensors, len(plan.ps_devices), plan.ps_assignment)
    on_worker = set(plan.devices)
    out: dict[str, float] = {}
    for dev, idx in zip(plan.ps_devices, assignment, strict=True):
        per_byte = ps_shard_scale(
            graph.dtype, plan.optimizer, worker=dev in on_worker, asynchronous=plan.ps_async
        )
        nbytes = float(sum(tensors[i] for i in idx))
        out[dev] = out.get(dev, 0.0) + nbytes * per_byte
    return out


def infeasible_reasons(memory: dict[str, DeviceMemory]) -> list[str]:
    """One line per device that does not fit even without the feasibility margin: device,
    bytes needed, bytes available."""
    reasons = []
    for dev, m in memory.items():
        if m.verdict == "does not fit":
            b = m.breakdown
            reasons.append(
                f"{dev}: out of memory: needs {fmt_bytes(m.total_bytes)} "
                f"({m.total_bytes:.0f} B; {fmt_bytes(m.with_margin_bytes)} with its "
                f"x{m.margin:.2f} feasibility margin), has "
                f"{fmt_bytes(m.capacity_bytes)} ({m.capacity_bytes:.0f} B): weights "
                f"{fmt_bytes(b.weights)}, grads {fmt_bytes(b.grads)}, optimizer "
                f"{fmt_bytes(b.optimizer)}, activations {fmt_bytes(b.activations)}"
                + (f", autocast weight copies {fmt_bytes(b.cast_cache)}" if b.cast_cache else "")
            )
    return reasons


def memory_warnings(memory: dict[str, DeviceMemory]) -> list[str]:
    """One line per device that fits its capacity but not with the feasibility margin (the
    measured error of predicted peaks, and on a GPU the allocator's fragmentation: a run may
    go out of memory)."""
    return [
        f"{dev}: may not fit: needs {fmt_bytes(m.total_bytes)} ({m.total_bytes:.0f} B), "
        f"{fmt_bytes(m.with_margin_bytes)} with its x{m.margin:.2f} feasibility margin "
        f"(docs/cost-models.md section 6), has {fmt_bytes(m.capacity_bytes)} "
        f"({m.capacity_bytes:.0f} B)"
        for dev, m in memory.items()
        if m.verdict == "may not fit"
    ]
