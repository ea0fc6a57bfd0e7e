"""One traced training step: per-op FLOPs, bytes, kernels, saved tensors and data flow.

A :class:`TorchDispatchMode` sits on top of torch's ``FlopCounterMode`` and reads the counter
before and after every aten op, so FLOP formulas are torch's own, except for convolutions,
counted by :mod:`conv_flops` (torch overcounts a grouped convolution's weight gradient). Each
kernel is also classed (matmul, conv, conv_grouped, attention, memory: :func:`ops.op_class`)
and its FLOPs, I/O bytes and launch summed per layer, pass and class. Ops are attributed to the
*layer* (a module at the chosen depth) that is running: forward by module pre-hooks, backward by
gradient hooks on each layer's outputs (the gradient of layer ``i``'s output arrives just before
layer ``i``'s backward runs). Ops outside any layer go to the layer that ran last before them
(the first layer if none ran yet). Tensors are identified by their storage, so views count as
uses of the tensor they view; every tensor seen is kept alive for the trace so storage
addresses are not reused. Runs of identical layers are traced in part (:mod:`dedup`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from hetplan.graph.attention import fused_attention
from hetplan.graph.dedup import Dedup
from hetplan.graph.ops import (
    Desc,
    attention_share,
    conv_probe_intensity,
    conv_work,
    describe,
    grad_flow,
    is_conv,
    is_kernel,
    op_class,
    output_tensors,
    storage_key,
    tensors,
)


@dataclass
class ClassStats:
    """Raw totals of one operation class in one pass of a layer over the traced batch."""

    flops: int = 0
    io: int = 0
    kernels: int = 0
    probe_flops: float = 0.0
    """Sum of FLOPs x probe intensity of the ops that have one (``OpWork.probe_intensity``)."""


@dataclass
class LayerStats:
    """Raw totals of one layer over the traced batch."""

    fwd_flops: int = 0
    bwd_flops: int = 0
    fwd_conv_flops: int = 0
    """Part of ``fwd_flops`` done by convolution operators (:func:`ops.is_conv`; counted by
    :mod:`conv_flops`, not torch)."""
    bwd_conv_flops: int = 0
    fwd_io: int = 0
    bwd_io: int = 0
    fwd_kernels: int = 0
    bwd_kernels: int = 0
    saved: int = 0
    saved_in: int = 0
    """Part of ``saved`` in tensors earlier layers produced (the layer's inputs)."""
    out_bytes: int = -1
    ops: int = 0
    """Operators recorded (views included)."""
    work: dict[tuple[str, bool], ClassStats] = field(default_factory=dict)
    """(operation class, backward) -> its part of the FLOPs, I/O bytes and kernels above."""

    def add_work(
        self, op_class: str, backward: bool, flops: int, io: int, kernel: bool, probe: float = 0.0
    ) -> None:
        """Add one op's figures to its class (backward I/O arrives apart, with 0 FLOPs);
        ``probe``: the op's probe intensity, if it has one."""
        w = self.work.get((op_class, backward))
        if w is None:
            w = self.work[op_class, backward] = ClassStats()
        w.flops += flops
        w.io += io
        w.kernels += kernel
        w.probe_flops += flops * probe

    def copy(self) -> LayerStats:
        """An independent copy (a stand-in's figures, :mod:`dedup`)."""
        work = {k: dataclasses.replace(w) for k, w in self.work.items()}
        return dataclasses.replace(self, work=work)


@dataclass(frozen=True, slots=True)
class BwdOp:
    """One backward kernel, kept until :meth:`TraceState.finish_backward_io` prices it."""

    layer: int
    op_class: str
    name: str
    """The aten operator's name with its overload (``aten::add_.Tensor``)."""
    ins: list[Desc]
    """Tensor arguments as (storage key, bytes, shape)."""
    outs: list[Desc]


@dataclass
class TraceState:
    """Everything the hooks and the dispatch mode record during one step."""

    n_layers: int
    excluded: set[int]
    """Storage keys of parameters and buffers (weights are not activations)."""
    order: list[int] = field(default_factory=list)
    """Module-list positions in first-execution order."""
    stats: list[LayerStats] = field(default_factory=list)
    cur_fwd: int = 0
    cur_bwd: int = 0
    backward: bool = False
    producer: dict[int, int] = field(default_factory=dict)
    last_use: dict[int, int] = field(default_factory=dict)
    size: dict[int, int] = field(default_factory=dict)
    reads: dict[int, dict[int, int]] = field(default_factory=dict)
    """Storage key -> layer -> largest bytes that layer read of it (a later layer may need
    only a slice: the cut carries what later layers read, as the stage split sends it)."""
    saved_keys: set[int] = field(default_factory=set)
    reused: set[int] = field(default_factory=set)
    """Module-list positions of layers called again after a later layer ran."""
    stack: list[int] = field(default_factory=list)
    bwd_ops: list[BwdOp] = field(default_factory=list)
    """Backward kernels, in execution order."""
    weight_grads: set[int] = field(default_factory=set)
    """Storage keys of parameter gradients (batch-independent; left out of the I/O bytes)."""
    keep: list[torch.Tensor] = field(default_factory=list)
    muted: bool = False
    """Ops run unrecorded (a stand-in for an identical layer, see :mod:`dedup`)."""
    watch: dict[int, int] | None = None
    """While set: storage key -> largest bytes read of tensors from earlier layers."""
    n_ops: int = 0
    """Operators recorded so far."""
    owners: dict[int, set[int]] = field(default_factory=dict)
    """Storage key of each parameter or buffer -> positions of the layers holding it (filled
    only when deduplicating: the forward then flags any use elsewhere in ``foreign``)."""
    foreign: bool = False
    copied: dict[int, int] = field(default_factory=dict)
    """Execution index of each layer that was not traced -> the one whose figures it got."""

    def __post_init__(self) -> None:
        self.stats = [LayerStats() for _ in range(self.n_layers)]

    def enter(self, pos: int) -> int:
        """A layer's forward starts; returns the execution index its ops are attributed to.

        A module called again after later layers ran (a shared ReLU, say) does not move
        execution back: its ops stay with the layer that ran last, where they execute.
        """
        if pos not in self.order:
            self.order.append(pos)
            self.cur_fwd = len(self.order) - 1
        elif self.order.index(pos) != self.cur_fwd:
            self.reused.add(pos)
        self.stack.append(self.cur_fwd)
        return self.cur_fwd

    def produce(self, ts: Iterable[torch.Tensor], layer: int) -> None:
        for t in ts:
            key = storage_key(t)
            if key not in self.producer and key not in self.excluded:
                self.producer[key] = layer
                self.keep.append(t)

    def record(self, func: Any, args: Any, out: Any, flops: int) -> None:
        """One op: ``args`` is ``(args, kwargs)``, ``flops`` the counter's count for it."""
        ins, outs = tensors(args), tensors(out)
        kernel = is_kernel(func)
        flops, groups, conv, probe = _op_flops(func, args, flops)
        cls = op_class(func, flops, groups) if kernel or flops else None
        self.n_ops += 1
        if self.backward:
            layer = self.cur_bwd
            st = self.stats[layer]
            st.ops += 1
            st.bwd_flops += flops
            st.bwd_conv_flops += conv
            if cls is not None:  # I/O bytes added by finish_backward_io
                st.add_work(cls, True, flops, 0, kernel, probe)
            if kernel:
                st.bwd_kernels += 1
                op = BwdOp(layer, cls or "memory", func.name(), describe(ins), describe(outs))
                self.bwd_ops.append(op)
            self.keep.extend(outs)
            return
        layer = self.cur_fwd
        st = self.stats[layer]
        st.ops += 1
        st.fwd_flops += flops
        st.fwd_conv_flops += conv
        keys = [storage_key(t) for t in ins]
        io = 0
        if kernel:
            st.fwd_kernels += 1
            excluded = self.excluded
            io = sum(t.nbytes for t, k in zip(ins, keys, strict=True) if k not in excluded)
            io += sum(t.nbytes for t in outs if storage_key(t) not in excluded)
            st.fwd_io += io
        if cls is not None:
            st.add_work(cls, False, flops, io, kernel, probe)
        producer, watch = self.producer, self.watch
        if self.owners:
            self._check_owners(keys, layer)
        for t, key in zip(ins, keys, strict=True):
            made = producer.get(key)
            if made is not None:
                self.last_use[key] = max(self.last_use.get(key, layer), layer)
                self.size[key] = max(self.size.get(key, 0), t.nbytes)
                per = self.reads.setdefault(key, {})
                per[layer] = max(per.get(layer, 0), t.nbytes)
                if watch is not None and made < layer:
                    watch[key] = max(watch.get(key, 0), t.nbytes)
        self.produce(outs, layer)

    def _check_owners(self, keys: list[int], layer: int) -> None:
        here = self.order[layer] if self.order else -1
        for key in keys:
            holders = self.owners.get(key)
            if holders is not None and here not in holders:
                self.foreign = True

    def weight_grad(self, grad: torch.Tensor) -> None:
        self.weight_grads.add(storage_key(grad))
        self.keep.append(grad)

    def finish_backward_io(self) -> None:
        """Backward I/O bytes without parameter gradients.

        A parameter hook sees the *total* gradient; the tensors it was made from or copied to
        are parameter gradients too, found by following only ops that move gradients
        (:func:`ops.grad_flow`) until nothing changes:

        * an op whose tensor inputs are all parameters, buffers or parameter gradients (one at
          least) makes parameter gradients (``AccumulateGrad``'s empty copy, a cast, a sum);
        * a copy's source and destination are one if either is (a total copied into ``.grad``,
          a partial gradient cast back to the parameter's dtype);
        * an ``add``'s summands are one if its result is (partial gradients of a tied weight).

        No gradient status passes through any other op (a matmul, a reduction, elementwise
        math): a weight gradient's *operands* are activations and their gradients, whatever
        their shapes (shapes can coincide: a (batch * seq, hidden) activation gradient and a
        (hidden, hidden) weight gradient).
        """
        grads, excluded = self.weight_grads, self.excluded
        flows = [
            (grad_flow(op.name), [k for k, _, _ in op.ins], [k for k, _, _ in op.outs])
            for op in self.bwd_ops
        ]
        changed = True
        while changed:
            changed = False
            for flow, ins, outs in flows:
                marked: list[int] = []
                if any(k in grads for k in ins) and all(k in grads or k in excluded for k in ins):
                    marked += outs
                if flow == "copy" and any(k in grads for k in ins + outs):
                    marked += ins + outs
                elif flow == "sum" and any(k in grads for k in outs):
                    marked += ins
                for key in marked:
                    if key not in grads and key not in excluded:
                        grads.add(key)
                        changed = True
        skip = excluded | grads
        for op in self.bwd_ops:
            io = sum(n for key, n, _ in op.ins + op.outs if key not in skip)
            self.stats[op.layer].bwd_io += io
            self.stats[op.layer].add_work(op.op_class, True, 0, io, False)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = storage_key(t)
        if not self.backward and key not in self.excluded and key not in self.saved_keys:
            self.saved_keys.add(key)
            nbytes = t.untyped_storage().nbytes()
            self.stats[self.cur_fwd].saved += nbytes
            if 0 <= self.producer.get(key, -1) < self.cur_fwd:
                self.stats[self.cur_fwd].saved_in += nbytes
            self.keep.append(t)
        return t


class _OpRecorder(TorchDispatchMode):  # type: ignore[misc]
    def __init__(self, counter: FlopCounterMode, state: TraceState) -> None:
        super().__init__()
        self.counter = counter
        self.state = state

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self.state.muted:
            return func(*args, **kwargs)
        before = self.counter.get_total_flops()
        out = func(*args, **kwargs)
        self.state.record(func, (args, kwargs), out, self.counter.get_total_flops() - before)
        return out


def _hook_layers(layers: list[nn.Module], state: TraceState, dedup: Dedup | None) -> list[Any]:
    handles = []
    for pos, module in enumerate(layers):

        def pre(_m: nn.Module, args: Any, kwargs: Any, pos: int = pos) -> None:
            if dedup is not None:
                dedup.before(pos, args, kwargs)
            state.enter(pos)

        def post(_m: nn.Module, args: Any, out: Any, pos: int = pos) -> None:
            idx = state.stack.pop()
            st = state.stats[idx]
            outs = output_tensors(out)
            if st.out_bytes < 0 and idx == state.order.index(pos):
                st.out_bytes = sum(t.nbytes for t in outs)
            for t in outs:
                if t.requires_grad:
                    t.register_hook(lambda _g, idx=idx: _set_bwd(state, idx))
            if dedup is not None:
                dedup.after(pos, idx, args, out)

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post))
    return handles


def _set_bwd(state: TraceState, idx: int) -> None:
    state.cur_bwd = idx


def trace_step(
    model: nn.Module,
    layers: list[nn.Module],
    inputs: torch.Tensor,
    loss_fn: Any,
    targets: torch.Tensor,
    dedup: bool = True,
) -> TraceState:
    """Run forward, loss and backward once, recording per-layer figures.

    ``state.stats[i]`` belongs to the ``i``-th layer *to execute*, which is
    ``layers[state.order[i]]``. With ``dedup``, runs of identical layers are traced in part
    (see :mod:`hetplan.graph.dedup`; same figures, less time).
    """
    if dedup:
        try:
            state = _trace(model, layers, inputs, loss_fn, targets, True)
        except Exception:  # a stand-in skipped a side effect the model relies on
            state = None
        if state is not None:
            return state
        for p in model.parameters():  # as before the first attempt: no gradient to add to
            p.grad = None
    state = _trace(model, layers, inputs, loss_fn, targets, False)
    assert state is not None  # only a deduplicated trace can be refused
    return state


def _trace(
    model: nn.Module,
    layers: list[nn.Module],
    inputs: torch.Tensor,
    loss_fn: Any,
    targets: torch.Tensor,
    dedup: bool,
) -> TraceState | None:
    excluded = {storage_key(t) for t in [*model.parameters(), *model.buffers()]}
    state = TraceState(n_layers=len(layers), excluded=excluded)
    state.produce([inputs], -1)
    stand_ins = Dedup(state, layers) if dedup else None
    if stand_ins is not None:
        stand_ins.install()  # before our hooks: a module with hooks is never deduplicated
    handles = _hook_layers(layers, state, stand_ins)
    later = stand_ins.skipped_params() if stand_ins is not None else set()
    params = [p for p in model.parameters() if p.requires_grad and id(p) not in later]
    handles += [p.register_hook(state.weight_grad) for p in params]
    counter = FlopCounterMode(display=False)
    try:
        with (
            counter,
            _OpRecorder(counter, state),
            fused_attention(),
            torch.autograd.graph.saved_tensors_hooks(state.pack, lambda t: t),
        ):
            loss = loss_fn(model(inputs), targets)
            state.backward = True
            state.cur_bwd = max(len(state.order) - 1, 0)
            if loss.requires_grad:
                loss.backward()
        state.finish_backward_io()
    finally:
        if stand_ins is not None:
            stand_ins.remove()
        for h in handles:
            h.remove()
    if stand_ins is not None and not stand_ins.finish():
        return None
    return state


def _op_flops(func: Any, args: Any, counted: int) -> tuple[int, int, int, float]:
    """An op's FLOPs (ours for a convolution, a causal attention's share of torch's), groups,
    convolution FLOPs and probe intensity (``OpWork.probe_intensity``)."""
    if is_conv(func):
        flops, groups = conv_work(func, args[0], args[1], counted)
        return flops, groups, flops, conv_probe_intensity(func, args[0], args[1])
    if counted:
        return round(counted * attention_share(func, args[0], args[1])), 1, 0, 0.0
    return 0, 1, 0, 0.0
