"""Asynchronous parameter server with bounded staleness (stale synchronous parallel).

Each host rank runs a server beside its worker: a receiver thread takes pushes from the other
workers (gloo, any source) and the local worker's go through a queue; a server thread applies
each push as soon as it arrives (its own optimizer over a master copy of the hosted tensors:
a push is one update, weighted by the worker's share of the global batch) and answers the
worker's pull with the new weights. With a bound ``s = plan.staleness > 0`` a worker's pull
after its iteration ``c`` is answered only once every worker has pushed iteration ``c - s``
(Ho et al. 2013, SSP): no worker runs more than ``s`` iterations ahead of the slowest. With
``s = 0`` the workers never wait for each other (the simulator's asynchronous schedule).

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
        self.local: queue.Queue[torch.Tensor] = queue.Queue()
        self.applied: list[tuple[int, int]] = []
        """(worker, iteration) of every push, in the order applied."""
        self.error: BaseException | None = None
        self._pushes = dict.fromkeys(workers, 0)
        self._done: set[int] = set()
        self._waiting: list[tuple[int, int]] = []
        self._size = sum(p.numel() for p in params) + 1
        self._threads = [
            threading.Thread(target=self._guard, args=(f,), daemon=True)
            for f in (self._receive, self._serve)
        ]
        for t in self._threads:
            t.start()

    def join(self) -> None:
        for t in self._threads:
            t.join()
        if self.error is not None:
            raise RuntimeError(f"parameter server on rank {self.rank}: {self.error}")

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as err:  # reported by join(), in the worker's thread
            self.error = err
            self.inbox.put((-1, torch.empty(0)))

    def _receive(self) -> None:
        """Pushes of the other workers, until each has said goodbye."""
        remote = [w for w in self.workers if w != self.rank]
        byes = 0
        while byes < len(remote):
            buf = torch.empty(self._size)
            src = dist.recv(buf, src=None, group=self.up, tag=PUSH_TAG)
            byes += int(buf[-1] == BYE)
            self.inbox.put((int(src), buf))

    def _serve(self) -> None:
        while len(self._done) < len(self.workers):
            src, flat = self.inbox.get()
            if src < 0:
                return  # the receiver failed
            if float(flat[-1]) == BYE:
                self._done.add(src)
            else:
                self._apply(src, int(flat[-1]), flat[:-1])
            self._answer()

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
        for w, c in ready:
            self._waiting.remove((w, c))
            reply = torch.cat([p.detach().reshape(-1) for p in self.masters])
            reply = torch.cat([reply, torch.tensor([float(len(self.applied))])])
            if w == self.rank:
                self.local.put(reply)
            else:
                dist.send(reply, w, group=self.down, tag=PULL_TAG)


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
            self.server.inbox.put((self.rank, flat))
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
        self.pulled.append(versions)
        for w in self._sends:
            w.wait()
        self._sends = []

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
