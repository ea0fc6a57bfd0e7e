"""Assemble a :class:`Schedule` from actions named by keys.

Generators add actions resource by resource in the order each resource must run them, and name
dependencies by key (an action may depend on one added later). :meth:`ScheduleBuilder.build`
resolves the keys and orders all actions topologically over both the dependencies and the
per-resource order, so that the simulator can run them in one pass. A cycle means the
per-resource orders contradict the dependencies (a deadlocking schedule): ``ValueError``.
"""

from __future__ import annotations

import gc
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from hetplan.schedule.types import Action, RateMark, Schedule


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (re-entrant).

    Schedules create tens of thousands of small containers and no reference cycles; the
    generational collections their allocations trigger would otherwise take about a third
    of the time of building and simulating a large schedule.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class ScheduleBuilder:
    """Collects actions; :meth:`build` turns them into a :class:`Schedule`."""

    def __init__(self) -> None:
        self._actions: list[Action] = []
        self._dep_keys: list[tuple[Hashable, ...]] = []
        self._index: dict[Hashable, int] = {}
        self._held: dict[int, tuple[str, ...]] = {}

    def add(
        self,
        key: Hashable,
        deps: Iterable[Hashable] = (),
        *,
        also_holds: tuple[str, ...] = (),
        **fields: Any,
    ) -> Hashable:
        """Add one action (``fields`` are :class:`Action` fields except ``deps``); return key.

        ``also_holds``: resources the action occupies too but whose order it takes from the
        others (a CPU receiver's compute stream, held by the send that fills its buffer: the
        receiver's actions are added with its own stage, after or before the sender's); they
        join ``resources`` in the schedule and the simulator serialises them in its order."""
        return self.add_action(key, deps, Action(**fields), also_holds)

    def add_action(
        self,
        key: Hashable,
        deps: Iterable[Hashable],
        action: Action,
        also_holds: tuple[str, ...] = (),
    ) -> Hashable:
        """:meth:`add` with the action already made (its ``deps`` are set by :meth:`build`):
        the generators' hot loops call this, a keyword call per action costs twice as much."""
        n = len(self._actions)
        if self._index.setdefault(key, n) != n:  # one hash of the key, not two
            raise ValueError(f"duplicate schedule action {key!r}")
        if also_holds:
            self._held[n] = also_holds
        self._actions.append(action)
        self._dep_keys.append(tuple(deps))
        return key

    def __contains__(self, key: Hashable) -> bool:
        return key in self._index

    def build(
        self,
        *,
        strategy: str,
        devices: Iterable[str],
        samples_per_iteration: int,
        marks: Iterable[tuple[Hashable | None, Hashable, float]] = (),
        notes: Iterable[str] = (),
    ) -> Schedule:
        """Resolve keys, sort topologically, and freeze. ``marks``: (start key or None, end
        key, samples)."""
        with paused_gc():
            return self._build(strategy, devices, samples_per_iteration, marks, notes)

    def _build(
        self,
        strategy: str,
        devices: Iterable[str],
        samples_per_iteration: int,
        marks: Iterable[tuple[Hashable | None, Hashable, float]],
        notes: Iterable[str],
    ) -> Schedule:
        index = self._index
        try:
            deps = [[index[k] for k in keys] for keys in self._dep_keys]
        except KeyError:
            deps = [[self._resolve(k, i) for k in keys] for i, keys in enumerate(self._dep_keys)]
        res_id: dict[str, int] = {}
        ids_of: dict[tuple[str, ...], tuple[int, ...]] = {}  # generators reuse resource tuples
        res: list[tuple[int, ...]] = []
        acts = self._actions
        for a in acts:
            names = a.resources
            ids = ids_of.get(names)
            if ids is None:
                ids = ids_of[names] = tuple(res_id.setdefault(r, len(res_id)) for r in names)
            res.append(ids)
        order = self._topological(deps, res, len(res_id))
        for i, held in self._held.items():  # after the order: they take no part in it
            a = acts[i]
            extra = tuple(r for r in held if r not in a.resources)
            a.resources = a.resources + extra
            res[i] = res[i] + tuple(res_id.setdefault(r, len(res_id)) for r in extra)
        new_id = [0] * len(order)
        for pos, old in enumerate(order):
            new_id[old] = pos
        for a, ds in zip(acts, deps, strict=True):
            a.deps = tuple([new_id[d] for d in ds])
        actions = tuple([acts[old] for old in order])
        action_res = tuple([res[old] for old in order])
        rate_marks = tuple(
            RateMark(
                start=-1 if a is None else new_id[self._index[a]],
                end=new_id[self._index[b]],
                samples=s,
            )
            for a, b, s in marks
        )
        return Schedule(
            strategy=strategy,
            actions=actions,
            devices=tuple(devices),
            samples_per_iteration=samples_per_iteration,
            resource_names=tuple(res_id),
            action_resources=action_res,
            marks=rate_marks,
            notes=tuple(notes),
        )

    def _resolve(self, key: Hashable, user: int) -> int:
        try:
            return self._index[key]
        except KeyError:
            raise ValueError(f"schedule action {user} depends on unknown action {key!r}") from None

    def _topological(
        self, deps: list[list[int]], res: list[tuple[int, ...]], nres: int
    ) -> list[int]:
        """Kahn's algorithm over dependency edges plus each resource's chain (add order)."""
        n = len(deps)
        succ: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        last = [-1] * nres
        for i in range(n):
            ds = deps[i]
            for d in ds:
                succ[d].append(i)
            count = len(ds)
            for r in res[i]:
                prev = last[r]
                if prev >= 0:
                    succ[prev].append(i)
                    count += 1
                last[r] = i
            indeg[i] = count
        # FIFO: the order is its own queue (what is appended is popped in the same order).
        order = [i for i in range(n) if indeg[i] == 0]
        k = 0
        while k < len(order):
            for j in succ[order[k]]:
                left = indeg[j] - 1
                indeg[j] = left
                if left == 0:
                    order.append(j)
            k += 1
        if len(order) != n:
            stuck = [i for i in range(n) if indeg[i] > 0][:3]
            raise ValueError(
                "schedule deadlock: resource order contradicts dependencies at "
                + ", ".join(repr(self._key_of(i)) for i in stuck)
            )
        return order

    def _key_of(self, i: int) -> Hashable:
        for k, v in self._index.items():
            if v == i:
                return k
        return i
