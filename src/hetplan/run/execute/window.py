"""The executor of schedules without a flush: asynchronous PipeDream and HetPipe's WSP.

These plans run their 1F1B order over a continuous stream of micro-batches: a stage's forwards
of iteration ``w + 1`` start before the last backward of ``w``, and an optimizer step (for WSP
the step of wave ``w``, applied ``D + 1`` waves later at most) can fall between a micro-batch's
forward and its backward. The rank runs a *window* of training steps as one schedule of
:func:`hetplan.schedule.plan_schedule.execution_schedule` (the one the simulator prices, with
as many iterations); the pipeline drains only at the window's end (before a checkpoint, a trial's
decision and at the end of the run). One call of :meth:`WindowExecutor.step` runs the rank's
actions up to the last one of that step's iteration.

**Weight stashing** (Narayanan et al. 2019, PipeDream, Sec. 3.3): a micro-batch whose forward
and backward on this stage are separated by an optimizer step runs its forward on a copy of
the weights of that moment and its backward on the same copy; one copy is kept per weight
version still in flight and freed after its last backward. Every micro-batch's gradients are
added to the gradients of its own iteration, which the optimizer action of that iteration
applies (after the wave's all-reduce across the replicas for WSP). A single-process
reference that applies the same delayed updates is
:func:`hetplan.run.references.reference_delayed.delayed_reference_run`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call
from torch.utils.checkpoint import checkpoint

from hetplan.cost.comm_buckets import ddp_bucket_members, first_bucket
from hetplan.run.execute.executor import Executor, _StepState, retire_all_sends
from hetplan.run.execute.gradsync import Recorder
from hetplan.schedule.types import Action
from hetplan.schedule.window_state import stashed_microbatches

Grads = dict[str, torch.Tensor]
Fetch = Callable[[int], tuple[torch.Tensor | None, torch.Tensor | None]]
"""Global step -> the pipeline's (inputs, targets) of that step (None where not read)."""


class WaveSync:
    """All-reduce of one iteration's gradients over the stage's replicas, bucket by bucket
    (the buckets of :class:`hetplan.run.execute.gradsync.BucketSync`), launched by the schedule's
    allreduce actions and waited for by the iteration's optimizer action."""

    def __init__(
        self,
        layer_names: list[list[tuple[str, int]]],
        cap_bytes: float,
        group: Any,
        record: Recorder,
    ) -> None:
        """``layer_names[i]``: (parameter name, bytes) of layer ``i``'s gradient tensors."""
        sizes = [[nbytes for _, nbytes in layer] for layer in layer_names]
        members = ddp_bucket_members(sizes, cap_bytes, first_bucket(cap_bytes))
        self.buckets = [[layer_names[i][k][0] for i, k in m] for m in members]
        self.group = group
        self.record = record
        self._works: dict[int, list[tuple[int, Any, torch.Tensor, int]]] = {}

    def launch(self, w: int, k: int, grads: Grads, like: dict[str, nn.Parameter]) -> None:
        """Start iteration ``w``'s buckets up to ``k`` that have not started."""
        works = self._works.setdefault(w, [])
        while len(works) <= k:
            j = len(works)
            flat = torch.cat([_grad(grads, n, like).reshape(-1) for n in self.buckets[j]])
            start = self.record.stamp()
            works.append((j, dist.all_reduce(flat, group=self.group, async_op=True), flat, start))

    def finish(self, w: int, grads: Grads, like: dict[str, nn.Parameter]) -> None:
        """Wait for iteration ``w``'s buckets and write the sums into ``grads``."""
        self.launch(w, len(self.buckets) - 1, grads, like)
        for j, work, flat, start in self._works.pop(w):
            work.wait()
            self.record.record_collective("allreduce", j, start, self.record.stamp())
            offset = 0
            for name in self.buckets[j]:
                g = grads[name]
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()


def _grad(grads: Grads, name: str, like: dict[str, nn.Parameter]) -> torch.Tensor:
    if name not in grads:
        grads[name] = torch.zeros_like(like[name])
    return grads[name]


class WindowExecutor(Executor):
    """One rank of a PipeDream or WSP plan: windows of steps with weight stashing."""

    def __init__(self, *, window_actions: Callable[[int], list[Action]], **kw: Any) -> None:
        super().__init__(actions=[], **kw)
        self.window_actions = window_actions
        self.fetch: Fetch = lambda _step: (None, None)
        self.wave: WaveSync | None = None
        self.params = {n: p for n, p in self.module.named_parameters() if p.requires_grad}
        self.version = 0
        """Optimizer steps applied so far (the weights' version)."""
        self._base = 0
        self._ends: list[int] = []
        self._pos = 0
        self._cur = 0
        self._stashed: set[int] = set()
        self._data: dict[int, tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = {}
        self._copies: dict[int, Grads] = {}
        self._users: dict[int, int] = {}
        self._leaves: dict[int, tuple[int, Grads]] = {}
        self._acc: dict[int, Grads] = {}

    @property
    def window_done(self) -> bool:
        """Whether the current window's steps have all run (the pipeline is drained)."""
        return self._cur >= len(self._ends)

    def begin_window(self, first_step: int, steps: int) -> None:
        """Run global steps ``first_step .. first_step + steps - 1`` as one schedule."""
        if not self.window_done:
            raise RuntimeError("a window starts before the previous one drained")
        self.actions = self.window_actions(steps)
        self._base, self._pos, self._cur = first_step, 0, 0
        self._s = _StepState()
        self._ends = _iteration_ends(self.actions, steps)
        self._stashed = stashed_microbatches(self.actions)

    def step(self, x: torch.Tensor | None = None, y: torch.Tensor | None = None) -> float | None:
        """Run this rank's actions up to the end of the window's next step; its loss."""
        del x, y  # data comes from :attr:`fetch`, when a forward needs it
        self._begin()
        st, w = self._s, self._cur
        while self._pos < self._ends[w]:
            act = self.actions[self._pos]
            self._pos += 1
            self._run(act)
            st.sends = [s for s in st.sends if not s.is_completed()]
        if w == len(self._ends) - 1:
            retire_all_sends(st)
        self._end()
        self._data.pop(w, None)
        mine = [j for j in st.losses if j // self.m == w]
        self.last_loss = float(sum(float(st.losses.pop(j)) for j in mine)) if self.io.last else None
        self._cur += 1
        return self.last_loss

    def _run(self, act: Action) -> None:
        if act.kind == "optimizer":
            self._apply(act.iteration)
        elif act.kind == "allreduce":
            if self.wave is not None:
                self.wave.launch(act.iteration, act.part, self._grads(act.iteration), self.params)
        else:
            super()._run(act)

    def _batch(self, w: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        if w not in self._data:
            x, y = self.fetch(self._base + w)
            xs = torch.tensor_split(x, self.m) if x is not None else ()
            ys = torch.tensor_split(y, self.m) if y is not None else ()
            self._data[w] = (xs, ys)
        return self._data[w]

    def _input(self, j: int) -> torch.Tensor:
        return self._batch(j // self.m)[0][j % self.m]

    def _target(self, j: int) -> torch.Tensor:
        return self._batch(j // self.m)[1][j % self.m]

    def _is_final(self, j: int) -> bool:
        return j % self.m == self.m - 1

    def _grads(self, w: int) -> Grads:
        return self._acc.setdefault(w, {})

    def _call(self, j: int, args: tuple[Any, ...]) -> Any:
        if j not in self._stashed:
            self._leaves[j] = (-1, dict(self.params))
            return super()._call(j, args)
        v = self.version
        if v not in self._copies:
            self._copies[v] = {
                n: p.detach().clone().requires_grad_(True) for n, p in self.params.items()
            }
        self._users[v] = self._users.get(v, 0) + 1
        weights = self._copies[v]
        self._leaves[j] = (v, weights)

        def run(*a: Any) -> Any:
            return functional_call(self.module, weights, a)

        if self._checkpoints(j):  # the window numbers micro-batches across iterations
            return checkpoint(run, *args, use_reentrant=False)
        return run(*args)

    def _backward(self, act: Action) -> None:
        if self.ties is not None:
            self.ties.grads = self._grads(act.microbatch // self.m)
        super()._backward(act)

    def _before_backward(self, j: int) -> None:
        """Micro-batch ``j``'s weights (the live ones or a stashed copy) take its iteration's
        gradients as theirs, so that autograd adds into them in place, one layer's gradient
        at a time, as it does into ``.grad`` across a flushed step's micro-batches (adding
        after the backward held a whole second set of the stage's gradients at its end)."""
        acc = self._grads(j // self.m)
        for name, t in self._leaves[j][1].items():
            t.grad = acc.get(name)

    def _after_backward(self, j: int) -> None:
        """Take micro-batch ``j``'s gradients back as its iteration's; free its weight copy."""
        v, leaves = self._leaves.pop(j)
        acc = self._grads(j // self.m)
        for name, t in leaves.items():
            if t.grad is not None:
                acc[name] = t.grad
            t.grad = None
        if v >= 0:
            self._users[v] -= 1
            if self._users[v] == 0:
                del self._users[v], self._copies[v]

    def _apply(self, w: int) -> None:
        """Iteration ``w``'s optimizer step: its (synchronised) gradients into the weights."""
        grads = self._grads(w)
        if self.wave is not None:
            self.wave.finish(w, grads, self.params)
        if self.ties is not None:
            tie_start = self.stamp()
            self.ties.grads = grads
            self.ties.share_totals()
            self.record("tie", self.io.stage, -1, tie_start)
        start = self.stamp()
        for name, p in self.params.items():
            p.grad = grads.get(name)
        if self.scaler.unscale_and_check(list(self.params.values())):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        del self._acc[w]
        self.version += 1
        self.record("optimizer", self.io.stage, -1, start)


def _iteration_ends(actions: list[Action], steps: int) -> list[int]:
    """For each step of the window, the index one past the last action of it or an earlier
    one: a step's call runs up to there."""
    ends = [0] * steps
    for i, act in enumerate(actions):
        ends[act.iteration] = i + 1
    for w in range(1, steps):
        ends[w] = max(ends[w], ends[w - 1])
    return ends
