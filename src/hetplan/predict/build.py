"""Build a plan from the common options (the ``hetplan predict`` flags), reused by the planner
and the runtime.

Defaults: every cluster device in cluster order; DP/PS use all of them as replicas, GPipe,
1F1B and PipeDream one pipeline over all of them; hybrid needs ``dp`` or ``pp``. Stages get an
equal number of layers unless ``partition`` gives the first layer index of each stage.
Pipelined strategies default to ``4 * pp`` micro-batches (GPipe, Huang et al. 2019, Sec. 2.3:
the bubble is negligible for m >= 4 K). Replica batches are split in proportion to replica
speed (1 / compute time per sample of the replica's bottleneck stage) when a compute model is
given, else evenly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetplan.cluster.spec import Cluster
from hetplan.cost.types import ComputeModel
from hetplan.errors import InputError
from hetplan.graph.types import ModelGraph
from hetplan.planspec.batch import split_batch
from hetplan.planspec.dtypes import TRAINING_DTYPES
from hetplan.planspec.plan import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.planspec.strategies import SPECS, STRATEGIES, spec_of
from hetplan.serde import from_data, to_data

DEFAULT_BATCH_PER_REPLICA = 32  # samples; a common per-GPU batch for the zoo's CNNs
MICRO_BATCHES_PER_STAGE = 4  # GPipe Sec. 2.3: bubble overhead negligible when m >= 4 K
# Training-set sizes of the dataset presets (epoch figures when --dataset-size is not given):
# MNIST 60,000 (LeCun et al.), CIFAR-10 50,000 (Krizhevsky 2009), ImageNet-1k 1,281,167
# (ILSVRC 2012 train split).
DATASET_SIZES = {"mnist": 60_000, "cifar10": 50_000, "imagenet": 1_281_167}


def _shape(strategy: str, n: int, dp: int | None, pp: int | None, tp: int) -> tuple[int, int]:
    """(replicas, stages) from the options and the number of devices ``n``."""
    shape = spec_of(strategy).shape
    if shape == "replicas":
        if pp not in (None, 1):
            raise InputError(f"--pp: strategy {strategy} has one stage per replica (got {pp})")
        return (dp if dp is not None else _fit(n, tp, "replicas")), 1
    if shape == "pipeline":
        if dp not in (None, 1):
            raise InputError(f"--dp: strategy {strategy} has one pipeline (got {dp}); use hybrid")
        return 1, (pp if pp is not None else _fit(n, tp, "stages"))
    if dp is None and pp is None:
        raise InputError(
            f"strategy {strategy}: give --dp (pipelines) or --pp (stages per pipeline)"
        )
    if dp is None:
        dp = n // (tp * (pp or 1))
    if pp is None:
        pp = n // (tp * dp)
    return dp, pp


def _fit(n: int, tp: int, what: str) -> int:
    """``n // tp`` groups of ``tp`` devices; InputError when ``tp`` does not divide ``n``, so
    that no device is silently left out."""
    if n % tp:
        raise InputError(
            f"--tp {tp} does not divide the {n} devices given: {n // tp} {what} of {tp} would "
            f"leave {n % tp} out; give --devices with a multiple of {tp}, or --dp/--pp"
        )
    return n // tp


def _bounds(n_layers: int, pp: int, partition: Sequence[int] | None) -> list[int]:
    """First layer index of every stage."""
    if partition is None:
        if pp > n_layers:
            raise InputError(f"--pp: {pp} stages but the model has only {n_layers} layers")
        return [round(k * n_layers / pp) for k in range(pp)]
    starts = list(partition)
    if not starts or starts[0] != 0:
        starts = [0, *starts]
    if len(starts) != pp:
        raise InputError(f"--partition: {len(starts)} stages for {pp} stages ({starts})")
    if any(b <= a for a, b in itertools.pairwise(starts)) or starts[-1] >= n_layers:
        raise InputError(
            f"--partition: stage starts must increase within 0..{n_layers - 1} (got {starts})"
        )
    return starts


def _split_batch(total: int, weights: list[float], floor: int) -> list[int]:
    """``planspec.batch.split_batch`` with the CLI's wording for a batch that is too small."""
    try:
        return split_batch(total, weights, floor)
    except ValueError:
        raise InputError(
            f"--batch: {total} samples cannot give {len(weights)} replicas {floor} each "
            f"(one per micro-batch)"
        ) from None


def _replica_speed(
    graph: ModelGraph,
    cluster: Cluster,
    compute: ComputeModel,
    stages: list[StagePlan],
    starts: list[int],
    batch: int,
) -> float:
    """Samples per second of a replica's bottleneck stage at ``batch``."""
    worst = 0.0
    for s, stage in enumerate(stages):
        hi = starts[s + 1] if s + 1 < len(starts) else len(graph.layers)
        for dev in stage.devices:
            costs = compute.layer_costs(graph, cluster.device(dev), batch)[starts[s] : hi]
            worst = max(worst, sum(c.fwd_s + c.bwd_s for c in costs) / len(stage.devices))
    return batch / worst if worst > 0 else 1.0


def parse_dtype(text: str) -> str:
    """The ``--dtype`` option: a dtype a model trains in (``planspec.dtypes.TRAINING_DTYPES``),
    written into the plan's ``model.dtype``; InputError names the option otherwise."""
    if text not in TRAINING_DTYPES:
        raise InputError(f"--dtype: {text!r}; expected one of {', '.join(TRAINING_DTYPES)}")
    return text


def _check_options(strategy: str, **counts: int | None) -> None:
    if strategy not in SPECS:
        raise InputError(f"--strategy: {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    for name, value in counts.items():
        if value is not None and value < 1:
            flag = "--" + name.replace("micro_batch", "microbatch").replace("_", "-")
            raise InputError(f"{flag}: must be >= 1 (got {value})")


def _default_micro_batches(
    strategy: str, stages: int, per_replica: int, micro_batch_size: int | None
) -> int:
    if micro_batch_size is not None:
        return max(1, math.ceil(per_replica / micro_batch_size))
    if spec_of(strategy).shape != "replicas":
        return min(MICRO_BATCHES_PER_STAGE * stages, per_replica)
    return 1


@dataclass(frozen=True)
class PlanShape:
    """What the options say without the model: the devices in stage order, the replicas
    (pipelines) and the stages of each."""

    devices: list[str]
    replicas: int
    stages: int


def plan_shape(
    cluster: Cluster,
    *,
    strategy: str,
    batch: int | None = None,
    dp: int | None = None,
    pp: int | None = None,
    tp: int = 1,
    micro_batches: int | None = None,
    micro_batch_size: int | None = None,
    partition: Sequence[int] | None = None,
    devices: Sequence[str] | None = None,
    ps_devices: Sequence[str] | None = None,
) -> PlanShape:
    """The options of :func:`plan_from_options` checked against ``cluster`` alone, so that a
    wrong one is refused before the model is traced; InputError names the option."""
    _check_options(
        strategy,
        tp=tp,
        dp=dp,
        pp=pp,
        batch=batch,
        micro_batches=micro_batches,
        micro_batch_size=micro_batch_size,
    )
    pool = list(devices) if devices is not None else [d.id for d in cluster.devices]
    for d in [*pool, *(ps_devices or [])]:
        cluster.device(d)  # InputError naming the id and the known ones
    if partition is not None and pp is None and spec_of(strategy).shape != "replicas":
        pp = len(partition) + (0 if partition and partition[0] == 0 else 1)
    if not 1 <= tp <= len(pool):
        raise InputError(
            f"--tp {tp}: a tensor-parallel group needs {tp} devices, {len(pool)} given"
        )
    nrep, nst = _shape(strategy, len(pool), dp, pp, tp)
    need = nrep * nst * tp
    if nrep < 1 or nst < 1 or need > len(pool):
        raise InputError(
            f"--devices: {strategy} with dp={nrep}, pp={nst}, tp={tp} needs {max(need, 1)} "
            f"devices, {len(pool)} given"
        )
    return PlanShape(devices=pool, replicas=nrep, stages=nst)


def plan_from_options(
    graph: ModelGraph,
    cluster: Cluster,
    *,
    model: ModelRef,
    strategy: str,
    batch: int | None = None,
    dp: int | None = None,
    pp: int | None = None,
    tp: int = 1,
    micro_batches: int | None = None,
    micro_batch_size: int | None = None,
    partition: Sequence[int] | None = None,
    devices: Sequence[str] | None = None,
    optimizer: str = "sgd",
    compute: ComputeModel | None = None,
    sync: str = "bsp",
    staleness: int = 0,
    ps_devices: Sequence[str] | None = None,
    ps_async: bool = False,
    recompute: bool = False,
    recompute_mode: str = "all",
    bucket_mb: float = 25.0,
    zero: int | None = None,
    shard_stages: bool = False,
) -> Plan:
    """A :class:`Plan` from the common options; InputError names the offending option
    (``zero``: the ZeRO stage of an ``fsdp`` plan or of a hybrid's sharded stages, None for
    the plan's default)."""
    if shard_stages and strategy != "hybrid":
        raise InputError(f"--shard-stages: only strategy hybrid shards its stages (got {strategy})")
    if zero is not None and strategy != "fsdp" and not shard_stages:
        raise InputError(
            f"--zero {zero}: only strategy fsdp, or hybrid with --shard-stages, has ZeRO "
            f"stages (got {strategy})"
        )
    shape = plan_shape(
        cluster, strategy=strategy, batch=batch, dp=dp, pp=pp, tp=tp,
        micro_batches=micro_batches, micro_batch_size=micro_batch_size, partition=partition,
        devices=devices, ps_devices=ps_devices,
    )  # fmt: skip
    pool, nrep, nst = shape.devices, shape.replicas, shape.stages
    starts = _bounds(len(graph.layers), nst, partition)
    names = [layer.name for layer in graph.layers]
    pipes_stages: list[list[StagePlan]] = []
    for r in range(nrep):
        stages = []
        for s in range(nst):
            hi = starts[s + 1] if s + 1 < nst else len(names)
            first = (r * nst + s) * tp
            stages.append(StagePlan(layers=names[starts[s] : hi], devices=pool[first : first + tp]))
        pipes_stages.append(stages)
    total = batch if batch is not None else DEFAULT_BATCH_PER_REPLICA * nrep
    per_rep = math.ceil(total / nrep)
    if micro_batches is None:
        micro_batches = _default_micro_batches(strategy, nst, per_rep, micro_batch_size)
    if compute is not None and nrep > 1:
        weights = [
            _replica_speed(graph, cluster, compute, st, starts, max(per_rep // micro_batches, 1))
            for st in pipes_stages
        ]
    else:
        weights = [1.0] * nrep
    shares = _split_batch(total, weights, micro_batches)
    data = {
        "model": to_data(model),
        "strategy": strategy,
        "global_batch": total,
        "pipelines": [
            to_data(PipelinePlan(stages=st, batch=b))
            for st, b in zip(pipes_stages, shares, strict=True)
        ],
        "micro_batches": micro_batches,
        "tp": tp,
        "optimizer": optimizer,
        "recompute": recompute,
        "recompute_mode": recompute_mode,
        "sync": sync,
        "staleness": staleness,
        "ps_devices": list(ps_devices)
        if ps_devices is not None
        else (
            [p[0].devices[0] for p in pipes_stages] if spec_of(strategy).hosts_parameters else []
        ),
        "ps_async": ps_async,
        "bucket_mb": bucket_mb,
        "cluster": cluster.name,
    }
    if zero is not None:
        data["zero"] = zero
    if shard_stages:
        data["shard_stages"] = True
    return from_data(Plan, data, "options")
