"""Identical consecutive layers: trace a few of them, stand in for the rest.

A 96-block transformer runs the same block 96 times; on the meta device each op costs tens of
microseconds of Python. When a layer is structurally identical to its neighbours (same class,
``repr`` tree, plain attributes, parameter and buffer shapes: :mod:`signature`), is called with
exactly the previous identical layer's output and nothing else, right after it, its figures are
those of an earlier identical layer traced in the same situation (after an identical layer,
reading nothing but its input, returning a fresh tensor of its input's shape): the *template*.
Such a layer is replaced, for this one step, by a stand-in that makes an output of that shape
and passes gradients straight back without recording ops; its statistics are then copied from
the template, and its effect on the data-flow tracking (what it reads, produces and saves) is
replayed from the template.

The first two layers of a run (the first sees a different predecessor) and the last one are
always traced. The trace is repeated without stand-ins (same figures as before this module
existed) if the model fails with them (it relied on a skipped side effect), or
:meth:`Dedup.finish` finds that a template's inner tensor was used later, an op outside every
layer ran next to a stand-in, or a layer's parameter was used outside it.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hetplan.graph.ops import storage_key
from hetplan.graph.signature import signatures, stand_in_candidates

if TYPE_CHECKING:
    from hetplan.graph.trace import TraceState


_Meta = tuple[tuple[int, ...], torch.dtype, bool, torch.device]


def _meta(t: torch.Tensor) -> _Meta | None:
    """Shape, dtype, requires_grad, device of a fresh contiguous tensor; None otherwise."""
    fresh = t.is_contiguous() and t.storage_offset() == 0
    if not fresh or t.untyped_storage().nbytes() != t.nbytes:
        return None
    return (tuple(t.shape), t.dtype, t.requires_grad, t.device)


@dataclass(frozen=True)
class Template:
    """A traced layer whose figures stand for identical layers that follow it."""

    idx: int
    """Execution index of the traced layer."""
    in_meta: _Meta
    """Its input's; its output's is the same (a chain of identical layers)."""
    read_bytes: int
    """Largest view of its input any of its forward ops read (data-flow size of the input)."""
    saves_output: bool
    """Autograd saved the layer's own output (a trailing ReLU): the next layer does not."""
    out_key: int


@dataclass
class _Call:
    """The last layer call that ran at the top level and returned one tensor."""

    pos: int
    idx: int
    out: torch.Tensor
    ops: int
    """Ops recorded so far when it ended."""


class _StandIn(torch.autograd.Function):  # type: ignore[misc]
    """Output of the template's shape; gradients pass back as fresh tensors of the input's."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, state: TraceState, shape: tuple[int, ...]) -> Any:
        ctx.state, ctx.in_shape = state, tuple(x.shape)
        return x.new_empty(shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        ctx.state.muted = True
        try:
            grad_in = grad.new_empty(ctx.in_shape)
        finally:
            ctx.state.muted = False
        ctx.state.keep.append(grad_in)  # alive, so no later tensor reuses its storage key
        return grad_in, None, None


@dataclass
class Dedup:
    """Run-time decisions and bookkeeping for the stand-ins of one traced step."""

    state: TraceState
    layers: list[nn.Module]
    sigs: list[Hashable | None] = field(default_factory=list)
    candidates: set[int] = field(default_factory=set)
    templates: dict[Hashable, Template] = field(default_factory=dict)
    stood_in: dict[int, Template] = field(default_factory=dict)
    """Execution index of each stand-in -> its template."""
    prev: _Call | None = None
    tentative: Template | None = None
    """A template learnt at the last layer's end, kept if no op runs before the next layer."""
    standing_in: Template | None = None
    entered: int = 0
    handles: list[Any] = field(default_factory=list)
    """Gradient hooks on the parameters of candidates that ran in full."""

    def skipped_params(self) -> set[int]:
        """ids of the candidates' parameters: their gradient hooks are added only if they run
        in full (a stand-in computes no parameter gradient; a hook costs ~0.1 ms)."""
        return {id(p) for pos in self.candidates for p in self.layers[pos].parameters()}

    def install(self) -> None:
        """Route the candidates' ``forward`` through a switch (undone by :meth:`remove`)."""
        self.sigs = signatures(self.layers)
        self.candidates = stand_in_candidates(self.sigs)
        if self.candidates:
            for pos, layer in enumerate(self.layers):
                for t in [*layer.parameters(), *layer.buffers()]:
                    self.state.owners.setdefault(storage_key(t), set()).add(pos)
        for pos in self.candidates:
            self.layers[pos].forward = self._forwarder(self.layers[pos])

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        for pos in self.candidates:
            self.layers[pos].__dict__.pop("forward", None)

    def _forwarder(self, module: nn.Module) -> Any:
        cls_forward = type(module).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            tmpl = self.standing_in
            if tmpl is None:
                return cls_forward(module, *args, **kwargs)
            self.state.muted = True
            try:
                return _StandIn.apply(args[0], self.state, tmpl.in_meta[0])
            finally:
                self.state.muted = False

        return forward

    def before(self, pos: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A layer is about to run (called before :meth:`TraceState.enter`)."""
        st, prev, sig = self.state, self.prev, self.sigs[pos]
        quiet = prev is not None and prev.ops == st.n_ops  # no glue op since the last layer
        if self.tentative is not None and quiet:
            self.templates.setdefault(self.sigs[st.order[self.tentative.idx]], self.tentative)
        self.tentative = None
        chained = (
            quiet
            and sig is not None
            and not st.stack
            and pos not in st.order
            and prev is not None
            and prev.pos == pos - 1
            and self.sigs[pos - 1] == sig
            and not kwargs
            and len(args) == 1
            and args[0] is prev.out
        )
        tmpl = self.templates.get(sig) if chained and pos in self.candidates else None
        if tmpl is not None and _meta(args[0]) != tmpl.in_meta:
            tmpl = None
        self.standing_in = tmpl
        if tmpl is None and pos in self.candidates and pos not in st.order:
            params = self.layers[pos].parameters()
            self.handles += [p.register_hook(st.weight_grad) for p in params if p.requires_grad]
        st.watch = {} if chained and tmpl is None else None
        self.entered = len(st.order)

    def after(self, pos: int, idx: int, args: tuple[Any, ...], out: Any) -> None:
        """A layer's forward ended (``idx``: its execution index; the stack already popped)."""
        st, watch, tmpl = self.state, self.state.watch, self.standing_in
        st.watch, self.standing_in = None, None
        top = not st.stack and len(st.order) == self.entered + 1 and st.order[idx] == pos
        if not top or not isinstance(out, torch.Tensor):
            self.prev = None
            return
        if tmpl is not None:
            self._replay(tmpl, idx, args[0], out)
        elif watch is not None:
            self._learn(pos, idx, args[0], out, watch)
        self.prev = _Call(pos, idx, out, st.n_ops)

    def _learn(
        self, pos: int, idx: int, x: torch.Tensor, out: torch.Tensor, watch: dict[int, int]
    ) -> None:
        """``pos`` ran in full right after an identical layer: may it stand for later ones?"""
        in_meta, in_key, out_key = _meta(x), storage_key(x), storage_key(out)
        if self.sigs[pos] in self.templates or in_meta is None or in_meta != _meta(out):
            return
        if set(watch) != {in_key} or in_key == out_key:
            return  # reads something besides its input, or returns a view of it
        self.tentative = Template(
            idx=idx,
            in_meta=in_meta,
            read_bytes=watch[in_key],
            saves_output=out_key in self.state.saved_keys,
            out_key=out_key,
        )

    def _replay(self, tmpl: Template, idx: int, x: torch.Tensor, out: torch.Tensor) -> None:
        """What the template's ops would have done to the data-flow tracking."""
        st = self.state
        self.stood_in[idx] = tmpl
        in_key, out_key = storage_key(x), storage_key(out)
        if in_key in st.producer:
            st.last_use[in_key] = max(st.last_use.get(in_key, idx), idx)
            st.size[in_key] = max(st.size.get(in_key, 0), tmpl.read_bytes)
            per = st.reads.setdefault(in_key, {})
            per[idx] = max(per.get(idx, 0), tmpl.read_bytes)
        st.producer[out_key] = idx
        st.keep.append(out)
        if tmpl.saves_output:
            st.saved_keys.add(out_key)

    def finish(self) -> bool:
        """Copy template figures to the stand-ins (after :meth:`TraceState.finish_backward_io`).

        False (trace again in full) if a template's tensor other than its output was used by a
        later layer, an op outside every layer was attributed to a stand-in (glue code), or a
        layer's parameter or buffer was used outside it (the backward would differ).
        """
        st = self.state
        if not self.stood_in:
            return True  # nothing was left out: this was a full trace
        if st.foreign or any(st.stats[idx].ops for idx in self.stood_in):
            return False
        for tmpl in {t.idx: t for t in self.stood_in.values()}.values():
            for key, layer in st.producer.items():
                leaked = layer == tmpl.idx and key != tmpl.out_key
                if leaked and st.last_use.get(key, layer) > layer:
                    return False
        for idx, tmpl in self.stood_in.items():
            st.stats[idx] = st.stats[tmpl.idx].copy()  # per-class work too, unshared
            st.copied[idx] = tmpl.idx
        return True
