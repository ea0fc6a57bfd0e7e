"""The tensor-bytes counter across a process's threads: side threads registered with
``run/setup/side_threads.py`` (the asynchronous parameter server's receiver and server) count
into the measured peak. Expected values are the bytes of the uint8 tensors the tests make."""

from __future__ import annotations

import threading

import torch

from hetplan.run.meters.memcount import TensorBytesCounter, step_peak_bytes
from hetplan.run.setup import side_threads
from hetplan.run.setup.side_threads import SideThreads

MB = 1_000_000


def _bytes(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8)


def _in_thread(side: SideThreads, n: int, out: list[torch.Tensor]) -> threading.Thread:
    """A thread that makes ``n`` bytes in one unit of ``side`` and keeps them in ``out``."""

    def work() -> None:
        with side.unit():
            out.append(_bytes(n))

    return threading.Thread(target=work)


def test_a_side_threads_allocation_adds_to_the_peak() -> None:
    side = SideThreads(held=list)
    kept: list[torch.Tensor] = []
    try:
        with TensorBytesCounter() as counter:
            a = _bytes(1 * MB)
            t = _in_thread(side, 2 * MB, kept)
            t.start()
            t.join()
            assert counter.current_bytes == 3 * MB
            del a
            kept.clear()
            _bytes(0)  # an operator: the frees are accounted at the next one
            assert counter.current_bytes == 0
        assert counter.peak_bytes == 3 * MB
    finally:
        side.close()


def test_an_unregistered_thread_is_not_seen() -> None:
    """The limit the registry lifts: the dispatch mode is thread-local."""
    kept: list[torch.Tensor] = []

    def work() -> None:
        kept.append(_bytes(2 * MB))

    with TensorBytesCounter() as counter:
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert counter.peak_bytes == 0


def test_what_side_threads_hold_at_the_entry_is_baseline_and_only_while_registered() -> None:
    master = _bytes(4 * MB)
    side = SideThreads(held=lambda: [master, master[:10]])  # a view counts once
    with TensorBytesCounter([_bytes(1 * MB)]) as counter:
        pass
    assert counter.baseline_bytes == 5 * MB
    side.close()
    with TensorBytesCounter() as counter:
        pass
    assert counter.baseline_bytes == 0


def test_steady_state_a_side_thread_makes_counts_from_the_start() -> None:
    """A server's first push applied makes its masters' gradients (and Adam's state), which
    every later step holds throughout: 1 MB made and freed by the step, then 2 MB of such
    state: 2 MB as it ran, 3 MB held from the start."""
    state: list[torch.Tensor] = []
    side = SideThreads(held=lambda: list(state), steady=lambda: list(state))

    def step() -> None:
        a = _bytes(1 * MB)
        del a
        t = _in_thread(side, 2 * MB, state)
        t.start()
        t.join()

    try:
        assert step_peak_bytes(step, []) == 2 * MB
        state.clear()
        assert step_peak_bytes(step, [], held_from_start=side_threads.steady_tensors) == 3 * MB
    finally:
        side.close()


def test_a_unit_running_past_the_counters_exit_changes_nothing() -> None:
    side = SideThreads(held=list)
    entered, leave = threading.Event(), threading.Event()
    kept: list[torch.Tensor] = []

    def work() -> None:
        with side.unit():
            kept.append(_bytes(1 * MB))
            entered.set()
            leave.wait()
            kept.append(_bytes(5 * MB))  # after the counter closed

    try:
        with TensorBytesCounter() as counter:
            t = threading.Thread(target=work)
            t.start()
            entered.wait()
        leave.set()
        t.join()
        assert counter.peak_bytes == 1 * MB
    finally:
        side.close()
