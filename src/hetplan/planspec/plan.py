"""The plan as data: what runs where. Round-trips to JSON exactly (see hetplan.serde).

One representation covers every strategy: a plan is a list of *pipelines* (data-parallel
replicas; HetPipe's virtual workers), each a list of *stages* (contiguous layers on one device
or on a tensor-parallel group). Data parallelism is N pipelines of one stage; GPipe/1F1B is one
pipeline of S stages; hybrid is N pipelines of S stages with the same stage boundaries.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from hetplan.planspec.strategies import Strategy, spec_of

Optimizer = Literal["sgd", "momentum", "adam"]
Sync = Literal["bsp", "wsp"]
PsAssignment = Literal["round_robin", "size"]
RecomputeMode = Literal["all", "except_last"]
RECOMPUTE_MODES: tuple[RecomputeMode, ...] = ("all", "except_last")
RECOMPUTE_TEXT: dict[RecomputeMode, str] = {
    "all": "every micro-batch",
    "except_last": "except each iteration's last micro-batch (torchgpipe's default)",
}
"""How ``predict``, the plan page and the plan table name a recompute mode."""

ZERO_STAGES = (1, 2, 3)
"""ZeRO stages a ``fsdp`` plan may name (``hetplan.cost.sharded``): 1 shards the optimizer
state only (torch's ``ZeroRedundancyOptimizer``), 2 and 3 run FSDP2."""

MAX_BATCH = 2**31 - 1
"""Largest global batch, samples per iteration: far above any real one; below it the batch
splits (float64 shares, exact to 2^53) always sum to the batch."""


@dataclass(kw_only=True)
class ModelRef:
    """Which model to build, so that ``predict`` and ``train`` rebuild the same graph."""

    name: str
    """Zoo name, ``path/to/file.py:function`` or ``package.module:function``."""
    dataset: str | None = None
    """Input shape preset: mnist, cifar10, imagenet, highres (vision models); None = default."""
    depth: int | None = None
    """Layer granularity (module depth); None = the model's default."""
    dtype: str = "fp32"
    """Training dtype of parameters and activations."""


@dataclass(kw_only=True)
class StagePlan:
    """Contiguous layers on one device, or on a tensor-parallel group of ``tp`` devices."""

    layers: list[str]
    """Module FQNs, in model order."""
    devices: list[str]
    """Cluster device ids; more than one is a tensor-parallel group."""


@dataclass(kw_only=True)
class PipelinePlan:
    """One data-parallel replica: a pipeline of stages (a single stage for plain DP)."""

    stages: list[StagePlan]
    batch: int
    """Samples of the global batch this replica processes per iteration."""


@dataclass(kw_only=True)
class Plan:
    """A complete training plan."""

    model: ModelRef
    strategy: Strategy
    global_batch: int
    """Samples per iteration (one optimizer step), summed over replicas."""
    pipelines: list[PipelinePlan]
    micro_batches: int = 1
    """Micro-batches per replica per iteration (pipelined strategies)."""
    tp: int = 1
    """Tensor-parallel degree of every stage."""
    optimizer: Optimizer = "sgd"
    recompute: bool = False
    """Activation recomputation: keep only stage inputs, recompute the rest in backward."""
    recompute_mode: RecomputeMode = "all"
    """With ``recompute``, which micro-batches are checkpointed: ``all`` (every one; plans
    without the field), or ``except_last`` (torchgpipe's ``checkpoint='except_last'``: not
    each iteration's last micro-batch, one recomputed forward less per stage and iteration;
    under hetplan's orders it is held whole beside the others' inputs, docs/cost-models.md
    section 6)."""
    sync: Sync = "bsp"
    """Hybrid only: synchronise replicas every iteration (bsp) or every wave (HetPipe's WSP)."""
    staleness: int = 0
    """WSP staleness bound D (waves a replica may run ahead)."""
    ps_devices: list[str] = field(default_factory=list)
    """Parameter-server shard hosts (strategy ps); may overlap with workers."""
    ps_assignment: PsAssignment = "round_robin"
    """How parameter tensors are assigned to PS shards (TensorFlow: round robin; MXNet: size)."""
    ps_async: bool = False
    """Asynchronous parameter server (workers do not wait for each other)."""
    bucket_mb: float = 25.0
    """Gradient bucket cap in MB (DistributedDataParallel's bucket_cap_mb)."""
    zero: int = 3
    """fsdp only: the ZeRO stage. 3 and 2 run FSDP2: 3 gathers each layer again for its
    backward (``reshard_after_forward=True``, the default), 2 keeps it gathered from forward
    to backward (one all-gather per micro-batch, every layer held meanwhile). 1 shards only
    the optimizer state (torch's ``ZeroRedundancyOptimizer``): every replica holds the whole
    weights and gradients, all-reduces the gradients as ``dp`` does, steps the parameters it
    owns and broadcasts them."""
    shard_stages: bool = False
    """hybrid only: the replicas of each stage shard its weights, gradients and optimizer
    state with FSDP2 at ZeRO stage ``zero`` (2 or 3) instead of all-reducing its gradients
    (pipelines of sharded stages, as torchtitan composes pipeline parallelism with FSDP2)."""
    cluster: str | None = None
    """Name of the cluster the plan was made for (informative)."""
    cluster_digest: str | None = None
    """Digest of that cluster's device ids, types and nodes (``plan.stamp``): ``predict``
    and ``train`` refuse the plan on another cluster unless told to use it anyway."""

    def __post_init__(self) -> None:
        _check_plan(self)

    @property
    def devices(self) -> list[str]:
        """Every worker device of the plan, in pipeline then stage order."""
        return [d for p in self.pipelines for s in p.stages for d in s.devices]

    @property
    def num_stages(self) -> int:
        return len(self.pipelines[0].stages)

    @property
    def recompute_text(self) -> str:
        """Which micro-batches are recomputed, in words ("off" without recomputation)."""
        return RECOMPUTE_TEXT[self.recompute_mode] if self.recompute else "off"


def _check_plan(plan: Plan) -> None:
    """Structural checks that need no model or cluster (torchtitan-style, numbers in messages)."""
    if not 1 <= plan.global_batch <= MAX_BATCH:
        raise ValueError(
            f"global_batch: must be between 1 and {MAX_BATCH} (got {plan.global_batch})"
        )
    if not plan.bucket_mb > 0:
        raise ValueError(f"bucket_mb: must be > 0 MB (got {plan.bucket_mb:g})")
    if not plan.pipelines:
        raise ValueError("pipelines: at least one pipeline is required")
    if plan.micro_batches < 1 or plan.tp < 1 or plan.staleness < 0:
        raise ValueError(
            f"micro_batches ({plan.micro_batches}) and tp ({plan.tp}) must be >= 1, "
            f"staleness ({plan.staleness}) >= 0"
        )
    _check_recompute(plan)
    total = sum(p.batch for p in plan.pipelines)
    if total != plan.global_batch:
        raise ValueError(
            f"pipelines: batches sum to {total}, expected global_batch {plan.global_batch}"
        )
    for i, pipe in enumerate(plan.pipelines):
        _check_pipeline(plan, i, pipe)
    devices = plan.devices
    dup = sorted(d for d, n in Counter(devices).items() if n > 1)  # not O(devices^2)
    if dup:
        raise ValueError(f"devices used twice: {', '.join(dup)}")
    nstages = {len(p.stages) for p in plan.pipelines}
    spec = spec_of(plan)
    if spec.shape == "replicas" and nstages != {1}:
        raise ValueError(f"strategy {plan.strategy}: every pipeline must have exactly 1 stage")
    if spec.shape == "pipeline" and len(plan.pipelines) != 1:
        raise ValueError(
            f"strategy {plan.strategy}: exactly 1 pipeline expected "
            f"(got {len(plan.pipelines)}; use hybrid for several)"
        )
    if spec.shape == "pipelines":
        bounds = {tuple(s.layers[0] for s in p.stages) for p in plan.pipelines}
        if len(bounds) > 1:
            raise ValueError(
                f"strategy {plan.strategy}: every pipeline must have the same stage boundaries"
            )
    if spec.hosts_parameters and not plan.ps_devices:
        raise ValueError(f"strategy {plan.strategy}: ps_devices must name at least one device")


def _check_recompute(plan: Plan) -> None:
    if plan.zero not in ZERO_STAGES:  # with recompute: the per-plan training options
        raise ValueError(f"zero: expected one of 1, 2, 3 (got {plan.zero!r})")
    if plan.shard_stages and (plan.strategy != "hybrid" or plan.sync != "bsp" or plan.zero < 2):
        raise ValueError(
            "shard_stages: only a hybrid plan with sync bsp and zero 2 or 3 shards its stages "
            f"(got strategy {plan.strategy}, sync {plan.sync}, zero {plan.zero})"
        )
    if plan.recompute_mode not in RECOMPUTE_MODES:
        raise ValueError(
            f"recompute_mode: expected one of {', '.join(RECOMPUTE_MODES)} "
            f"(got {plan.recompute_mode!r})"
        )
    if plan.recompute_mode != "all" and not plan.recompute:
        raise ValueError(
            f"recompute_mode: {plan.recompute_mode!r} needs recompute: true "
            "(without recomputation no micro-batch is checkpointed)"
        )


def _check_pipeline(plan: Plan, i: int, pipe: PipelinePlan) -> None:
    if not pipe.stages:
        raise ValueError(f"pipelines.{i}.stages: at least one stage is required")
    if pipe.batch < plan.micro_batches:
        raise ValueError(
            f"pipelines.{i}.batch ({pipe.batch}) must be >= micro_batches ({plan.micro_batches})"
        )
    for j, stage in enumerate(pipe.stages):
        where = f"pipelines.{i}.stages.{j}"
        if not stage.layers:
            raise ValueError(f"{where}.layers: at least one layer is required")
        if len(stage.devices) != plan.tp:
            raise ValueError(
                f"{where}.devices: {len(stage.devices)} devices, expected tp = {plan.tp}"
            )
