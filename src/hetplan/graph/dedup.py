"""Identical consecutive layers: trace a few of them, stand in for the rest.

A 96-block transformer runs the same block 96 times; on the meta device each block costs
milliseconds of Python per op. When a layer is structurally identical to its neighbours (same
class, ``repr`` tree, plain attributes, parameter and buffer shapes), is called with exactly the
previous identical layer's output and nothing else, and reads nothing from outside but that
input, its figures equal those of an earlier identical layer that was traced in the same
situation (an identical layer before it): the *template*. Such a layer is replaced, for this one
step, by a stand-in that makes an output of the template's shape and passes gradients straight
back, without recording ops; its statistics are then copied from the template, and its effect on
the data-flow tracking (what it reads, produces and saves) is replayed from the template.

The first two layers of a run (the first sees a different predecessor) and the last one are
always traced. :meth:`Dedup.finish` checks after the step that no tensor made inside a template
was used by a later layer; if one was, the caller traces again without deduplication.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from hetplan.graph.trace import TraceState

_PLAIN = (int, float, str, bool, type(None), torch.dtype, torch.device)


def _value_sig(value: Any) -> Hashable:
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, tuple | list):
        return tuple(_value_sig(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, tuple(value.stride()))
    if callable(value):
        return ("callable", id(value))
    return ("object", type(value).__qualname__)


def _module_sig(m: nn.Module) -> Hashable | None:
    if "forward" in m.__dict__ or m._forward_hooks or m._forward_pre_hooks:
        return None
    if m._backward_hooks or m._backward_pre_hooks:
        return None
    attrs = tuple((k, _value_sig(v)) for k, v in sorted(vars(m).items()) if not k.startswith("_"))
    return (type(m), m.training, attrs)


def layer_signature(module: nn.Module) -> Hashable | None:
    """Everything that decides what a layer computes, or None if it cannot be compared."""
    subs = [_module_sig(m) for m in module.modules()]
    if any(s is None for s in subs):
        return None
    named = [*module.named_parameters(), *module.named_buffers()]
    tensors = tuple((n, *_value_sig(t), t.requires_grad) for n, t in named)  # type: ignore[misc]
    return (repr(module), tuple(subs), tensors)


def storage_key(t: torch.Tensor) -> int:
    """Identity of the memory behind ``t`` (shared by all its views)."""
    return int(t.untyped_storage()._cdata)


def signatures(layers: list[nn.Module]) -> list[Hashable | None]:
    """:func:`layer_signature` of each layer; None for one sharing a parameter with another."""
    owners: dict[int, int] = {}
    for pos, m in enumerate(layers):
        for p in m.parameters():
            owners[id(p)] = -1 if owners.get(id(p), pos) != pos else pos
    return [
        None if any(owners[id(p)] < 0 for p in m.parameters()) else layer_signature(m)
        for m in layers
    ]


def stand_in_candidates(sigs: list[Hashable | None]) -> set[int]:
    """Positions whose two predecessors and successor (in module order) are identical."""
    return {
        pos
        for pos in range(2, len(sigs) - 1)
        if sigs[pos] is not None and sigs[pos - 2] == sigs[pos - 1] == sigs[pos] == sigs[pos + 1]
    }


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
    out_meta: _Meta
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
    standing_in: Template | None = None
    entered: int = 0

    def install(self) -> None:
        """Route the candidates' ``forward`` through a switch (undone by :meth:`remove`)."""
        self.sigs = signatures(self.layers)
        self.candidates = stand_in_candidates(self.sigs)
        for pos in self.candidates:
            self.layers[pos].forward = self._forwarder(self.layers[pos])

    def remove(self) -> None:
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
                return _StandIn.apply(args[0], self.state, tmpl.out_meta[0])
            finally:
                self.state.muted = False

        return forward

    def before(self, pos: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A layer is about to run (called before :meth:`TraceState.enter`)."""
        st, prev, sig = self.state, self.prev, self.sigs[pos]
        chained = (
            sig is not None
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
        self.prev = _Call(pos, idx, out)

    def _learn(
        self, pos: int, idx: int, x: torch.Tensor, out: torch.Tensor, watch: dict[int, int]
    ) -> None:
        sig = self.sigs[pos]
        in_meta, out_meta = _meta(x), _meta(out)
        in_key, out_key = storage_key(x), storage_key(out)
        if sig in self.templates or in_meta is None or out_meta is None:
            return
        if set(watch) != {in_key} or in_key == out_key or out.requires_grad != x.requires_grad:
            return
        self.templates[sig] = Template(
            idx=idx,
            in_meta=in_meta,
            out_meta=out_meta,
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
        st.producer[out_key] = idx
        st.keep.append(out)
        if tmpl.saves_output:
            st.saved_keys.add(out_key)

    def finish(self) -> bool:
        """Copy template figures to the stand-ins; False if a template leaked a tensor."""
        st = self.state
        for tmpl in {t.idx: t for t in self.stood_in.values()}.values():
            for key, layer in st.producer.items():
                leaked = layer == tmpl.idx and key != tmpl.out_key
                if leaked and st.last_use.get(key, layer) > layer:
                    return False
        for idx, tmpl in self.stood_in.items():
            st.stats[idx] = dataclasses.replace(st.stats[tmpl.idx])
        return True
