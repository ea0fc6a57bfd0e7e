"""Peak memory of a training step, measured the way the memory model counts it.

On CUDA: the caching allocator's ``max_memory_allocated`` over the step (tensor bytes, not the
allocator's reserved pool). On CPU: live tensor storage bytes counted by
:class:`hetplan.run.meters.memcount.TensorBytesCounter` (parameters, gradients and optimizer state
alive at the start plus everything the step allocates), not the process RSS, which holds the
Python runtime and libraries. Counting costs time, so the runtime counts an untimed step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hetplan.run.meters.memcount import step_peak_bytes
from hetplan.run.setup.tensor_parallel import local


def _state_tensors(module: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    out: list[torch.Tensor] = [t for t in module.parameters() if not t.is_meta]
    out += [t for t in module.buffers() if not t.is_meta]
    out += [p.grad for p in module.parameters() if p.grad is not None]
    for state in optimizer.state.values():
        out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return [local(t) for t in out]  # a tensor-parallel shard holds its local part


def measure_step_memory(
    device: str, run_step: Callable[[], Any], module: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, str]:
    """Run one step; return (peak bytes, how they were measured)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        run_step()
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated(device)), "cuda.max_memory_allocated"
    peak = step_peak_bytes(run_step, _state_tensors(module, optimizer))
    return int(peak), "tensor bytes"
