"""The feasibility margin: how much of a device's memory a plan may count on.

A prediction of peak memory has an error, and on a GPU the caching allocator reserves more than
the tensors it hands out. A device's verdict (:func:`memory_verdict`):

- ``fits``: ``framework + margin x (total - framework) <= capacity``;
- ``may not fit``: ``total <= capacity`` but not the above (the plan is offered, flagged, and
  ranked after the plans that fit: docs/planning.md);
- ``does not fit``: ``total > capacity`` (infeasible).

The margin multiplies the predicted terms without the framework allowance (the CUDA context,
a fixed cost outside the allocator: ``cost.memory.FRAMEWORK_OVERHEAD_BYTES``), because that is
what the measured ratio compares (``bench.runner.comparable_memory``). Equivalently, the model's
terms may use ``1 / margin`` of what the allowance leaves.

The figures are computed by ``benchmarks/bench_memory_margin.py`` (docs/benchmarks.md,
"Feasibility margin"; docs/cost-models.md section 6).
"""

from __future__ import annotations

from typing import Literal

FITS = "fits"
MAY_NOT_FIT = "may not fit"
DOES_NOT_FIT = "does not fit"
Verdict = Literal["fits", "may not fit", "does not fit"]

# measured peak / predicted peak (both without the framework allowance), the largest over the
# three h100/train runs of shared/gpu-truth (torch.cuda.max_memory_allocated): VGG-16 fp32 batch
# 64, 6.03 GB measured, 5.80 GB predicted (GPT-2 bf16 batch 16 is now over-predicted, 0.910,
# since the loss backward's fp32 logits gradients are charged), bench_memory_margin.py
# 2026-11-28 (session 35).
GPU_PEAK_RATIO = 1.040  # dimensionless
# The same over the 79 cases of the quick CPU suite out/bench-s34b, predicted again by this
# model (live tensor bytes of a step, the largest rank of each case; vgg11's synchronous PS x4
# on local-cpu-4on2: one rank of four measured 147.7 MB against 110.8 MB, which a rerun of the
# plan did not reproduce: 110.8 MB on every rank), bench_memory_margin.py --store 2026-11-28.
CPU_PEAK_RATIO = 1.334  # dimensionless
# Fraction of the CUDA caching allocator's reserved memory not handed out to tensors
# (fragmentation = 1 - allocated / reserved): GMLake (Guo et al., ASPLOS 2024,
# arXiv:2401.08156) removes 15% of it on average (up to 33%) over eight LLMs trained on
# A100-80GB with PyTorch's caching allocator. Large blocks are rounded to 2 MiB (kRoundLarge),
# small ones to 512 B in 2 MiB segments (kMinBlockSize, kSmallBuffer: c10/core/
# AllocatorConfig.h, torch 2.13), and a freed block is reused only by a request it can hold.
# No reserved peak was measured here (gpu-truth records max_memory_allocated only).
ALLOCATOR_FRAGMENTATION = 0.15  # fraction of reserved bytes
# The factors on the predicted terms (bench.margin.margin_of).
GPU_MEMORY_MARGIN = GPU_PEAK_RATIO / (1.0 - ALLOCATOR_FRAGMENTATION)  # 1.22: 82% usable
CPU_MEMORY_MARGIN = CPU_PEAK_RATIO  # no caching allocator on CPU: 75% usable


def memory_margin(is_gpu: bool) -> float:
    """The margin of a GPU or CPU device (a factor >= 1 on the predicted terms)."""
    return GPU_MEMORY_MARGIN if is_gpu else CPU_MEMORY_MARGIN


def with_margin(total_bytes: float, framework_bytes: float, margin: float) -> float:
    """The bytes a device must have for a plan to fit with the margin:
    ``framework + margin x (total - framework)``."""
    return framework_bytes + margin * max(total_bytes - framework_bytes, 0.0)


def memory_verdict(
    total_bytes: float, framework_bytes: float, capacity_bytes: float, margin: float
) -> Verdict:
    """``fits``, ``may not fit`` or ``does not fit`` (see the module's docstring)."""
    if total_bytes > capacity_bytes:
        return "does not fit"
    if with_margin(total_bytes, framework_bytes, margin) > capacity_bytes:
        return "may not fit"
    return "fits"
