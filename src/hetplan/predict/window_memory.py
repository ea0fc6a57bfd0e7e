"""A windowed plan's (asynchronous PipeDream, WSP) held state per rank, from the schedule the
runtime runs (:mod:`hetplan.schedule.window_state`): gradient sets, wave buckets and stashed
weight copies at the rank's peak, in place of one set of each."""

from __future__ import annotations

from hetplan.cost.memory import MemoryBreakdown, tp_grad_tensor_bytes
from hetplan.graph.types import ModelGraph
from hetplan.planspec.plan import Plan
from hetplan.schedule.plan_schedule import execution_schedule
from hetplan.schedule.window_state import WindowState, window_state

# Iterations of the window walked: enough for the steady state of a wave all-reduce with
# staleness ``D`` to show (an iteration's gradients held while the next ``D + 1`` run).
WINDOW_ITERATIONS_BEYOND_STALENESS = 3


class WindowStates:
    """Each device's walked state under ``plan`` (``ranges``: the layers of each stage)."""

    def __init__(self, plan: Plan, graph: ModelGraph, ranges: list[tuple[int, int]]) -> None:
        tensors = [
            [list(t) for t in tp_grad_tensor_bytes(graph.layers[lo : hi + 1], graph.dtype, plan.tp)]
            for lo, hi in ranges
        ]
        iterations = plan.staleness + WINDOW_ITERATIONS_BEYOND_STALENESS
        # each rank's actions in order, as device_actions gives them (built once for all)
        self._per_device = execution_schedule(plan, tensors, iterations).per_device()

    def held(self, device: str, mem: MemoryBreakdown) -> MemoryBreakdown:
        """``mem`` (``device``'s breakdown with one gradient set and no stashed copy) with
        the walked state: the gradients ``gradient_sets`` times, the wave buckets walked,
        ``weight_copies`` stashed copies of the weights, at the larger of the peak during a
        backward (with ``mem``'s backward workspace) and the peak outside one (without)."""
        actions = [a for _, a in self._per_device.get(device, [])]
        peaks = window_state(actions, mem.grads, mem.weights)
        during = with_window_state(mem, peaks.in_backward)
        outside = with_window_state(mem, peaks.outside).with_terms(backward_workspace=0.0)
        return during if during.total >= outside.total else outside


def with_window_state(mem: MemoryBreakdown, state: WindowState) -> MemoryBreakdown:
    """``mem`` with ``state``'s gradient sets, bucket bytes and weight copies."""
    return mem.with_terms(
        grads=mem.grads * state.gradient_sets,
        comm_buffers=state.bucket_bytes,
        stashed_weights=mem.weights * state.weight_copies,
    )
