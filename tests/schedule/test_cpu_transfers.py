"""A CPU stage copies its own messages: a transfer to or from it holds its compute stream
(``StageWork.on_cores``), which the simulator serialises with its forwards and backwards."""

from __future__ import annotations

import pytest

from hetplan.schedule.generators import synchronous
from hetplan.schedule.types import compute_res
from hetplan.schedule.work import CutWork, PipelineWork, StageWork
from hetplan.simulate import simulate

FWD, BWD, CUT = 1.0, 2.0, 0.5  # seconds per micro-batch


def two_stages(on_cores: bool) -> PipelineWork:
    stages = tuple(
        StageWork(devices=(f"d{i}",), fwd_s=FWD, bwd_s=BWD, on_cores=on_cores) for i in range(2)
    )
    return PipelineWork(stages=stages, cuts=(CutWork(fwd_s=CUT, bwd_s=CUT),), batch=2)


def test_gpipe_of_two_gpu_stages_overlaps_its_transfers() -> None:
    # By hand: stage 1's forwards at 1.5 and 2.5, backwards 3.5-5.5 and 5.5-7.5; the
    # gradients arrive at 6.0 and 8.0; stage 0's backwards 6-8 and 8-10.
    timeline = simulate(synchronous("gpipe", [two_stages(False)], 2, order="gpipe"))
    assert timeline.iteration_time_s == pytest.approx(10.0)


def test_gpipe_of_two_cpu_stages_holds_both_cores_per_transfer() -> None:
    # By hand: F0(0) 0-1, send 1-1.5 (both cores), F0(1) and F1(0) 1.5-2.5, send 2.5-3,
    # F1(1) 3-4, B1(0) 4-6, send 6-6.5, B1(1) and B0(0) 6.5-8.5, send 8.5-9, B0(1) 9-11.
    schedule = synchronous("gpipe", [two_stages(True)], 2, order="gpipe")
    sends = [a for a in schedule.actions if a.kind == "send"]
    assert all({compute_res("d0"), compute_res("d1")} <= set(a.resources) for a in sends)
    timeline = simulate(schedule)
    assert timeline.iteration_time_s == pytest.approx(11.0)
    starts = sorted((s.start, s.kind, s.device) for s in timeline.spans() if s.kind == "send")
    assert [t for t, _, _ in starts] == pytest.approx([1.0, 2.5, 6.0, 8.5])
