"""The loss's kernels under autocast, which a low-precision trace does not see.

A bf16 or fp16 graph is traced in that dtype without autocast (:mod:`hetplan.graph.extract`),
so its loss's log-softmax reads and writes 2-byte logits. The runtime trains under autocast,
where ``log_softmax`` and ``nll_loss`` run in fp32 (torch.amp docs, "Ops that can autocast to
float32", CUDA and CPU): the logits are cast up, the log-softmax writes fp32, and the backward
differentiates in fp32 and casts the gradient back. Bytes per logit of every tensor each
kernel takes or makes (the trace's own count, :mod:`hetplan.graph.trace`), ``d`` the low
precision's element size; counted on CPU with torch 2.13 (``tests/cost/test_autocast_loss.py``
counts them again):

==============================  ====================  ===================
kernel                          under autocast        traced
==============================  ====================  ===================
``_to_copy`` up                 ``d`` + 4             (none)
``_log_softmax``                4 + 4                 ``d`` + ``d``
``nll_loss_forward``            4 (the logits)        ``d``
``nll_loss_backward``           4 + 4                 ``d`` + ``d``
``_log_softmax_backward_data``  4 + 4 + 4             3 ``d``
``_to_copy`` back               4 + ``d``             (none)
==============================  ====================  ===================

so the forward moves ``16 - 2 d`` bytes more per logit and the backward ``24 - 4 d``, one more
kernel each. On the H100 (``shared/gpu-truth``, GPT-2 bf16, 50,257 logits a token) the head's
forward took 3.6 ms at batch 4 against 1.1 ms priced from the trace's bytes by the other
models' fit.
"""

from __future__ import annotations

import dataclasses

from hetplan.cost.calibration import MEMORY_CLASS
from hetplan.graph.types import LayerInfo, OpWork
from hetplan.planspec.dtypes import DTYPE_BYTES, FP32_BYTES, is_mixed_precision

FWD_FIXED_BYTES = 4 * FP32_BYTES
"""Bytes per logit of the forward's fp32 tensors (module doc): ``16 - 2 d`` more in all."""
BWD_FIXED_BYTES = 6 * FP32_BYTES
"""Bytes per logit of the backward's fp32 tensors (module doc): ``24 - 4 d`` more in all."""
EXTRA_KERNELS = 1
"""Kernels per pass the trace does not see: the cast up (forward), the cast back (backward)."""


def extra_bytes(dtype: str, backward: bool) -> int:
    """Bytes per logit the loss moves under autocast beyond the trace's count (module doc);
    0 where the graph's dtype trains without autocast."""
    if not is_mixed_precision(dtype):
        return 0
    d = DTYPE_BYTES[dtype]
    return BWD_FIXED_BYTES - 4 * d if backward else FWD_FIXED_BYTES - 2 * d


def with_autocast_loss(layer: LayerInfo, dtype: str) -> LayerInfo:
    """``layer`` with its loss's autocast traffic in its ``memory`` work and I/O totals, where it
    holds a cross-entropy loss (``loss_logits``) of a mixed-precision graph; else ``layer``."""
    if not layer.loss_logits or not layer.work or not is_mixed_precision(dtype):
        return layer
    fwd, bwd = (layer.loss_logits * extra_bytes(dtype, b) for b in (False, True))
    work = [*layer.work]
    for backward, nbytes in ((False, fwd), (True, bwd)):
        at = next(
            (
                i
                for i, w in enumerate(work)
                if w.op_class == MEMORY_CLASS and w.backward == backward
            ),
            None,
        )
        if at is None:
            work.append(
                OpWork(op_class=MEMORY_CLASS, backward=backward, flops=0.0, io_bytes=0.0, kernels=0)
            )
            at = len(work) - 1
        w = work[at]
        work[at] = dataclasses.replace(
            w, io_bytes=w.io_bytes + nbytes, kernels=w.kernels + EXTRA_KERNELS
        )
    return dataclasses.replace(
        layer,
        work=tuple(work),
        fwd_io_bytes=layer.fwd_io_bytes + fwd,
        bwd_io_bytes=layer.bwd_io_bytes + bwd,
        fwd_kernels=layer.fwd_kernels + EXTRA_KERNELS,
        bwd_kernels=layer.bwd_kernels + EXTRA_KERNELS,
    )
