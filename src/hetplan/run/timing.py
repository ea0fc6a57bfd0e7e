"""Per-rank compute timing with module and autograd hooks (no change to the model).

Forward time: between the stage module's forward pre-hook and forward hook. Backward time:
from the moment the gradient of the stage's output arrives (a hook on the output tensor) to
the last gradient the stage produces (hooks on its parameters and on its input when the input
requires a gradient). On CUDA each mark synchronises the device so that the clock sees the
kernels' end; this removes some overlap of compute and communication (documented).

Each forward and backward is also kept as an action span ``(kind, micro-batch, start, end)``
(``perf_counter`` seconds) so that a measured timeline can be drawn next to the simulated one;
a pipeline stage's module runs once per micro-batch, in order, so the n-th forward (backward)
of a step is micro-batch n (GPipe and 1F1B both run backwards in micro-batch order).
"""

from __future__ import annotations

import resource
import time
from typing import Any

import torch
from torch import nn


class StageClock:
    """Accumulates forward and backward seconds of one module over a step."""

    def __init__(self, module: nn.Module, device: str) -> None:
        self._cuda = device.startswith("cuda")
        self.forward_s = 0.0
        self.backward_s = 0.0
        self._fwd_start = 0.0
        self._bwd_start: float | None = None
        self._bwd_end = 0.0
        self.spans: list[tuple[str, int, float, float]] = []
        """This step's actions: (``forward`` | ``backward``, micro-batch, start, end)."""
        self._last_spans: list[tuple[str, int, float, float]] = []
        self._fwd_count = 0
        self._bwd_count = 0
        module.register_forward_pre_hook(self._pre_forward)
        module.register_forward_hook(self._post_forward)
        for p in module.parameters():
            if p.requires_grad:
                p.register_hook(self._grad_produced)

    def _now(self) -> float:
        if self._cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def _pre_forward(self, _module: nn.Module, args: Any) -> None:
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                a.register_hook(self._grad_produced)
        self._fwd_start = self._now()

    def _post_forward(self, _module: nn.Module, _args: Any, out: Any) -> None:
        end = self._now()
        self.forward_s += end - self._fwd_start
        self.spans.append(("forward", self._fwd_count, self._fwd_start, end))
        self._fwd_count += 1
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(self._backward_begins)

    def _backward_begins(self, grad: torch.Tensor) -> torch.Tensor:
        self._close_backward()
        self._bwd_start = self._now()
        self._bwd_end = self._bwd_start
        return grad

    def _grad_produced(self, grad: torch.Tensor) -> torch.Tensor:
        if self._bwd_start is not None:
            self._bwd_end = self._now()
        return grad

    def _close_backward(self) -> None:
        if self._bwd_start is not None:
            self.backward_s += self._bwd_end - self._bwd_start
            self.spans.append(("backward", self._bwd_count, self._bwd_start, self._bwd_end))
            self._bwd_count += 1
            self._bwd_start = None

    def take(self) -> tuple[float, float]:
        """(forward_s, backward_s) since the last call; resets the counters and moves this
        step's spans to :meth:`take_spans`."""
        self._close_backward()
        out = (self.forward_s, self.backward_s)
        self.forward_s = 0.0
        self.backward_s = 0.0
        self._last_spans = self.spans
        self.spans = []
        self._fwd_count = 0
        self._bwd_count = 0
        return out

    def take_spans(self) -> list[tuple[str, int, float, float]]:
        """The action spans of the step closed by the last :meth:`take`."""
        return list(self._last_spans)


def peak_memory(device: str) -> tuple[int, str]:
    """(bytes, source): CUDA's max allocated, else the process's peak resident set size."""
    if device.startswith("cuda"):
        return int(torch.cuda.max_memory_allocated(device)), "cuda.max_memory_allocated"
    # ru_maxrss is in KiB on Linux (getrusage(2)); it includes the runtime's own footprint.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "peak RSS"
