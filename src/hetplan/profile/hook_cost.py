"""What ``hetplan profile``'s hooks add to a GPU profile's layer windows, taken back out.

The hooks (:mod:`hetplan.profile.hooks`) read the allocator's statistics and record events at
every layer window's edge; in backward those reads fall inside the windows, and the device
waits through them whenever its queue has drained (:mod:`hetplan.cost.learned`). A training
step has no hooks, so a profile's window prices a layer at its measured time less the hooks'
cost of that pass: the device type's learned ``hook_s`` where the store can fit one (profiles
of two or more models on it), else :data:`DEFAULT_HOOK_S`. On the H100 of ``shared/gpu-truth``
this brings dp's whole step from the model's own profile to within -11%..+1% of ``hetplan
train``'s three runs, from +10%..+15% with the hooks left in (``benchmarks/bench_transfer.py``).

Profiles taken on a CPU keep their windows: there the hooks read a host clock and no
allocator, a few microseconds against layers of milliseconds. Write-backs and imports had no
hooks.
"""

from __future__ import annotations

from typing import Protocol

from hetplan.profile.provenance import PROFILED, source_of
from hetplan.profile.types import Profile

CUDA = "cuda"
"""The torch device kind whose profiles are timed by events and an allocator probe."""
DEFAULT_HOOK_S = (50e-6, 460e-6)
"""Seconds per layer window (forward, backward) the hooks add on a GPU without a fit of its
own: the learned fit of the H100 profiles in ``shared/gpu-truth`` (bf16 50 / 457 us, fp32
45 / 456 us; 2026-11-29, ``benchmarks/bench_transfer.py``). A host-side cost: it follows the
profiling machine's CPU more than its GPU."""
MIN_NET_SHARE = 0.1
"""A window is never priced below this share of its measured time (dimensionless): where the
hooks' estimate exceeds a tiny layer's window, noise must not make the layer free."""


class HookCosts(Protocol):
    """Learned hook costs by device type (:class:`~hetplan.cost.learned_compute.LearnedCompute`)."""

    def hook_s(self, device_type: str) -> tuple[float, float] | None:
        """Per pass, what the hooks add to each window; None without a fit of the type."""
        ...


def profile_hooks(profile: Profile, costs: HookCosts | None) -> tuple[float, float] | None:
    """What to take out of each of ``profile``'s (forward, backward) windows: None unless
    ``hetplan profile`` timed it on a CUDA device (module doc)."""
    if source_of(profile) != PROFILED or not profile.device.startswith(CUDA):
        return None
    learned = costs.hook_s(profile.device_type) if costs is not None else None
    return learned if learned is not None else DEFAULT_HOOK_S


def net_of_hooks(window_s: float, hook_s: float) -> float:
    """A window's time with the hooks' cost taken out (:data:`MIN_NET_SHARE` at least)."""
    return max(window_s - hook_s, MIN_NET_SHARE * window_s)
