"""A CPU rank's own work around its gradient all-reduces: flattening and writing back.

The runtime's :class:`hetplan.run.execute.gradsync.BucketSync` all-reduces each bucket as one
flat tensor: when the bucket's last gradient is accumulated, the backward thread itself
concatenates the bucket's gradients into a new tensor (``torch.cat``) and only then issues the
all-reduce; once all have ended, before the optimizer step, it copies each summed bucket back
into its gradients (``copy_``). On a GPU both are device kernels at memory bandwidth, a few
tens of microseconds for a whole model; on a CPU rank they take the rank's core at the
bandwidths of :mod:`hetplan.cost.ps_cpu` (a bucket, at most ``bucket_mb``, below glibc's mmap
threshold, is filled at the copy bandwidth). ``benchmarks/bench_bucket_copies.py`` times both
as the runtime does them (2-core machine, 2026-11-29, quiet, each core in turn): vgg11's
36.9 MB of gradients in 3 buckets flattened in 4.3-4.4 ms and written back in 4.5-4.6 ms
(priced 5.7 and 5.7 ms); gpt-tiny's 4.2 MB in 0.6 and 1.0-1.1 ms (priced 0.65 and 0.65).
Nothing of it was in the model before: vgg11's dp on two CPU ranks was priced 151 ms and
measured 165-208 ms (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from hetplan.cost.ps_cpu import copy_s, new_buffer_s


def flattened_parts(
    parts: Sequence[float], bucket_bytes: Sequence[float], speed: float
) -> tuple[float, ...]:
    """Backward ``parts`` (bucket ``k`` ready after part ``k``, :func:`hetplan.schedule.work.
    split_backward`) with each bucket's flattening into a new tensor added to its part, at a
    core of ``speed``: the backward thread does it before going on."""
    out = list(parts)
    for k, nbytes in enumerate(bucket_bytes[: len(out)]):
        out[k] += new_buffer_s(nbytes) / speed
    return tuple(out)


def writeback_s(bucket_bytes: Sequence[float], speed: float) -> float:
    """Seconds, at a core of ``speed``, to copy every summed bucket back into its gradients."""
    return sum(copy_s(nbytes) for nbytes in bucket_bytes) / speed
