"""Asynchronous parameter server with bounded staleness (stale synchronous parallel).

Each host rank runs a server beside its worker: a receiver thread takes pushes from the other
workers (gloo, any source) and the local worker's go through a queue; a server thread applies
each push as soon as it arrives (its own optimizer over a master copy of the hosted tensors:
a push is one update, weighted by the worker's share of the global batch) and answers the
worker's pull with the new weights. With a bound ``s = plan.staleness > 0`` a worker's pull
after its iteration ``c`` is answered only once every worker has pushed iteration ``c - s``
(Ho et al. 2013, SSP): no worker runs more than ``s`` iterations ahead of the slowest. With
``s = 0`` the workers never wait for each other (the simulator's asynchronous schedule).

The server's threads count in the rank's measured memory: they are registered as side threads
(:mod:`hetplan.run.setup.side_threads`), each receive buffer they make and each push they
apply and answer is one unit of work, and what they hold between units (the master copies,
their gradients, the optimizer's state, the pushes and replies queued or in flight) joins the
counter's baseline.

Workers exchange nothing else: their schedules have no common action. Every server logs the
order it applied pushes in and every worker the weight versions it pulled, so a single process
can replay the same training (:func:`hetplan.run.references.reference_ps.replay_async_ps`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.run.execute.ps import PsExecutor
from hetplan.run.setup.side_threads import SideThreads

PUSH_TAG = 71  # gloo tags of the server's messages (their own process groups)
PULL_TAG = 72
BYE = -1.0  # iteration number of a worker's last message


class AsyncServer:
    """The server of one host: master copies of its tensors, their optimizer, the SSP gate."""

    def __init__(
        self,
        *,
        rank: int,
        workers: list[int],
        params: list[nn.Parameter],
        make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
        staleness: int,
        groups: tuple[Any, Any],
    ) -> None:
        self.rank = rank
        self.workers = workers
        self.masters = [nn.Parameter(p.detach().clone()) for p in params]
        self.optimizer = make_optimizer(self.masters)
        self.staleness = staleness
        self.up, self.down = groups
        self.inbox: queue.Queue[tuple[int, torch.Tensor]] = queue.Queue()
        self._arrivals = threading.Semaphore(0)
        """One release per item put in ``inbox`` (:meth:`deliver`): the server waits on it and
        takes the item inside its unit of work, so that a queued push is always in
        :meth:`_held`."""
        self.local: queue.Queue[torch.Tensor] = queue.Queue()
        self._receiving: torch.Tensor | None = None
        """The receiver's buffer of the push it waits for."""
        self._outgoing: list[tuple[int, torch.Tensor]] = []
        """Replies to other workers' pulls, made and not yet sent."""
        self.applied: list[tuple[int, int]] = []
        """(worker, iteration) of every push, in the order applied."""
        self.error: BaseException | None = None
        self._pushes = dict.fromkeys(workers, 0)
        self._done: set[int] = set()
        self._waiting: list[tuple[int, int]] = []
        self._size = sum(p.numel() for p in params) + 1
        self.side = SideThreads(held=self._held, steady=self._steady)
        self._threads = [
            threading.Thread(target=self._guard, args=(f,), daemon=True)
            for f in (self._receive, self._serve)
        ]
        for t in self._threads:
            t.start()

    def deliver(self, src: int, flat: torch.Tensor) -> None:
        """Queue a push (``src`` -1: the receiver failed) for the server thread."""
        self.inbox.put((src, flat))
        self._arrivals.release()

    def _steady(self) -> list[torch.Tensor]:
        """What the server holds through every step once it has applied a push: its master
        copies' gradients and its optimizer's state."""
        grads = [p.grad for p in self.masters if p.grad is not None]
        state = [v for st in self.optimizer.state.values() for v in st.values()]
        return grads + [v for v in state if isinstance(v, torch.Tensor)]

    def _held(self) -> list[torch.Tensor]:
        """Every tensor the server's threads hold between their units of work."""
        with self.inbox.mutex:
            pushes = [flat for _, flat in self.inbox.queue]
        with self.local.mutex:
            replies = list(self.local.queue)
        receiving = [] if self._receiving is None else [self._receiving]
        outgoing = [r for _, r in list(self._outgoing)]
        return [*self.masters, *self._steady(), *pushes, *replies, *receiving, *outgoing]

    def join(self) -> None:
        for t in self._threads:
            t.join()
        self.side.close()
        if self.error is not None:
            raise RuntimeError(f"parameter server on rank {self.rank}: {self.error}")

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as err:  # reported by join(), in the worker's thread
            self.error = err
            self.deliver(-1, torch.empty(0))

    def _receive(self) -> None:
        """Pushes of the other workers, until each has said goodbye."""
        remote = [w for w in self.workers if w != self.rank]
        byes = 0
        while byes < len(remote):
            with self.side.unit():
                self._receiving = torch.empty(self._size)
            src = dist.recv(self._receiving, src=None, group=self.up, tag=PUSH_TAG)
            byes += int(float(self._receiving[-1]) == BYE)
            self.deliver(int(src), self._receiving)
            self._receiving = None

    def _serve(self) -> None:
        while len(self._done) < len(self.workers):
            self._arrivals.acquire()
            if not self._serve_one():
                return  # the receiver failed
            while self._outgoing:  # outside the unit: a send waits for its worker's receive
                w, reply = self._outgoing[0]
                dist.send(reply, w, group=self.down, tag=PULL_TAG)
                self._outgoing.pop(0)

    def _serve_one(self) -> bool:
        """Apply the next push and answer the pulls it unblocks (one unit of work); False
        when the receiver failed."""
        with self.side.unit():
            src, flat = self.inbox.get_nowait()
            if src < 0:
                return False
            if float(flat[-1]) == BYE:
                self._done.add(src)
            else:
                self._apply(src, int(flat[-1]), flat[:-1])
            del flat
            self._answer()
        return True

    def _apply(self, worker: int, iteration: int, grads: torch.Tensor) -> None:
        offset = 0
        for p in self.masters:
            p.grad = grads[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        self.optimizer.step()
        self.applied.append((worker, iteration))
        self._pushes[worker] += 1
        self._waiting.append((worker, iteration + 1))

    def _answer(self) -> None:
        slowest = min((n for w, n in self._pushes.items() if w not in self._done), default=1 << 62)
        ready = [
            (w, c) for w, c in self._waiting if self.staleness == 0 or slowest >= c - self.staleness
        ]
        if not ready:
            return
        # One flat copy of the weights and the version, read by every pull it answers (two
        # concatenations held two copies at once, and each ready worker had its own).
        version = torch.tensor([float(len(self.applied))])
        reply = torch.cat([*(p.detach().reshape(-1) for p in self.masters), version])
        for w, c in ready:
            self._waiting.remove((w, c))
            if w == self.rank:
                self.local.put(reply)
            else:
                self._outgoing.append((w, reply))


class AsyncPsExecutor(PsExecutor):
    """A worker of an asynchronous parameter server (and the server of its hosted shards)."""

    def __init__(
        self,
        *,
        hosts: dict[int, list[nn.Parameter]],
        rank: int,
        groups: tuple[Any, Any],
        server: AsyncServer | None,
        worker: bool = True,
        **kw: Any,
    ) -> None:
        super().__init__(hosts=hosts, rank=rank, group=None, **kw)
        self.up, self.down = groups
        self.server = server
        self.worker = worker
        """False on a server-only rank: it pushes nothing and says no goodbye."""
        self.iteration = 0
        self.pulled: list[dict[int, int]] = [dict.fromkeys(hosts, 0)]
        """Per iteration, the version (updates applied) of each host's weights it ran on."""
        self._sends: list[Any] = []

    def step(self, x: torch.Tensor | None, y: torch.Tensor | None) -> float | None:
        loss = super().step(x, y)
        self.iteration += 1
        return loss

    def _send(self, host: int, flat: torch.Tensor) -> None:
        if host == self.rank:
            assert self.server is not None
            self.server.deliver(self.rank, flat)
        else:
            self._sends.append(dist.isend(flat, host, group=self.up, tag=PUSH_TAG))

    def _push(self) -> None:
        tag = torch.tensor([float(self.iteration)])
        for host, ps in self.hosts.items():
            grads = [
                (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in ps
            ]
            self._send(host, torch.cat([*grads, tag]))

    def _pull(self) -> None:
        # The pushes' sends first: a host answers a pull only after it received the push, so
        # this waits for nothing the pull would not, and their flat copies are gone before
        # the pull's buffers are made (waited after the pulls, a worker held both: vgg11's
        # second worker, whose remote host serves nearly the whole model, +33% at its peak).
        while self._sends:  # no reference to a waited work left (it holds its tensor)
            self._sends.pop().wait()
        versions: dict[int, int] = {}
        for host, ps in self.hosts.items():
            if host == self.rank:
                assert self.server is not None
                flat = self.server.local.get()
            else:
                flat = torch.empty(sum(p.numel() for p in ps) + 1)
                dist.recv(flat, host, group=self.down, tag=PULL_TAG)
            versions[host] = int(flat[-1])
            offset = 0
            with torch.no_grad():
                for p in ps:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
            del flat  # one host's buffer at a time
        self.pulled.append(versions)

    def close(self) -> dict[str, Any]:
        """Say goodbye to every server (a worker), wait for this rank's; the logs of the run."""
        for host, ps in self.hosts.items() if self.worker else ():
            size = sum(p.numel() for p in ps)
            self._send(host, torch.cat([torch.zeros(size), torch.tensor([BYE])]))
        for w in self._sends:
            w.wait()
        applied = []
        if self.server is not None:
            self.server.join()
            applied = self.server.applied
        return {"ps_pulled": self.pulled[:-1], "ps_applied": applied}
