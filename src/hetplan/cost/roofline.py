"""The roofline: one kernel group's time from its FLOPs, bytes and launches.

A roofline takes the larger of compute and memory time, since on GPUs the two overlap within
a kernel (Williams, Waterman & Patterson 2009, "Roofline"), plus a fixed cost per launch.
"""

from __future__ import annotations


def roofline_time(
    flops: float,
    nbytes: float,
    kernels: float,
    *,
    peak_flops: float,
    memory_bandwidth: float,
    compute_efficiency: float,
    memory_efficiency: float,
    kernel_overhead_s: float,
) -> float:
    """``max(F / (peak * eff_c), B / (bw * eff_m)) + kernels * overhead`` in seconds."""
    compute = flops / (peak_flops * compute_efficiency)
    memory = nbytes / (memory_bandwidth * memory_efficiency)
    return max(compute, memory) + kernels * kernel_overhead_s
