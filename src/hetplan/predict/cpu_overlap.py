"""A CPU rank's backward and its gradient all-reduces, sharing the rank's core.

gloo runs an all-reduce on the rank's own cores (copies, the reduction, the loopback or TCP
stack), so on a CPU rank the bucket all-reduces that data parallelism overlaps with the
backward are not free: the two take turns on the core. Linux's scheduler (CFS) gives two
runnable threads on one core equal shares, so while both run each progresses at
:data:`CPU_COLLECTIVE_CORE_SHARE` of its speed alone; either runs at full speed while the
other is idle (processor sharing). The work is conserved: compute and all-reduces together
end no earlier than their sum, and, unlike a model that only delays the backward, a bucket
whose all-reduce shares the core also ends later, which delays the buckets queued behind it
and the optimizer step.

:func:`shared_core` plays one rank's backward parts and buckets through that rule. Bucket
``k`` is ready when part ``k`` ends and the all-reduces run one at a time in order, as DDP's
reducer issues them and the schedule generators chain them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Share of a core that each of a CPU rank's compute and gloo's all-reduce get while both run
# (dimensionless). 1/2: CFS's fair share of two runnable threads. Measured on the 2-core
# machine (docs/benchmarks.md, "CPU collectives"): vgg11/cifar10's backward of 8 samples
# 45-54 ms alone, 72-79 ms while its 37 MB of gradients (26 ms of all-reduce alone,
# benchmarks/bench_gloo_allreduce.py on local-cpu) are all-reduced during it: the backward
# grew by the all-reduce's whole time, as equal shares of one core give when the backward is
# the longer of the two.
CPU_COLLECTIVE_CORE_SHARE = 0.5

_EPS = 1e-15  # seconds: work below this is done (float residue of the event loop)


@dataclass(frozen=True)
class SharedCore:
    """One rank's backward parts and all-reduces, played on a core they share."""

    parts: tuple[float, ...]
    """Each backward part's time, end to end (the parts run back to back)."""
    allreduce_s: tuple[float, ...]
    """Each bucket's all-reduce time from its start (its part's end, or the previous
    bucket's end) to its end."""


def shared_core(parts: Sequence[float], allreduce_s: Sequence[float]) -> SharedCore:
    """Backward ``parts`` (seconds alone, back to back) with bucket ``k``'s all-reduce of
    ``allreduce_s[k]`` seconds alone ready after part ``k``, both on one core (module
    docstring). Buckets past the last part are ready at its end."""
    comp = list(parts)
    comm = list(allreduce_s)
    part_end = [0.0] * len(comp)
    start = [0.0] * len(comm)
    end = [0.0] * len(comm)
    t, i, j = 0.0, 0, 0  # clock, running part, next bucket
    running = False  # bucket j's all-reduce has started
    while i < len(comp) or j < len(comm):
        if not running and j < len(comm) and (j < i or i >= len(comp)):  # bucket j ready
            running, start[j] = True, t
        busy_c, busy_a = i < len(comp), running
        if not busy_c and not busy_a:
            break  # a bucket waits for a part that does not exist: cannot happen
        rate = CPU_COLLECTIVE_CORE_SHARE if busy_c and busy_a else 1.0
        dt = min(
            comp[i] / rate if busy_c else float("inf"),
            comm[j] / rate if busy_a else float("inf"),
        )
        t += dt
        if busy_c:
            comp[i] -= dt * rate
            if comp[i] <= _EPS:
                part_end[i], i = t, i + 1
        if busy_a:
            comm[j] -= dt * rate
            if comm[j] <= _EPS:
                end[j], j, running = t, j + 1, False
    starts = [0.0, *part_end[:-1]]
    return SharedCore(
        parts=tuple(e - s for s, e in zip(starts, part_end, strict=True)),
        allreduce_s=tuple(e - s for s, e in zip(start, end, strict=True)),
    )
