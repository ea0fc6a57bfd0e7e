"""Run one rank's action list of the plan's schedule: the executor of every family.

Each rank walks its device's actions of :func:`hetplan.schedule.plan_schedule.execution_schedule` in
order: ``fwd`` runs the stage program on a micro-batch, ``bwd`` its backward (one autograd call;
the parts the schedule splits the last backward into end when each gradient bucket is
complete, :mod:`hetplan.run.execute.gradsync`), ``send`` posts a non-blocking send at the sender
and a
receive at the receiver (waited for by the action that needs the data), ``allreduce`` starts a
bucket if its hook has not, ``optimizer`` waits for the buckets and steps. Sends never block
and every rank follows one global topological order, so no order of arrival deadlocks.

Every action is recorded with its start and end as stamps of the rank's
:class:`~hetplan.run.execute.clock.StepClock` (CUDA events on a GPU, ``perf_counter`` on CPU),
resolved
into :class:`~hetplan.planspec.trace.Span` after the step: the executed trace drawn beside the
simulated one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hetplan.planspec.trace import Span
from hetplan.run.execute import p2p
from hetplan.run.execute.clock import StepClock
from hetplan.run.execute.gradsync import BucketSync, TieSync
from hetplan.run.execute.p2p import Template
from hetplan.run.setup.precision import LossScaler, autocast
from hetplan.run.setup.tensor_parallel import loss_context
from hetplan.schedule.types import Action, res_devices


@dataclass(frozen=True, kw_only=True)
class StageIO:
    """Where a rank's stage sits in its pipeline."""

    me: str
    """This rank's device id (as the schedule names it)."""
    stage: int
    num_stages: int
    prev_rank: int | None
    next_rank: int | None
    prev_device: str | None
    next_device: str | None
    tin: Template | None
    """Values received from the previous stage (None for stage 0)."""
    tout: Template | None
    """Values sent to the next stage (None for the last stage)."""

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.num_stages - 1


@dataclass(kw_only=True)
class _StepState:
    xs: tuple[torch.Tensor, ...] = ()
    ys: tuple[torch.Tensor, ...] = ()
    inputs: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    outputs: dict[int, Any] = field(default_factory=dict)
    recv_in: dict[int, tuple[list[torch.Tensor], list[Any], int]] = field(default_factory=dict)
    recv_grad: dict[int, tuple[list[torch.Tensor], list[Any], int]] = field(default_factory=dict)
    in_grads: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    sends: list[Any] = field(default_factory=list)
    """The sends of input gradients to the previous stage, until the next forward or backward
    (:func:`retire_grad_sends`)."""
    value_sends: dict[int, list[Any]] = field(default_factory=dict)
    """Micro-batch -> the sends of its values to the next stage, until its gradients return
    (:func:`retire_value_sends`)."""
    losses: dict[int, torch.Tensor] = field(default_factory=dict)
    """Micro-batch -> its weighted loss (last stage)."""


def retire_value_sends(st: _StepState, j: int) -> None:
    """Wait on the sends of micro-batch ``j``'s values, releasing their buffers (the stage's
    output, held until then). Called once its gradients are back: the next stage received the
    values before it could send them, so the waits return at once. gloo's ``is_completed()``
    stays False until ``wait()`` (torch 2.13), so the step's filter of finished sends never
    dropped one, and a stage held every micro-batch's output until the step (PipeDream: the
    window) ended instead of its in-flight ones."""
    for w in st.value_sends.pop(j, []):
        w.wait()


def retire_grad_sends(st: _StepState) -> None:
    """Wait on the sends of input gradients of earlier backwards, releasing their buffers
    (each a micro-batch's cut, held since the backward that made it). Called before each
    forward and backward compute once its inputs are in (torch's 1F1B waits them with the
    next forward's receive): the stage then holds at most the gradients of its current
    backward, as the memory model charges. It cannot deadlock: every rank runs its actions
    in one global order, the previous stage posts its receive of each gradient at that send's
    place in it (before this compute's), and gloo moves the data on its own threads once the
    receive is posted. It waits only while the previous stage has not reached that place
    yet; in 1F1B's steady state that stage posts the receive right after sending the values
    this stage's forward has just received. gloo's ``is_completed()`` stays False until
    ``wait()``, so without the waits a stage held every micro-batch's input gradients until
    the step (PipeDream: the window) ended."""
    for w in st.sends:
        w.wait()
    st.sends = []


def retire_all_sends(st: _StepState) -> None:
    """Wait on every send still held (the end of a flushed step or of a window)."""
    retire_grad_sends(st)
    for j in list(st.value_sends):
        retire_value_sends(st, j)


@dataclass(frozen=True, slots=True)
class _Pending:
    """An action of the running step, its times as clock stamps (resolved after the step)."""

    kind: str
    stage: int
    microbatch: int
    part: int
    start: int
    end: int
    splits: tuple[int, ...] = ()
    """A backward split into ``len(splits) + 1`` parts at these stamps (bucket ready)."""


class Executor:
    """One rank of a plan: its stage program, its actions, its gradient sync."""

    def __init__(
        self,
        *,
        module: nn.Module,
        io: StageIO,
        actions: list[Action],
        device: str,
        micro_batches: int,
        global_batch: int,
        loss_fn: Any,
        dtype: str,
        optimizer: torch.optim.Optimizer,
        sync: BucketSync | None = None,
        ties: TieSync | None = None,
        scaler: LossScaler | None = None,
        recompute: bool = False,
        recompute_last: bool = True,
        sharded_logits: bool = False,
    ) -> None:
        self.module = module
        self.io = io
        self.actions = actions
        self.device = device
        self.m = micro_batches
        self.batch = global_batch
        self.loss_fn = loss_fn
        self.dtype = dtype
        self.optimizer = optimizer
        self.sync = sync
        self.ties = ties
        self.scaler = scaler or LossScaler(False)
        self.recompute = recompute
        self.recompute_last = recompute_last
        """With ``recompute``: also each iteration's last micro-batch (``recompute_mode``
        ``all``); False: not that one (``except_last``, torchgpipe's default)."""
        self.sharded_logits = sharded_logits
        """The last stage's logits are split over its tensor-parallel group."""
        self.clock = StepClock(device)
        self.trace: list[Span] = []
        """The last step's actions (host-clock seconds; device time on CUDA)."""
        self._pending: list[_Pending] = []
        self._lock = threading.Lock()  # collectives complete on the backend's threads
        self.step_start = 0.0
        self.step_end = 0.0
        self.last_loss: float | None = None
        self._s = _StepState()

    def step(self, x: torch.Tensor | None, y: torch.Tensor | None) -> float | None:
        """One iteration; returns this rank's share of the global-batch mean loss (last stage)."""
        self._begin()
        self.optimizer.zero_grad(set_to_none=True)
        st = self._s = _StepState()
        if self.io.first and x is not None:
            st.xs = torch.tensor_split(x, self.m)
        if self.io.last and y is not None:
            st.ys = torch.tensor_split(y, self.m)
        for act in self.actions:
            self._run(act)
            # Finished sends release their buffers now (gloo's report it only once waited:
            # retire_value_sends and retire_grad_sends wait them where that is safe).
            st.sends = [w for w in st.sends if not w.is_completed()]
        retire_all_sends(st)
        self._end()
        self.last_loss = float(sum(float(t) for t in st.losses.values())) if self.io.last else None
        return self.last_loss

    def _begin(self) -> None:
        """Open a step: synchronise the device, start its clock and an empty trace."""
        self._pending = []
        self.step_start = self.clock.begin()

    def _end(self) -> None:
        """Close a step: synchronise, resolve the stamps into :attr:`trace`."""
        self.step_end = self.clock.end()
        self.trace = [s for p in self._pending for s in self._resolve(p)]

    def _resolve(self, p: _Pending) -> list[Span]:
        t = self.clock.time
        start, end = t(p.start), t(p.end)
        marks = [min(max(t(k), start), end) for k in p.splits]
        bounds = [start, *sorted(marks), end] if p.splits else [start, end]
        return [
            Span(device=self.io.me, kind=p.kind, stage=p.stage, microbatch=p.microbatch,
                 part=p.part if not p.splits else k, start=bounds[k], end=bounds[k + 1])
            for k in range(len(bounds) - 1)
        ]  # fmt: skip

    def stamp(self) -> int:
        """A point on this rank's step clock (thread-safe: collectives complete elsewhere)."""
        with self._lock:
            return self.clock.stamp()

    @property
    def device_timed(self) -> bool:
        return self.clock.device_timed

    def close(self) -> dict[str, Any]:
        """End of the run: anything the executor reports besides its steps."""
        return {}

    def record_collective(self, kind: str, part: int, start: int, end: int) -> None:
        """A bucket's allreduce (stamps), reported by :class:`BucketSync` when it completes."""
        self.record(kind, self.io.stage, -1, start, part=part, end=end)

    def record(
        self, kind: str, stage: int, microbatch: int, start: int, *, part: int = -1,
        end: int | None = None,
    ) -> None:  # fmt: skip
        """An action from ``start`` to ``end`` (stamps; None: now)."""
        stop = self.stamp() if end is None else end
        self._pending.append(_Pending(kind, stage, microbatch, part, start, stop))

    def _record(self, kind: str, act: Action, start: int) -> None:
        self.record(kind, act.stage, act.microbatch, start)

    def _run(self, act: Action) -> None:
        if act.kind == "fwd":
            self._forward(act)
            return  # recorded by _forward, from the arrival of its input
        elif act.kind == "bwd":
            if act.part <= 0:
                self._backward(act)
            return  # parts are recorded by _backward
        elif act.kind == "send":
            start = self.stamp()  # (a CUDA event per stamp: taken only where recorded)
            if self._transfer(act) == "send":
                self._record("send", act, start)
            return  # a receive is recorded when its data has arrived (_wait)
        elif act.kind == "allreduce":
            if self.sync is not None:
                self.sync.launch(act.part)
            return  # recorded when it completes
        elif act.kind == "optimizer":
            self._optimizer_step()
            return  # recorded by _optimizer_step, after the gradients are in
        else:
            raise RuntimeError(f"action {act.kind} is not executable by this runtime")

    def _transfer(self, act: Action) -> str:
        io, st = self.io, self._s
        j = act.microbatch
        src, dst = _my_link(act, io.me)
        if src == io.me:
            if dst == io.next_device:  # activations forward
                assert io.tout is not None and io.next_rank is not None
                sent = p2p.send_values(st.outputs[j], io.tout, io.next_rank, j)
                st.value_sends.setdefault(j, []).extend(sent)
            else:  # gradients of this stage's inputs backward
                assert io.tin is not None and io.prev_rank is not None
                st.sends += p2p.send_grads(st.in_grads.pop(j), io.tin, io.prev_rank, j)
            return "send"
        now = self.stamp()
        if src == io.prev_device:
            assert io.tin is not None and io.prev_rank is not None
            bufs, works = p2p.recv_values(io.tin, io.prev_rank, j, self.device)
            st.recv_in[j] = (bufs, works, now)
        else:
            assert io.tout is not None and io.next_rank is not None
            bufs, works = p2p.recv_grads(io.tout, io.next_rank, j, self.device)
            st.recv_grad[j] = (bufs, works, now)
        return "recv"

    def _wait(
        self, pending: tuple[list[torch.Tensor], list[Any], int], stage: int, j: int
    ) -> list[torch.Tensor]:
        """Wait for a posted receive; recorded as ``recv`` from posting to arrival."""
        bufs, works, posted = pending
        for w in works:
            w.wait()
        self.record("recv", stage, j, posted)
        return p2p.arrived(bufs, self.device)

    def _forward(self, act: Action) -> None:
        io, st = self.io, self._s
        j = act.microbatch
        if io.first:
            args: tuple[Any, ...] = (self._input(j),)
        else:
            assert io.tin is not None
            args = p2p.assemble(io.tin, self._wait(st.recv_in.pop(j), io.stage - 1, j))
            st.inputs[j] = args
            retire_grad_sends(st)
        start = self.stamp()
        with autocast(self.device, self.dtype), loss_context(self.sharded_logits and io.last):
            out = self._call(j, args)
            if io.last:
                y = self._target(j)
                loss = self.loss_fn(out, y) * (y.shape[0] / self.batch)
                st.losses[j] = loss.detach()
                st.outputs[j] = loss
            else:
                st.outputs[j] = out
        self._record("fwd", act, start)

    def _input(self, j: int) -> torch.Tensor:
        """The first stage's input of micro-batch ``j``."""
        return self._s.xs[j]

    def _target(self, j: int) -> torch.Tensor:
        """The last stage's target of micro-batch ``j``."""
        return self._s.ys[j]

    def _call(self, j: int, args: tuple[Any, ...]) -> Any:
        """The stage program on micro-batch ``j``'s inputs (recomputed in backward if asked)."""
        if self._checkpoints(j):
            return checkpoint(self.module, *args, use_reentrant=False)
        return self.module(*args)

    def _is_final(self, j: int) -> bool:
        """Whether micro-batch ``j`` is its iteration's last (gradients complete after it)."""
        return j == self.m - 1

    def _checkpoints(self, j: int) -> bool:
        """Whether micro-batch ``j``'s forward is checkpointed (``torch.utils.checkpoint``,
        non-reentrant: keeps its inputs, recomputes the stage in its backward): with
        recomputation, every one, or all but each iteration's last (``except_last``)."""
        if not self.recompute or not torch.is_grad_enabled():
            return False
        return self.recompute_last or not self._is_final(j)

    def _before_backward(self, j: int) -> None:
        """Hook before micro-batch ``j``'s autograd call (the window executor points its
        weights' gradients at its iteration's)."""

    def _after_backward(self, j: int) -> None:
        """Hook after micro-batch ``j``'s autograd call (the window executor collects its
        gradients)."""

    def _backward(self, act: Action) -> None:
        io, st = self.io, self._s
        j = act.microbatch
        final = self._is_final(j)
        grads: list[torch.Tensor] = []
        if not io.last:
            grads = self._wait(st.recv_grad.pop(j), io.stage + 1, j)
            retire_value_sends(st, j)
        retire_grad_sends(st)
        if final and self.ties is not None:
            tie_start = self.stamp()
            if self.ties.add_partials():
                self.record("tie", io.stage, j, tie_start)
        if final and self.sync is not None:
            self.sync.arm()
        start = self.stamp()
        out = st.outputs.pop(j)
        self._before_backward(j)
        if io.last:
            with loss_context(self.sharded_logits):
                torch.autograd.backward(out.float() * self.scaler.scale)
        else:
            assert io.tout is not None
            tensors = p2p.grad_tensors(out, io.tout)
            pairs = [(t, g) for t, g in zip(tensors, grads, strict=True) if t.requires_grad]
            if pairs:
                torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        self._after_backward(j)
        if not io.first:
            assert io.tin is not None
            ins = p2p.grad_tensors(st.inputs.pop(j), io.tin)
            st.in_grads[j] = [t.grad if t.grad is not None else torch.zeros_like(t) for t in ins]
        end = self.stamp()
        if final and self.ties is not None:
            self.ties.send_partials()
        self._record_backward(act, start, end, final)

    def _record_backward(self, act: Action, start: int, end: int, final: bool) -> None:
        """The backward, split as the schedule splits it: part k ends when bucket k is ready."""
        if not (final and self.sync is not None and act.part >= 0):
            self.record("bwd", act.stage, act.microbatch, start, part=act.part, end=end)
            return
        n_parts = sum(1 for a in self.actions if a.kind == "bwd" and a.microbatch == act.microbatch)
        splits = tuple(self.sync.ready.get(k, end) for k in range(n_parts - 1))
        self._pending.append(_Pending("bwd", act.stage, act.microbatch, 0, start, end, splits))

    def _optimizer_step(self) -> None:
        if self.sync is not None:
            self.sync.finish()
        if self.ties is not None:
            tie_start = self.stamp()
            self.ties.share_totals()
            self.record("tie", self.io.stage, -1, tie_start)
        start = self.stamp()
        params = [p for p in self.module.parameters() if p.requires_grad]
        if self.scaler.unscale_and_check(params):
            self.optimizer.step()
        self.record("optimizer", self.io.stage, -1, start)


def _my_link(act: Action, me: str) -> tuple[str, str]:
    """(sender, receiver) of a send's link that ``me`` is an end of (a tensor-parallel
    stage's send has one link per shard: shard t to shard t)."""
    for res in act.resources:
        ends = res_devices(res)
        if res.startswith("link:") and me in ends:
            return ends[0], ends[1]
    return act.device, act.peer or ""
