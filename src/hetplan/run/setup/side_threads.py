"""Threads of a rank's process that hold tensors beside the measured one, for the counter.

:class:`hetplan.run.meters.memcount.TensorBytesCounter` sees operators through a
``TorchDispatchMode``, and a dispatch mode is thread-local: entered on the thread that runs the
step, it misses what other threads of the process allocate. The asynchronous parameter server
(:mod:`hetplan.run.execute.ps_async`) runs its receiver and its server as Python threads inside
the worker's process; they hold the server's master copies, their gradients, the optimizer's
state and the pushes and replies in flight, and they allocate while the worker steps. Uncounted,
a vgg11 host rank measured 110.9 MB against the 184.6 MB predicted (-39.9%, the quick suite of
2026-11-28, docs/benchmarks.md).

A :class:`SideThreads` is such a group of threads, registered while it runs:

- ``held()`` lists the tensors its threads hold between their units of work; a counter entered
  while they run takes them into its baseline;
- ``steady()`` lists those it holds through every step once training runs (the optimizer's
  state, the gradients of its master copies), which a fresh run's first step makes inside the
  counted step: :func:`steady_tensors` hands them to ``peak_held_from_start``;
- each unit of work (a push applied and answered, a receive buffer made) runs in
  ``with side.unit():``, which counts the unit's operators on its own thread under the active
  counter, if any.

A unit and a counter's entry exclude each other (the group's lock): a counter's baseline is
taken between units, so a tensor a unit makes is either in ``held()`` at the entry or counted
as the unit makes it. A unit must therefore not block on anything that needs the measured
thread (the server's ``dist.send`` runs outside its unit); a counter entered while a unit runs
waits for its end.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import torch

__all__ = ["SideThreads", "steady_tensors"]


class _Counting(Protocol):
    """What a counter offers the side threads (``TensorBytesCounter``)."""

    def thread_mode(self) -> contextlib.AbstractContextManager[None]: ...


Tensors = Callable[[], Iterable[torch.Tensor]]

_registry: weakref.WeakSet[SideThreads] = weakref.WeakSet()
_active: list[_Counting] = []
"""Counters entered in this process, the innermost last; guarded by ``_state``."""
_state = threading.Lock()


class SideThreads:
    """A group of threads of this process holding tensors (see the module's documentation).

    Registered from construction until :meth:`close`."""

    def __init__(self, *, held: Tensors, steady: Tensors = tuple) -> None:
        self._held = held
        self._steady = steady
        self._lock = threading.Lock()
        with _state:
            _registry.add(self)

    def close(self) -> None:
        """The threads are done: no counter reads them any more."""
        with _state:
            _registry.discard(self)

    @contextlib.contextmanager
    def unit(self) -> Iterator[None]:
        """One unit of work on the calling (side) thread, counted by the active counter."""
        with self._lock:
            with _state:
                counter = _active[-1] if _active else None
            if counter is None:
                yield
            else:
                with counter.thread_mode():
                    yield


def pause() -> list[tuple[SideThreads, list[torch.Tensor]]]:
    """Wait for every registered group to be between units and hold them there; each with
    the tensors it holds. Follow with :func:`resume`."""
    with _state:
        sides = list(_registry)
    paused: list[tuple[SideThreads, list[torch.Tensor]]] = []
    try:
        for side in sides:
            side._lock.acquire()
            paused.append((side, []))
            paused[-1][1].extend(t for t in side._held() if isinstance(t, torch.Tensor))
    except BaseException:
        resume(paused, None)
        raise
    return paused


def resume(paused: list[tuple[SideThreads, list[torch.Tensor]]], counter: _Counting | None) -> None:
    """Make ``counter`` (if any) the one the side threads' next units count under, and let
    the groups :func:`pause` held go on."""
    if counter is not None:
        with _state:
            _active.append(counter)
    for side, _ in paused:
        side._lock.release()


def deactivate(counter: _Counting) -> None:
    """``counter`` is closing: units that start from now on are not counted by it."""
    with _state:
        if counter in _active:
            _active.remove(counter)


def steady_tensors() -> list[torch.Tensor]:
    """The tensors every registered group holds through every step (``steady``), each read
    between its group's units."""
    with _state:
        sides = list(_registry)
    out: list[torch.Tensor] = []
    for side in sides:
        with side._lock:
            out += [t for t in side._steady() if isinstance(t, torch.Tensor)]
    return out
