"""Mixed precision as people train: autocast over fp32 master weights, a loss scaler for fp16.

``model.dtype`` of a plan is the autocast dtype: fp32 runs plain fp32; bf16 and fp16 keep the
parameters, gradients and optimizer state in fp32 and run the forward under
``torch.autocast`` (matmuls and convolutions in low precision, reductions in fp32). fp16 adds
dynamic loss scaling, done across all ranks of the plan: a step is skipped on every rank if any
rank's gradients overflowed (a pipeline's stages must step together).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.planspec.dtypes import MIXED_PRECISION_DTYPES, TRAINING_DTYPES
from hetplan.planspec.torch_dtypes import TORCH_DTYPES

# The one dtype table (hetplan.planspec.dtypes): the dtypes a plan trains in, and the
# mixed-precision ones' autocast dtype.
PRECISIONS = TRAINING_DTYPES
AUTOCAST_DTYPES: dict[str, torch.dtype] = {d: TORCH_DTYPES[d] for d in MIXED_PRECISION_DTYPES}
# torch.amp.GradScaler's defaults (torch/amp/grad_scaler.py): initial scale 2**16, doubled
# after 2000 steps without overflow, halved on an overflow.
INIT_SCALE = 2.0**16  # dimensionless
GROWTH_FACTOR = 2.0  # dimensionless
BACKOFF_FACTOR = 0.5  # dimensionless
GROWTH_INTERVAL = 2000  # steps


def autocast(device: str, dtype: str) -> contextlib.AbstractContextManager[Any]:
    """The forward's autocast context (a no-op for fp32)."""
    if dtype not in AUTOCAST_DTYPES:
        return contextlib.nullcontext()
    kind = "cuda" if device.startswith("cuda") else "cpu"
    ctx: contextlib.AbstractContextManager[Any] = torch.autocast(kind, AUTOCAST_DTYPES[dtype])
    return ctx


class LossScaler:
    """Dynamic loss scaling over a process group (identity unless ``enabled``)."""

    def __init__(self, enabled: bool, group: Any = None) -> None:
        self.enabled = enabled
        self.scale = INIT_SCALE if enabled else 1.0
        self.group = group
        self._good = 0

    def unscale_and_check(self, params: list[nn.Parameter]) -> bool:
        """Divide the gradients by the scale; True if every rank's are finite (then step)."""
        if not self.enabled:
            return True
        grads = [_local(p.grad) for p in params if p.grad is not None]
        device = grads[0].device if grads else torch.device("cpu")
        bad = torch.zeros(1, device=device)  # on the rank's device: NCCL reduces no CPU tensor
        for g in grads:
            g.div_(self.scale)
            bad = torch.maximum(bad, (~torch.isfinite(g)).any().float().reshape(1))
        if dist.is_initialized():
            dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=self.group)
        if float(bad) > 0:
            self.scale *= BACKOFF_FACTOR
            self._good = 0
            return False
        self._good += 1
        if self._good % GROWTH_INTERVAL == 0:
            self.scale *= GROWTH_FACTOR
        return True


def _local(t: torch.Tensor) -> torch.Tensor:
    """A tensor-parallel gradient's local part (in place operations reach the DTensor)."""
    to_local = getattr(t, "to_local", None)
    return t if to_local is None else to_local()  # type: ignore[no-any-return]
