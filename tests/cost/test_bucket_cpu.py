"""A CPU rank's bucket flattening and write-back, by hand."""

from __future__ import annotations

import pytest

from hetplan.cost.bucket_cpu import flattened_parts, writeback_s
from hetplan.cost.ps_cpu import COPY_BANDWIDTH, FRESH_BANDWIDTH, MMAP_THRESHOLD_BYTES


def test_each_bucket_is_flattened_in_the_part_it_ends() -> None:
    # Two buckets of 1 MB (heap, copy bandwidth) and 40 MB (past glibc's 32 MiB mmap
    # threshold: fresh pages) after parts 0 and 1, on a core at half speed; part 2 (no
    # bucket) unchanged.
    assert MMAP_THRESHOLD_BYTES < 40e6
    got = flattened_parts((0.010, 0.020, 0.005), (1e6, 40e6), 0.5)
    assert got == pytest.approx(
        (0.010 + 1e6 / COPY_BANDWIDTH / 0.5, 0.020 + 40e6 / FRESH_BANDWIDTH / 0.5, 0.005)
    )


def test_every_bucket_is_copied_back() -> None:
    assert writeback_s((1e6, 40e6), 0.5) == pytest.approx(41e6 / COPY_BANDWIDTH / 0.5)
    assert writeback_s((), 1.0) == 0.0
