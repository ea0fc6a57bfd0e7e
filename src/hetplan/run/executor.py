"""Run one rank's action list of the plan's schedule: the executor of every family.

Each rank walks its device's actions of :func:`hetplan.run.program.execution_schedule` in
order: ``fwd`` runs the stage program on a micro-batch, ``bwd`` its backward (one autograd call;
the parts the schedule splits the last backward into end when each gradient bucket is
complete, :mod:`hetplan.run.gradsync`), ``send`` posts a non-blocking send at the sender and a
receive at the receiver (waited for by the action that needs the data), ``allreduce`` starts a
bucket if its hook has not, ``optimizer`` waits for the buckets and steps. Sends never block
and every rank follows one global topological order, so no order of arrival deadlocks.

Every action is recorded with its start and end (``perf_counter``): the executed trace drawn
beside the simulated timeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hetplan.run import p2p
from hetplan.run.gradsync import BucketSync, TieSync
from hetplan.run.p2p import Template
from hetplan.run.precision import LossScaler, autocast
from hetplan.run.tensor_parallel import loss_context
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
    recv_in: dict[int, tuple[list[torch.Tensor], list[Any], float]] = field(default_factory=dict)
    recv_grad: dict[int, tuple[list[torch.Tensor], list[Any], float]] = field(default_factory=dict)
    in_grads: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    sends: list[Any] = field(default_factory=list)
    losses: dict[int, torch.Tensor] = field(default_factory=dict)
    """Micro-batch -> its weighted loss (last stage)."""


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
        self.sharded_logits = sharded_logits
        """The last stage's logits are split over its tensor-parallel group."""
        self.trace: list[tuple[str, int, int, int, float, float]] = []
        """This step's actions: (kind, stage, micro-batch, part, start, end)."""
        self.step_start = 0.0
        self.step_end = 0.0
        self.last_loss: float | None = None
        self._s = _StepState()

    def step(self, x: torch.Tensor | None, y: torch.Tensor | None) -> float | None:
        """One iteration; returns this rank's share of the global-batch mean loss (last stage)."""
        self.trace = []
        self.step_start = _now(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        st = self._s = _StepState()
        if self.io.first and x is not None:
            st.xs = torch.tensor_split(x, self.m)
        if self.io.last and y is not None:
            st.ys = torch.tensor_split(y, self.m)
        for act in self.actions:
            self._run(act)
            # Finished sends release their buffers now, not at the step's end: a 1F1B stage
            # must hold only its in-flight micro-batches, as the memory model charges.
            st.sends = [w for w in st.sends if not w.is_completed()]
        for w in st.sends:
            w.wait()
        self.step_end = _now(self.device)
        self.last_loss = float(sum(float(t) for t in st.losses.values())) if self.io.last else None
        return self.last_loss

    def close(self) -> dict[str, Any]:
        """End of the run: anything the executor reports besides its steps."""
        return {}

    def record_collective(self, kind: str, part: int, start: float, end: float) -> None:
        """A bucket's allreduce, reported by :class:`BucketSync` when it completes."""
        self.trace.append((kind, self.io.stage, -1, part, start, end))

    def _record(self, kind: str, act: Action, start: float, end: float, part: int = -1) -> None:
        self.trace.append((kind, act.stage, act.microbatch, part, start, end))

    def _run(self, act: Action) -> None:
        start = time.perf_counter()
        if act.kind == "fwd":
            self._forward(act)
            return  # recorded by _forward, from the arrival of its input
        elif act.kind == "bwd":
            if act.part <= 0:
                self._backward(act)
            return  # parts are recorded by _backward
        elif act.kind == "send":
            if self._transfer(act) == "send":
                self._record("send", act, start, time.perf_counter())
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
                st.sends += p2p.send_values(st.outputs[j], io.tout, io.next_rank, j)
            else:  # gradients of this stage's inputs backward
                assert io.tin is not None and io.prev_rank is not None
                st.sends += p2p.send_grads(st.in_grads.pop(j), io.tin, io.prev_rank, j)
            return "send"
        now = time.perf_counter()
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
        self, pending: tuple[list[torch.Tensor], list[Any], float], stage: int, j: int
    ) -> list[torch.Tensor]:
        """Wait for a posted receive; recorded as ``recv`` from posting to arrival."""
        bufs, works, posted = pending
        for w in works:
            w.wait()
        self.trace.append(("recv", stage, j, -1, posted, time.perf_counter()))
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
        start = time.perf_counter()
        with autocast(self.device, self.dtype), loss_context(self.sharded_logits and io.last):
            out = self._call(j, args)
            if io.last:
                y = self._target(j)
                loss = self.loss_fn(out, y) * (y.shape[0] / self.batch)
                st.losses[j] = loss.detach()
                st.outputs[j] = loss
            else:
                st.outputs[j] = out
        self._record("fwd", act, start, time.perf_counter())

    def _input(self, j: int) -> torch.Tensor:
        """The first stage's input of micro-batch ``j``."""
        return self._s.xs[j]

    def _target(self, j: int) -> torch.Tensor:
        """The last stage's target of micro-batch ``j``."""
        return self._s.ys[j]

    def _call(self, j: int, args: tuple[Any, ...]) -> Any:
        """The stage program on micro-batch ``j``'s inputs (recomputed in backward if asked)."""
        del j  # the window executor picks the weight version by micro-batch
        if self.recompute and torch.is_grad_enabled():
            return checkpoint(self.module, *args, use_reentrant=False)
        return self.module(*args)

    def _is_final(self, j: int) -> bool:
        """Whether micro-batch ``j`` is its iteration's last (gradients complete after it)."""
        return j == self.m - 1

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
        if final and self.ties is not None:
            tie_start = time.perf_counter()
            if self.ties.add_partials():
                self.trace.append(("tie", io.stage, j, -1, tie_start, time.perf_counter()))
        if final and self.sync is not None:
            self.sync.arm()
        start = time.perf_counter()
        out = st.outputs.pop(j)
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
        end = time.perf_counter()
        if final and self.ties is not None:
            self.ties.send_partials()
        self._record_backward(act, start, end, final)

    def _record_backward(self, act: Action, start: float, end: float, final: bool) -> None:
        """The backward, split as the schedule splits it: part k ends when bucket k is ready."""
        if not (final and self.sync is not None and act.part >= 0):
            self._record("bwd", act, start, end, act.part)
            return
        marks = [min(max(t, start), end) for t in self.sync.ready_s]
        n_parts = sum(1 for a in self.actions if a.kind == "bwd" and a.microbatch == act.microbatch)
        bounds = [start, *marks[: n_parts - 1], end][: n_parts + 1]
        while len(bounds) < n_parts + 1:
            bounds.insert(-1, end)
        for k in range(n_parts):
            self._record("bwd", act, bounds[k], bounds[k + 1], k)

    def _optimizer_step(self) -> None:
        if self.sync is not None:
            self.sync.finish()
        if self.ties is not None:
            tie_start = time.perf_counter()
            self.ties.share_totals()
            self.trace.append(("tie", self.io.stage, -1, -1, tie_start, time.perf_counter()))
        start = time.perf_counter()
        params = [p for p in self.module.parameters() if p.requires_grad]
        if self.scaler.unscale_and_check(params):
            self.optimizer.step()
        self.trace.append(("optimizer", self.io.stage, -1, -1, start, time.perf_counter()))


def _my_link(act: Action, me: str) -> tuple[str, str]:
    """(sender, receiver) of a send's link that ``me`` is an end of (a tensor-parallel
    stage's send has one link per shard: shard t to shard t)."""
    for res in act.resources:
        ends = res_devices(res)
        if res.startswith("link:") and me in ends:
            return ends[0], ends[1]
    return act.device, act.peer or ""


def _now(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter()
