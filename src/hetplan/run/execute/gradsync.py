"""Gradient synchronisation across replicas, bucket by bucket, overlapped with the backward.

The buckets are the ones the predictor prices (:func:`hetplan.cost.comm_buckets.
ddp_bucket_members`: DDP's assignment over the stage's parameters in reverse registration
order). During the backward of a step's last micro-batch, a post-accumulate-grad hook counts
each bucket's gradients; once a bucket is complete (and every earlier bucket has started, so
all replicas issue the allreduces in the same order, as DDP's reducer does) its gradients are
summed over the stage's data-parallel group with one asynchronous allreduce. The optimizer
action waits for all of them. Each rank's loss is already scaled by its share of the global
batch, so a sum (not an average) gives the gradient of the global-batch mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from hetplan.cost.comm_buckets import ddp_bucket_members, first_bucket
from hetplan.run.execute import p2p
from hetplan.run.setup.tensor_parallel import local


class Recorder(Protocol):
    """The rank's trace: stamps of its step clock and the collectives between them."""

    @property
    def device_timed(self) -> bool:
        """Stamps are CUDA events (taken only on the thread that issues the kernels)."""
        ...

    def stamp(self) -> int: ...

    def record_collective(self, kind: str, part: int, start: int, end: int) -> None: ...


class BucketSync:
    """All-reduce of one stage's gradients over its replicas, bucket by bucket."""

    def __init__(
        self,
        layer_params: Sequence[Sequence[nn.Parameter]],
        cap_bytes: float,
        group: Any,
        record: Recorder,
    ) -> None:
        sizes = [[local(p).numel() * p.element_size() for p in ps] for ps in layer_params]
        members = ddp_bucket_members(sizes, cap_bytes, first_bucket(cap_bytes))
        self.buckets: list[list[nn.Parameter]] = [
            [layer_params[layer][i] for layer, i in m] for m in members
        ]
        self.group = group
        self.record = record
        self.armed = False
        self._left: list[int] = []
        self._works: list[tuple[int, Any, torch.Tensor, int]] = []
        self._next = 0
        self._done: dict[int, int] = {}
        self.ready: dict[int, int] = {}
        """Bucket -> stamp of its last gradient in the step's final backward."""
        bucket_of = {id(p): k for k, ps in enumerate(self.buckets) for p in ps}
        for ps in layer_params:
            for p in ps:
                k = bucket_of[id(p)]
                p.register_post_accumulate_grad_hook(lambda _p, k=k: self._ready(k))

    def arm(self) -> None:
        """The next backward is the step's last: launch each bucket as it completes."""
        self.armed = True
        self._left = [len(b) for b in self.buckets]
        self._next = 0
        self._works = []
        self._done = {}
        self.ready = {}

    def _ready(self, k: int) -> None:
        if not self.armed:
            return
        self._left[k] -= 1
        if self._left[k] == 0:
            self.ready[k] = self.record.stamp()
        while self._next < len(self.buckets) and self._left[self._next] <= 0:
            self.launch(self._next)

    def launch(self, k: int) -> None:
        """Start bucket ``k`` (and any earlier one not started) if not started yet."""
        while self._next <= k:
            j = self._next
            grads = [_grad(p) for p in self.buckets[j]]
            flat = torch.cat([g.reshape(-1) for g in grads])
            start = self.record.stamp()
            work = dist.all_reduce(flat, group=self.group, async_op=True)
            if not self.record.device_timed:  # host time of completion, from the backend's
                work.get_future().then(  # callback (the optimizer waits later); a CUDA event
                    lambda _f, j=j: self._done.__setitem__(j, self.record.stamp())
                )  # cannot be recorded from that thread: on CUDA it ends where it is waited for
            self._works.append((j, work, flat, start))
            self._next += 1

    def finish(self) -> None:
        """Wait for every bucket and write the sums back into the gradients."""
        self.launch(len(self.buckets) - 1)
        for j, work, flat, start in self._works:
            work.wait()
            end = self._done.get(j)
            end = self.record.stamp() if end is None else end
            self.record.record_collective("allreduce", j, start, end)
            offset = 0
            for p in self.buckets[j]:
                g = _grad(p)
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        self.armed = False
        self._works = []


def _grad(p: nn.Parameter) -> torch.Tensor:
    """The gradient's part on this rank (a tensor-parallel shard's local part)."""
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    return local(p.grad)


TIE_TAG = 1 << 30  # tags of tied-weight messages, above every micro-batch tag


class TieSync:
    """Weights shared by several stages of a pipeline (GPT's embedding and output layer).

    The first stage using the weight owns it (as in the graph's pricing); each later stage
    sends its partial gradient to the owner after its last backward (downstream stages finish
    first, so the owner receives it before its own last backward, and its bucket allreduce
    then carries the pipeline's total); the owner sends the synchronised gradient back at the
    optimizer step. Megatron-LM keeps tied embeddings in step the same way (an allreduce over
    the "embedding group"); these transfers are not in the schedule (documented).
    """

    def __init__(self, module: nn.Module, entries: list[tuple[int, str, bool, list[int]]]) -> None:
        """``entries``: (tie index, parameter name here, owned by this rank, other ranks)."""
        self.module = module
        self.entries = entries
        self.group: Any = None
        """Process group of the tie messages (set by the runtime: a group of their own)."""
        self.grads: dict[str, torch.Tensor] | None = None
        """Where the gradients are, by parameter name, when not in ``.grad`` (the window
        executor keeps one set per iteration in flight)."""
        self._sends: list[Any] = []

    def _grad(self, name: str) -> torch.Tensor:
        if self.grads is None:
            return _grad(self.module.get_parameter(name))
        if name not in self.grads:
            self.grads[name] = torch.zeros_like(self.module.get_parameter(name))
        return local(self.grads[name])

    def send_partials(self) -> None:
        """Non-owners: after the last backward, send the partial gradient to the owner."""
        for i, name, owner, peers in self.entries:
            if not owner:
                g = p2p.wire(self._grad(name).clone())
                self._sends.append(dist.isend(g, peers[0], self.group, TIE_TAG + 2 * i))

    def add_partials(self) -> bool:
        """Owner: before the last backward, add every later stage's partial gradient; True if
        this rank owns any tie (it waited for partials)."""
        owns = False
        for i, name, owner, peers in self.entries:
            if owner:
                g = self._grad(name)
                for src in peers:
                    buf = torch.empty_like(g, device=p2p.wire_device(str(g.device)))
                    dist.recv(buf, src, self.group, TIE_TAG + 2 * i)
                    g.add_(buf.to(g.device))
                owns = True
        return owns

    def share_totals(self) -> None:
        """At the optimizer: the owner sends the synchronised gradient, the others take it."""
        for i, name, owner, peers in self.entries:
            g = self._grad(name)
            if owner:
                self._sends += [
                    dist.isend(p2p.wire(g), dst, self.group, TIE_TAG + 2 * i + 1) for dst in peers
                ]
            else:
                buf = torch.empty_like(g, device=p2p.wire_device(str(g.device)))
                dist.recv(buf, peers[0], self.group, TIE_TAG + 2 * i + 1)
                g.copy_(buf)
        for w in self._sends:
            w.wait()
        self._sends = []
