"""What the optimizer's step holds beside the state it keeps: its temporaries.

torch.optim.Adam's step, torch 2.13 (``torch/optim/adam.py``):

- CUDA: the default ``foreach`` path (``_multi_tensor_adam``; ``foreach`` defaults to on
  where every tensor is a CUDA tensor) makes ``exp_avg_sq_sqrt =
  torch._foreach_sqrt(exp_avg_sqs)``: one temporary of each parameter's state size, the whole
  list alive until ``_foreach_addcdiv_`` (weight decay 0, as hetplan's runtime leaves it, adds
  no gradient copy). One state slot's worth of the parameters the optimizer steps.
- CPU: the single-tensor path (``_single_tensor_adam``) makes ``denom = (exp_avg_sq.sqrt() /
  bias_correction2_sqrt).add_(eps)`` per parameter: the square root and the quotient alive at
  once, two temporaries of one tensor's state, the largest tensor's at the peak.

SGD, with or without momentum, updates in place on both paths (``_foreach_add_``,
``buf.mul_().add_()``): none. The state itself (Adam's moments, made at the first step) is
``MemoryBreakdown.optimizer``; the gradients are still held, the activations and the
gradient buckets are freed (:mod:`hetplan.predict.backward_peak`).
"""

from __future__ import annotations

from hetplan.cost.memory import OPTIMIZER_SLOTS, OPTIMIZER_STATE_BYTES

STEP_SLOT_TEMPS = {"sgd": 0, "momentum": 0, "adam": 1, "adamw": 1}
"""foreach path: temporaries per stepped parameter, in state slots (dimensionless)."""
STEP_TENSOR_TEMPS = {"sgd": 0, "momentum": 0, "adam": 2, "adamw": 2}
"""Single-tensor path: temporaries of the largest tensor's state (dimensionless)."""


def optimizer_step_bytes(
    state_bytes: float, largest_params: float, optimizer: str, *, foreach: bool
) -> float:
    """Bytes the step's temporaries hold at once: ``state_bytes`` (the optimizer state this
    rank keeps) over its slots times :data:`STEP_SLOT_TEMPS` on the foreach path (CUDA), else
    :data:`STEP_TENSOR_TEMPS` copies of the largest stepped tensor's state (``largest_params``
    elements, fp32 slots). 0 for an optimizer without state or a rank stepping nothing."""
    slots = OPTIMIZER_SLOTS[optimizer]
    if slots == 0 or state_bytes <= 0:
        return 0.0
    if foreach:
        return state_bytes / slots * STEP_SLOT_TEMPS[optimizer]
    return STEP_TENSOR_TEMPS[optimizer] * largest_params * OPTIMIZER_STATE_BYTES
