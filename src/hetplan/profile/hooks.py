"""Hooks that time each layer's forward and backward within one training step.

Forward: a forward pre-hook and a forward hook on each layer bracket its call.

Backward: a tensor hook on each layer's outputs fires when the gradient of that output is
complete, i.e. when the layer's backward starts. Layers run backward in reverse order, so a
layer's backward window runs from its start to the next layer's start (the first layer's ends
when ``backward()`` returns). Module *full backward hooks* are deliberately not used: they wrap
inputs and outputs in views, which in-place operations (``ReLU(inplace=True)``) reject, and they
fire too early for a layer whose inputs need no gradient. Tensor hooks registered before an
in-place change still fire at the right point (torch autograd notes, "in-place correctness").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hetplan.errors import InputError
from hetplan.profile.timing import Clock, MemoryProbe


@dataclass
class StepRecord:
    fwd: list[tuple[int, Any, Any, int | None]] = field(default_factory=list)
    bwd: list[tuple[int, Any, int | None]] = field(default_factory=list)
    """Backward starts in firing order: (layer, mark, peak bytes of the window it closes)."""
    bwd_end_peak: int | None = None
    """Peak bytes of the last backward window (closed when ``backward()`` returns)."""


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor inside nested tuples, lists and dicts (module outputs can be any of these)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def resolve_layers(module: nn.Module, names: Sequence[str]) -> list[nn.Module]:
    """The submodules called ``names``; none may contain another (time would count twice)."""
    if not names:
        raise InputError("no layers to profile")
    for a in names:
        for b in names:
            if a != b and b.startswith(a + "."):
                raise InputError(f"layer {b!r} is inside layer {a!r}; pick layers of one depth")
    try:
        return [module.get_submodule(n) for n in names]
    except AttributeError as err:
        raise InputError(f"not a submodule of the model: {err}") from None


def inplace_layers(module: nn.Module, names: Sequence[str]) -> list[str]:
    """Layers containing modules with ``inplace=True`` (reported; the timing copes with them)."""
    return [
        n
        for n, layer in zip(names, resolve_layers(module, names), strict=True)
        if any(getattr(m, "inplace", False) is True for m in layer.modules())
    ]


class LayerTimer:
    """Installs the hooks on ``layers`` and records one step at a time."""

    def __init__(self, layers: Sequence[nn.Module], clock: Clock, memory: MemoryProbe) -> None:
        self.clock = clock
        self.memory = memory
        self.record = StepRecord()
        self._open: dict[int, list[Any]] = {}
        self._hooked: dict[int, tuple[torch.Tensor, Any]] = {}
        self._handles: list[Any] = []
        for i, layer in enumerate(layers):
            self._handles.append(layer.register_forward_pre_hook(self._pre(i)))
            self._handles.append(layer.register_forward_hook(self._post(i)))

    def _pre(self, i: int) -> Callable[..., None]:
        def hook(_mod: nn.Module, _args: Any) -> None:
            self.memory.reset()
            self._open.setdefault(i, []).append(self.clock.mark())

        return hook

    def _post(self, i: int) -> Callable[..., None]:
        def hook(_mod: nn.Module, _args: Any, output: Any) -> None:
            end = self.clock.mark()
            self.record.fwd.append((i, self._open[i].pop(), end, self.memory.peak_bytes()))
            if torch.is_grad_enabled():
                for t in tensors_in(output):
                    if t.requires_grad and not self._seen(t):
                        t.register_hook(self._grad_ready(i))

        return hook

    def _seen(self, t: torch.Tensor) -> bool:
        """Whether an earlier layer already hooked this very tensor, unchanged since.

        A layer that returns its input untouched (``nn.Identity``) does no backward work; a
        second hook on the same autograd node would fire right after the first and take the
        earlier layer's backward time. An in-place change gives the tensor a new node, so an
        in-place layer (``ReLU(inplace=True)``) is hooked as usual.
        """
        prev = self._hooked.get(id(t))
        if prev is not None and prev[0] is t and prev[1] is t.grad_fn:
            return True
        self._hooked[id(t)] = (t, t.grad_fn)  # keeps t alive: its id cannot be reused
        return False

    def _grad_ready(self, i: int) -> Callable[[torch.Tensor], None]:
        def hook(_grad: torch.Tensor) -> None:
            closing_peak = self.memory.peak_bytes() if self.record.bwd else None
            self.record.bwd.append((i, self.clock.mark(), closing_peak))
            self.memory.reset()

        return hook

    def end_backward(self) -> None:
        self.record.bwd_end_peak = self.memory.peak_bytes()

    def start_step(self) -> None:
        self.record = StepRecord()
        self._open.clear()
        self._hooked.clear()

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
