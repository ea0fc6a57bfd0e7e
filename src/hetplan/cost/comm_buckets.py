"""Gradient bucketing (DDP, Horovod tensor fusion) and overlap of allreduce with backward.

Layers are indexed in forward (registration) order; backward runs from the last layer to
the first, so a bucket can start once the lowest-indexed layer it holds has finished its
backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hetplan.graph.types import LayerInfo
from hetplan.units import MiB

# torch.nn.parallel.DistributedDataParallel: bucket_cap_mb defaults to 25 (MiB: DDP
# multiplies by 1024 * 1024; torch/nn/parallel/distributed.py, _DEFAULT_BUCKET_CAP_MB).
DDP_BUCKET_CAP_BYTES = 25 * MiB  # bytes
# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB: the first bucket in gradient-ready
# order is kept small so the first allreduce starts early (c10d reducer.cpp, rebuild_buckets).
DDP_FIRST_BUCKET_BYTES = 1 * MiB  # bytes
# Horovod tensor fusion buffer: "Default fusion buffer size is 64 MB" (docs/tensor-fusion.rst;
# the setting paper 003 used). Horovod >= 0.21 raised it to 128 MB (horovod PR #2468).
HOROVOD_FUSION_THRESHOLD_BYTES = 64 * MiB  # bytes
# Horovod cycle time between fusion rounds: 5 ms before 0.21, 1 ms since (PR #2468).
HOROVOD_CYCLE_TIME_S = 5e-3  # seconds


@dataclass(frozen=True)
class GradBucket:
    """A group of gradients reduced by one allreduce call."""

    nbytes: int
    """Bytes of all gradients in the bucket."""
    last_layer: int
    """Index of the layer whose backward must finish before the bucket is ready (the lowest
    layer index in the bucket, since backward runs in reverse)."""


def layer_tensor_bytes(layers: Sequence[LayerInfo]) -> list[tuple[int, ...]]:
    """Each layer's parameter tensor sizes, falling back to one tensor of ``param_bytes``
    where the extractor did not list them (the input ``ddp_buckets`` and PS sharding take)."""
    return [
        layer.param_tensor_bytes or ((layer.param_bytes,) if layer.param_bytes > 0 else ())
        for layer in layers
    ]


def _ready_order(layer_param_tensor_bytes: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """(layer, bytes) of every parameter tensor in reverse registration order."""
    return [
        (layer, int(nbytes))
        for layer in reversed(range(len(layer_param_tensor_bytes)))
        for nbytes in reversed(layer_param_tensor_bytes[layer])
    ]


def first_bucket(cap_bytes: float) -> float:
    """The first bucket's limit for a bucket cap: DDP's 1 MiB, or the cap if smaller (as DDP
    does when ``bucket_cap_mb`` is given), so that no bucket is much above the cap."""
    return min(DDP_FIRST_BUCKET_BYTES, cap_bytes)


def ddp_buckets(
    layer_param_tensor_bytes: Sequence[Sequence[int]],
    cap_bytes: float = DDP_BUCKET_CAP_BYTES,
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
) -> list[GradBucket]:
    """Buckets as DistributedDataParallel forms them, in the order they are reduced.

    Parameters are taken in reverse registration order (DDP's approximation of gradient-ready
    order, and the order its bucket rebuild records after the first iteration). A tensor is
    appended to the open bucket; the bucket closes once its size reaches the current limit
    (so it may exceed it by the last tensor). The first limit is ``first_bucket_bytes``, then
    ``cap_bytes`` (c10d ``compute_bucket_assignment_by_size``). Newer torch versions use
    ``cap_bytes`` for the first bucket too when ``bucket_cap_mb`` is set: pass
    ``first_bucket_bytes=cap_bytes`` for that.
    """
    sizes = layer_param_tensor_bytes
    return [
        GradBucket(sum(int(sizes[layer][i]) for layer, i in members), min(m[0] for m in members))
        for members in ddp_bucket_members(sizes, cap_bytes, first_bucket_bytes)
    ]


def ddp_bucket_members(
    layer_param_tensor_bytes: Sequence[Sequence[int]],
    cap_bytes: float = DDP_BUCKET_CAP_BYTES,
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
) -> list[list[tuple[int, int]]]:
    """The tensors of each bucket of :func:`ddp_buckets` as (layer, index in the layer), in
    the order they join it: what the runtime all-reduces together (one assignment for the
    price and the run)."""
    buckets: list[list[tuple[int, int]]] = []
    open_: list[tuple[int, int]] = []
    size, limit = 0, first_bucket_bytes
    for layer in reversed(range(len(layer_param_tensor_bytes))):
        tensors = layer_param_tensor_bytes[layer]
        for i in reversed(range(len(tensors))):
            size += int(tensors[i])
            open_.append((layer, i))
            if size >= limit:
                buckets.append(open_)
                open_, size, limit = [], 0, cap_bytes
    if open_:
        buckets.append(open_)
    return buckets


def fusion_buckets(
    layer_param_tensor_bytes: Sequence[Sequence[int]],
    threshold_bytes: float = HOROVOD_FUSION_THRESHOLD_BYTES,
    *,
    bwd_layer_times: Sequence[float] | None = None,
    cycle_time_s: float = HOROVOD_CYCLE_TIME_S,
) -> list[GradBucket]:
    """Horovod tensor-fusion groups, in reduction order.

    Horovod fuses "the first few tensors that fit in HOROVOD_FUSION_THRESHOLD bytes" among
    those ready in a cycle (docs/tensor-fusion.rst); a tensor larger than the threshold is
    reduced alone. Without ``bwd_layer_times`` every tensor is assumed ready together
    (greedy packing in ready order). With them, a tensor joins the cycle in which its layer's
    backward finishes (cycles of ``cycle_time_s``), and packing restarts every cycle.
    """
    ready = _ready_order(layer_param_tensor_bytes)
    cycle = [0] * len(ready)
    if bwd_layer_times is not None:
        done = _backward_done_times(bwd_layer_times)
        cycle = [math.ceil(done[layer] / cycle_time_s - 1e-9) for layer, _ in ready]
    buckets: list[GradBucket] = []
    size, low, cur = 0, -1, cycle[0] if cycle else 0
    for (layer, nbytes), c in zip(ready, cycle, strict=True):
        if low >= 0 and (c != cur or size + nbytes > threshold_bytes):
            buckets.append(GradBucket(size, low))
            size, low = 0, -1
        size += nbytes
        low, cur = layer, c
    if low >= 0:
        buckets.append(GradBucket(size, low))
    return buckets


def _backward_done_times(bwd_layer_times: Sequence[float]) -> list[float]:
    """``done[i]``: time from the start of backward until layer ``i``'s backward finishes."""
    done = [0.0] * len(bwd_layer_times)
    t = 0.0
    for i in reversed(range(len(bwd_layer_times))):
        t += bwd_layer_times[i]
        done[i] = t
    return done


def overlapped_allreduce_timeline(
    bwd_layer_times: Sequence[float],
    buckets: Sequence[GradBucket],
    allreduce: Callable[[float], float],
) -> list[tuple[float, float]]:
    """(start, end) of every bucket's allreduce, from the start of the backward pass.

    One communication stream: bucket ``k`` starts at ``max(ready_k, end_{k-1})`` where
    ``ready_k`` is when layer ``last_layer`` finishes its backward; it lasts
    ``allreduce(nbytes)``. Buckets run in the given order (DDP launches them in order).
    """
    done = _backward_done_times(bwd_layer_times)
    spans: list[tuple[float, float]] = []
    end = 0.0
    for bucket in buckets:
        start = max(done[bucket.last_layer], end)
        end = start + allreduce(float(bucket.nbytes))
        spans.append((start, end))
    return spans


def overlapped_allreduce_exposed(
    bwd_layer_times: Sequence[float],
    buckets: Sequence[GradBucket],
    allreduce: Callable[[float], float],
) -> float:
    """Communication time left after the backward pass ends, with per-bucket overlap.

    ``exposed = max(0, end_last - sum(bwd_layer_times))`` with the schedule of
    ``overlapped_allreduce_timeline``. This is the refinement paper 003 (Sec. 5.2, VGG-11)
    proposes: use each layer's backward time and gradient size to decide whether
    communication really overlaps, instead of assuming all but the last allreduce do.
    """
    spans = overlapped_allreduce_timeline(bwd_layer_times, buckets, allreduce)
    if not spans:
        return 0.0
    return max(0.0, spans[-1][1] - sum(bwd_layer_times))


def horovod_worst_case_exposed(
    total_grad_bytes: float,
    threshold: float,
    allreduce: Callable[[float], float],
) -> float:
    """Paper 003 Eq. 5.1's communication term: one exposed allreduce of ``min(G, th)`` bytes.

    The thesis assumes every fused allreduce but the last overlaps with backward and that the
    last carries a full fusion buffer (its "worst-case scenario"). With ``allreduce`` the
    ring model on the slowest link this is ``2(W-1) max_i(L_i + min(G, th)/(W BW_i))``.
    """
    if total_grad_bytes <= 0:
        return 0.0
    return allreduce(min(total_grad_bytes, threshold))
