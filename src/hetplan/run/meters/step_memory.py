"""Peak memory of a training step, measured the way the memory model counts it.

On CUDA: the caching allocator's ``max_memory_allocated`` over the step (tensor bytes, not the
allocator's reserved pool). On CPU: live tensor storage bytes counted by
:class:`hetplan.run.meters.memcount.TensorBytesCounter` (parameters, gradients and optimizer state
alive at the start plus everything the step allocates), not the process RSS, which holds the
Python runtime and libraries. Counting costs time, so the runtime counts an untimed step: the
first. Three things make that step's CPU count the one of any step:

- the optimizer's state (Adam's moments, momentum buffers) that a fresh run's first
  ``step()`` creates, after the backward's peak, is counted as held from the step's start, as
  every later step and a resumed run's first step hold it (without this a 2-stage PipeDream
  of gpt-tiny with Adam measured 16.3 and 11.9 MB, -16% and -26% against the prediction);
- the state that a side thread of the process (the asynchronous parameter server's,
  :mod:`hetplan.run.setup.side_threads`) holds through every step once training runs, its
  master copies' gradients and its optimizer's state, made by a fresh run's first push
  applied, is counted as held from the step's start too;
- the input batch the step is called with (``run_step`` a ``functools.partial`` of the
  executor's step, the batch read before the step) counts from the start, as CUDA's allocator
  counts it and as the executors that read their batch inside the step (PipeDream's window)
  are counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hetplan.run.meters.memcount import step_peak_bytes
from hetplan.run.setup import side_threads
from hetplan.run.setup.tensor_parallel import local


def _state_tensors(module: nn.Module, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    out: list[torch.Tensor] = [t for t in module.parameters() if not t.is_meta]
    out += [t for t in module.buffers() if not t.is_meta]
    out += [p.grad for p in module.parameters() if p.grad is not None]
    return [local(t) for t in out + _optimizer_state(optimizer)]


def _optimizer_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's state tensors, as local tensors (a tensor-parallel shard's part)."""
    out = [v for state in optimizer.state.values() for v in state.values()]
    return [local(v) for v in out if isinstance(v, torch.Tensor)]


def _bound_inputs(run_step: Callable[[], Any]) -> list[torch.Tensor]:
    """The tensors ``run_step`` is called with when it is a ``functools.partial`` (the
    executor's step and its batch); none otherwise."""
    if not isinstance(run_step, functools.partial):
        return []
    values = [*run_step.args, *run_step.keywords.values()]
    return [v for v in values if isinstance(v, torch.Tensor) and not v.is_meta]


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
    baseline = _state_tensors(module, optimizer) + _bound_inputs(run_step)
    peak = step_peak_bytes(
        run_step,
        baseline,
        held_from_start=lambda: _optimizer_state(optimizer) + side_threads.steady_tensors(),
    )
    return int(peak), "tensor bytes"
