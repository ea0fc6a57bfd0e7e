"""The machine's speed over a suite run: one fixed probe, timed where the profiles are taken.

The development machine is shared: its single-core speed moved 1.75x between two profiles of
vgg11 a day apart (batch 16 step 295 ms on 2026-11-28, 169 ms on 2026-11-29) and by up to 1.8x
between rounds minutes apart. A prediction priced from a profile is a prediction for the
machine as it was when profiled. So the suite times a small convolution's forward and backward
(the zoo's main work) on the profiles' core, one thread, at its start and before every run,
and reports the error also against the prediction scaled by the probe's ratio
(:func:`hetplan.bench.stats.drift_errors`): a secondary figure that tells the model's error
from the machine's drift. The probe runs in the suite's own process while no rank runs.
"""

from __future__ import annotations

import statistics
import time

import torch

from hetplan.profile.timing import thread_scope

PROBE_CPUS = (0,)
"""The profiles' core (:data:`hetplan.bench.runner.PROFILE_CPUS`)."""
PROBE_REPEATS = 5
"""Timed repetitions; the probe is their median."""
PROBE_ITERATIONS = 16
"""Forward and backward passes per repetition (about 1-1.5 ms each on the development machine)."""


def probe_s() -> float:
    """Seconds of one forward and backward of a 3x3 convolution (batch 8, 32 -> 32 channels,
    16x16), one thread on :data:`PROBE_CPUS`: the median of :data:`PROBE_REPEATS` timings."""
    with thread_scope(1, PROBE_CPUS):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(32, 32, 3, padding=1)
        x = torch.randn(8, 32, 16, 16)

        def once() -> None:
            conv(x).sum().backward()

        for _ in range(PROBE_ITERATIONS):  # warm-up: the first passes run 1.5-2x slower
            once()
        times = []
        for _ in range(PROBE_REPEATS):
            start = time.perf_counter()
            for _ in range(PROBE_ITERATIONS):
                once()
            times.append((time.perf_counter() - start) / PROBE_ITERATIONS)
        return statistics.median(times)
