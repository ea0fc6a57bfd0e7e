"""Sharded data parallelism (ZeRO, FSDP2): what each rank holds and moves per step.

The groups are FSDP2's (``torch.distributed.fsdp.fully_shard``): one per wrapped module, here
one per hetplan layer, each all-gathered before its forward and (unless it stays gathered)
again before its backward, its gradients reduce-scattered after its backward. What a rank
holds follows FSDP2's rule for an ``n``-rank shard group
(``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``, ``FSDPParam._init_sharded_param``,
torch 2.13): every parameter is cut on dim 0 into ``torch.chunk(n)`` pieces, rank ``r`` owning
rows ``[r c, min((r+1) c, rows))`` with ``c = ceil(rows / n)``, and *every* rank stores a
buffer padded to ``c`` rows, which is also what it contributes to the all-gather and receives
from the reduce-scatter. Shards are therefore even whatever the ranks' memory: a plan on mixed
devices gives each rank the same state bytes and a batch share by speed.

ZeRO stages (Rajbhandari et al., SC'20) as FSDP2 runs them: 3 shards parameters, gradients
and optimizer state (FSDP2's default: each group gathered again for its backward), 2 keeps the
parameters gathered from forward to backward (``reshard_after_forward=False``: one all-gather
per step, the whole model held meanwhile). Stage 1 (optimizer state only: torch's
``ZeroRedundancyOptimizer`` over DDP, which partitions whole tensors and broadcasts them after
the step) is not priced here.

Pure functions of byte counts: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hetplan.graph.types import LayerInfo

ZeroStage = Literal[2, 3]

# Reduce-scatter input buffers FSDP2 keeps alive after their collective is issued, until a
# later group's post-backward reclaims them (``reduce_scatter_max_input_buffers``, default 1,
# ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, torch 2.13): while a group's
# gradients are computed the previously differentiated group's whole gradients are held. Measured
# on vgg11, 2 gloo ranks, ZeRO-3 (docs/benchmarks.md, "Sharded data parallelism"): at the
# peak (a 512x512 convolution's backward) its 9.44 MB weight gradient and the previous
# group's 9.44 MB reduce-scatter input are both live.
REDUCE_SCATTER_KEPT_BUFFERS = 1  # whole-gradient buffers of earlier groups
ZERO_STAGES: tuple[ZeroStage, ...] = (2, 3)


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor: its bytes and its dim-0 size."""

    nbytes: int
    rows: int


def chunk_rows(rows: int, n: int) -> int:
    """``c = ceil(rows / n)``: the rows of ``torch.chunk``'s first piece, the padded shard."""
    return -(-rows // n)


def local_rows(rows: int, n: int, rank: int) -> int:
    """Rows rank ``rank`` of ``n`` owns unpadded (0 where ``torch.chunk`` gives it none)."""
    c = chunk_rows(rows, n)
    return max(0, min(c, rows - rank * c))


def padded_shard_bytes(t: Tensor, n: int) -> int:
    """Bytes every rank stores of ``t`` (the padded shard: ``c`` rows of ``nbytes / rows``)."""
    return chunk_rows(t.rows, n) * (t.nbytes // t.rows)


def local_shard_bytes(t: Tensor, n: int, rank: int) -> int:
    """Bytes of ``t`` rank ``rank`` owns unpadded: what its optimizer state is sized by."""
    return local_rows(t.rows, n, rank) * (t.nbytes // t.rows)


def layer_tensors(layer: LayerInfo) -> list[Tensor]:
    """``layer``'s parameter tensors. A graph cached before the rows were recorded has none:
    each tensor is then taken as one byte per row (sharded without padding), the smallest
    the padding can be."""
    sizes = layer.param_tensor_bytes or ((layer.param_bytes,) if layer.param_bytes > 0 else ())
    rows = layer.param_tensor_rows
    if len(rows) != len(sizes):  # unknown rows: shard by elements, no padding
        return [Tensor(nbytes=b, rows=max(b, 1)) for b in sizes]
    return [Tensor(nbytes=b, rows=r) for b, r in zip(sizes, rows, strict=True)]


def group_shard_bytes(tensors: Sequence[Tensor], n: int) -> int:
    """Bytes one rank stores of a group's parameters (padded shards, the same on every rank)."""
    return sum(padded_shard_bytes(t, n) for t in tensors)


def group_gathered_bytes(tensors: Sequence[Tensor], n: int) -> int:
    """Bytes of a group's all-gather output (and reduce-scatter input): ``n`` padded shards."""
    return n * group_shard_bytes(tensors, n)


@dataclass(frozen=True, kw_only=True)
class GroupTraffic:
    """One group's collectives in one step, as sizes of the whole (gathered) buffer."""

    all_gathers: int
    """All-gathers of the group's parameters: 1 (forward) or 2 (and backward)."""
    gathered_bytes: int
    """Output bytes of one all-gather (``n`` padded shards, in the parameter dtype)."""
    reduce_scatter_bytes: int
    """Input bytes of the reduce-scatter of its gradients (``n`` padded shards, in the
    gradient dtype)."""


def step_traffic(
    groups: Sequence[Sequence[Tensor]],
    n: int,
    *,
    stage: ZeroStage = 3,
    grad_scale: float = 1.0,
) -> list[GroupTraffic]:
    """Per group, the collectives of one step on an ``n``-rank shard group: ZeRO-3 gathers
    before forward and backward, ZeRO-2 before forward only; one reduce-scatter of the
    gradients, ``grad_scale`` x the parameters' bytes (fp32 gradients of a bf16 graph: 2)."""
    out = []
    for tensors in groups:
        gathered = group_gathered_bytes(tensors, n)
        gathers = 2 if stage == 3 else 1
        out.append(
            GroupTraffic(
                all_gathers=gathers if gathered else 0,
                gathered_bytes=gathered,
                reduce_scatter_bytes=round(gathered * grad_scale),
            )
        )
    return out


def sent_bytes_per_rank(traffic: Sequence[GroupTraffic], n: int) -> float:
    """Bytes one rank sends in a step over a ring: ``(n - 1) / n`` of every collective's
    whole buffer (Patarasuk & Yuan 2009: each of the ``n - 1`` steps sends one shard)."""
    whole = sum(g.all_gathers * g.gathered_bytes + g.reduce_scatter_bytes for g in traffic)
    return whole * (n - 1) / n if n > 1 else 0.0


@dataclass(frozen=True, kw_only=True)
class ShardedMemory:
    """Bytes one rank holds at its state's peak in the backward, by kind (activations are
    the caller's)."""

    weights: float
    """Its parameter shards (padded, as FSDP2 stores them)."""
    grads: float
    """Its gradient shards made so far: those of the groups after the peak's (the runtime
    sets the gradients to None before each step, and FSDP2 writes each group's shard at its
    reduce-scatter)."""
    optimizer: float
    """Its optimizer state: the unpadded local rows' slots."""
    gathered: float
    """Parameters gathered at once, beside the shards: under ZeRO-3 the group being
    differentiated and the one before it (FSDP2 prefetches the next group of the backward),
    under ZeRO-2 every group (gathered from forward to backward)."""
    unsharded_grads: float
    """Whole gradients alive at once: the group's own, between its backward and its
    reduce-scatter, and the reduce-scatter inputs of the :data:`REDUCE_SCATTER_KEPT_BUFFERS`
    groups after it (differentiated just before)."""

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.gathered + self.unsharded_grads


def rank_memory(
    groups: Sequence[Sequence[Tensor]],
    n: int,
    rank: int,
    *,
    stage: ZeroStage = 3,
    state_bytes_per_param_byte: float,
    grad_scale: float = 1.0,
    weight_scale: float = 1.0,
) -> ShardedMemory:
    """What rank ``rank`` of ``n`` holds of the model's state (``groups`` in forward order;
    those without parameters are no FSDP2 group) while the group where that is largest is
    differentiated. ``state_bytes_per_param_byte`` is the optimizer state per byte of
    parameter (e.g. Adam's two fp32 slots on fp32 parameters: 2); ``weight_scale`` and
    ``grad_scale`` the bytes of the weights and the gradients per byte of ``groups`` (fp32
    of a bf16 graph: 2). Measured on vgg11 (docs/benchmarks.md, "Sharded data
    parallelism"): at the peak the differentiated 512x512 convolution's gathered weights and
    gradient, the prefetched convolution before it and the kept reduce-scatter input of the
    one after it (4 x 9.44 MB) beside the one gradient shard made so far (4.72 MB)."""
    shard = [b for b in (group_shard_bytes(g, n) for g in groups) if b > 0]  # FSDP2's groups
    whole = [n * s for s in shard]
    local = sum(local_shard_bytes(t, n, rank) for g in groups for t in g)
    best = (0.0, 0.0, 0.0)  # gathered, whole gradients, gradient shards
    for k in range(len(whole)):
        before = whole[k - 1] if k > 0 else 0
        gathered = float(sum(whole) if stage == 2 else whole[k] + before) * weight_scale
        kept = whole[k + 1 : k + 1 + REDUCE_SCATTER_KEPT_BUFFERS]
        unsharded = (whole[k] + sum(kept)) * grad_scale
        grads = sum(shard[k + 1 :]) * grad_scale
        if gathered + unsharded + grads > sum(best):
            best = (gathered, unsharded, grads)
    gathered, unsharded, grads = best
    return ShardedMemory(
        weights=sum(shard) * weight_scale, grads=grads,
        optimizer=local * state_bytes_per_param_byte,
        gathered=gathered, unsharded_grads=unsharded,
    )  # fmt: skip


def gather_padding(tensors: Sequence[Tensor], n: int) -> float:
    """Fraction of a group's gathered bytes that is padding (``0`` when every tensor's rows
    divide by ``n``)."""
    total = group_gathered_bytes(tensors, n)
    return 0.0 if total == 0 else 1.0 - sum(t.nbytes for t in tensors) / total


def is_even(tensors: Sequence[Tensor], n: int) -> bool:
    """Whether every rank owns the same rows of every tensor (no padding)."""
    return all(t.rows % n == 0 for t in tensors)


def gathered_pass(
    compute_s: Sequence[float],
    gather_s: Sequence[float],
    scatter_s: Sequence[float] = (),
    *,
    overlap: bool = True,
) -> float:
    """Seconds of one forward or backward pass over the groups in the order given.

    Group ``k`` computes once its all-gather is in; one communication stream runs the
    collectives in the order they are issued: group ``k + 1``'s all-gather when group ``k``
    starts computing (FSDP2 runs one all-gather ahead: implicitly in forward, where the host
    issues ahead of the device, and by its backward prefetch), group ``k``'s reduce-scatter
    when its compute ends. The pass ends with the last compute or collective. Without
    ``overlap`` (CPU ranks: gloo's copies run on the cores that compute) everything is
    serial: the sum."""
    if not overlap:
        return float(sum(compute_s) + sum(gather_s) + sum(scatter_s))
    n = len(compute_s)
    if n == 0:
        return 0.0
    gathered = [0.0] * n
    comm = gathered[0] = gather_s[0]
    clock = 0.0
    for k in range(n):
        start = max(clock, gathered[k])
        if k + 1 < n:
            comm = gathered[k + 1] = max(comm, start) + gather_s[k + 1]
        clock = start + compute_s[k]
        if scatter_s:
            comm = max(comm, clock) + scatter_s[k]
    return max(clock, comm)


def zero1_partition(elements: Sequence[int], n: int) -> list[list[int]]:
    """ZeRO-1's owners: per rank of ``n``, the indices of the tensors (of ``elements``
    elements each, in the module's parameter order) whose optimizer state it keeps and whose
    values it broadcasts. torch's ``ZeroRedundancyOptimizer._partition_parameters``: tensors
    largest first (a stable sort), each to the rank with the fewest elements so far (the
    lowest such rank on ties)."""
    owned: list[list[int]] = [[] for _ in range(n)]
    sizes = [0] * n
    for i in sorted(range(len(elements)), key=lambda k: -elements[k]):
        rank = sizes.index(min(sizes))
        owned[rank].append(i)
        sizes[rank] += elements[i]
    return owned
