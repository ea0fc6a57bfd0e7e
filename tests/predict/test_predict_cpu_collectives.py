"""On CPU ranks an overlapped gloo allreduce takes the rank's cores: the backward parts after
each bucket grow by the overlapped part of its allreduce (hand-counted), GPUs do not."""

from __future__ import annotations

import pytest

from hetplan.predict.price import CPU_COLLECTIVE_CORE_SHARE, cpu_collective_steal


def test_each_bucket_slows_the_backward_that_remains() -> None:
    assert CPU_COLLECTIVE_CORE_SHARE == 1.0
    # parts 10, 20, 30 ms; bucket 0 (ready after part 0) takes 5 ms: all of it overlaps part 1;
    # bucket 1 takes 50 ms but only 30 ms of backward remain; bucket 2 overlaps nothing.
    got = cpu_collective_steal((0.010, 0.020, 0.030), (0.005, 0.050, 0.007))
    assert got == pytest.approx((0.010, 0.025, 0.060))


def test_no_buckets_no_change() -> None:
    assert cpu_collective_steal((0.01,), ()) == (0.01,)
