"""A flushed stage's peak taken over its step's phases, not as the sum of each term's largest.

:func:`hetplan.cost.memory.stage_memory` adds every term at its largest: all saved
activations, the backward's workspace, every gradient and every gradient bucket. They are not
all alive at once on a rank whose executor flushes each step (dp, GPipe, 1F1B, hybrid):

- gradient buckets (:class:`hetplan.run.execute.gradsync.BucketSync`) are flat copies made
  during the step's *last* backward, each once its layers' gradients are in, and held until
  the optimizer step; by then the other micro-batches' activations are freed;
- with a single micro-batch the runtime set the gradients to None before the step, so a
  layer's gradients exist only from its own backward on (with several, the earlier
  micro-batches' gradients are held whole).

So the stage holds, beside what every phase holds (weights, optimizer state, inputs kept,
autocast's copies...), the largest of:

1. the first backwards, every in-flight micro-batch's activations, the workspace, the
   gradients (several micro-batches only: with one this phase is the next);
2. the last backward at layer ``l`` (walked from the last layer back): the activations the
   layers up to ``l`` saved, ``l``'s workspace (``cost.memory.layer_workspace``:
   ``BACKWARD_GRAD_BUFFERS`` output-sized gradients, the loss's fp32 gradients at the last
   layer under mixed precision, and the accumulation's second gradient with several
   micro-batches), the
   gradients (all with several micro-batches, those of ``l`` and after with one) and the
   buckets complete by then (every member after ``l``: the runtime's bucket assignment);
3. the end of the backward: every gradient and every bucket;
4. the optimizer step: every gradient and the step's temporaries
   (:mod:`hetplan.cost.optimizer_step`), the buckets written back and freed
   (``BucketSync.finish``).

Measured (quick suite of 2026-11-28, worst rank, re-predicted): gpt-tiny dp on 4 ranks -21.4%
(its peak is the head's backward, before any bucket and almost every gradient), vgg11 hybrid
-23.6% (the buckets of its second stage come after its activations are freed); see
docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hetplan.cost.comm_buckets import ddp_bucket_members, first_bucket
from hetplan.cost.memory import (
    Floats,
    MemoryBreakdown,
    accumulation_grad_bytes,
    grad_scale,
    layer_bytes,
    layer_workspace,
    tp_grad_tensor_bytes,
)
from hetplan.cost.optimizer_step import optimizer_step_bytes
from hetplan.graph.types import LayerInfo
from hetplan.planspec.dtypes import DTYPE_BYTES

_PHASE_TERMS = ("activations", "backward_workspace", "grads", "comm_buffers")
"""The breakdown's terms that change between the phases (the rest is held throughout)."""


def backward_peak(
    mem: MemoryBreakdown,
    layers: Sequence[LayerInfo],
    *,
    micro_batch: int,
    micro_batches: int,
    optimizer: str,
    dtype: str,
    tp: int,
    bucket_cap_bytes: float,
    first: int = 0,
    foreach: bool = False,
) -> MemoryBreakdown:
    """``mem`` (:func:`hetplan.cost.memory.stage_memory` of a flushed stage, without
    recomputation) with its phase terms as held at the largest phase (module docstring);
    ``first``: the graph index of ``layers[0]`` (where tied weights' owners are found);
    ``foreach``: the optimizer takes torch's foreach path (CUDA ranks)."""
    if not layers:
        return mem
    per = layer_bytes(layers, optimizer=optimizer, dtype=dtype, tp=tp)
    grads = _grads_made(layers, per.grads, first, dtype)
    total_grads = mem.grads
    untracked = max(total_grads - float(grads.sum()), 0.0)  # a tied copy's: held throughout
    after = _buckets_after(layers, dtype, tp, bucket_cap_bytes, mem.comm_buffers)
    saved = np.cumsum(per.saved) * micro_batch
    several = micro_batches > 1
    temp = accumulation_grad_bytes(per) if several else 0.0
    from_l = np.cumsum(grads[::-1])[::-1] + untracked  # gradients made by l's backward
    held_grads = np.full(len(layers), total_grads) if several else from_l
    workspace = layer_workspace(layers, micro_batch, tp, dtype) + temp
    last = saved + workspace + held_grads + after
    k = int(np.argmax(last))
    step = _step_bytes(mem, layers, optimizer, dtype, tp, foreach)
    phases = [
        {"activations": float(saved[k]), "backward_workspace": float(workspace[k]),
         "grads": float(held_grads[k]), "comm_buffers": float(after[k]), "optimizer_step": 0.0},
        {"activations": 0.0, "backward_workspace": 0.0, "grads": total_grads,
         "comm_buffers": mem.comm_buffers, "optimizer_step": 0.0},
        {"activations": 0.0, "backward_workspace": 0.0, "grads": total_grads,
         "comm_buffers": 0.0, "optimizer_step": step},
    ]  # fmt: skip
    if several:
        phases.append(
            {
                **{t: getattr(mem, t) for t in _PHASE_TERMS},
                "comm_buffers": 0.0,
                "optimizer_step": 0.0,
            }
        )
    return mem.with_terms(**max(phases, key=lambda p: sum(p.values())))


def _step_bytes(
    mem: MemoryBreakdown,
    layers: Sequence[LayerInfo],
    optimizer: str,
    dtype: str,
    tp: int,
    foreach: bool,
) -> float:
    """The optimizer step's temporaries over the state ``mem`` keeps (its largest tensor's
    on the single-tensor path: the stage's largest, an upper bound for a ZeRO-1 share)."""
    per_element = DTYPE_BYTES[dtype] * grad_scale(dtype)
    sizes = tp_grad_tensor_bytes(layers, dtype, tp)
    largest = max((max(t) for t in sizes if t), default=0) / per_element
    return optimizer_step_bytes(mem.optimizer, largest, optimizer, foreach=foreach)


def _buckets_after(
    layers: Sequence[LayerInfo], dtype: str, tp: int, cap: float, total: float
) -> Floats:
    """Per layer ``l``, the bytes of the gradient buckets complete before ``l``'s backward:
    those whose every member belongs to a layer after ``l`` (the runtime's buckets,
    :func:`hetplan.cost.comm_buckets.ddp_bucket_members`), scaled to the stage's ``total``
    bucket bytes (0 when its replicas do not synchronise)."""
    out = np.zeros(len(layers))
    if total <= 0:
        return out
    sizes = tp_grad_tensor_bytes(layers, dtype, tp)
    members = ddp_bucket_members(sizes, cap, first_bucket(cap))
    nbytes = [float(sum(sizes[i][k] for i, k in m)) for m in members]
    scale = total / sum(nbytes) if sum(nbytes) > 0 else 0.0
    for m, b in zip(members, nbytes, strict=True):
        first = min(i for i, _ in m)  # the bucket is complete once this layer is done
        out[:first] += b * scale
    return out


def _grads_made(layers: Sequence[LayerInfo], grads: Floats, first: int, dtype: str) -> Floats:
    """Per layer, the gradient bytes its backward makes first: its own parameters', and a
    tied weight's at the latest layer using it (the output projection of a GPT, run first in
    the backward), not at its owner's (the embedding, where it is only added to)."""
    out = np.array(grads, dtype=np.float64)
    per_param = DTYPE_BYTES[dtype] * grad_scale(dtype)
    for j, x in enumerate(layers):
        owner = x.shared_owner - first
        if x.shared_params > 0 and 0 <= owner < j:
            moved = min(x.shared_params * per_param, out[owner])
            out[owner] -= moved
            out[j] += moved
    return out
