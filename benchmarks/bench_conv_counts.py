"""Counted backward/forward FLOP ratio of convolutions (torch's counter, ours) against time.

Run: .venv/bin/python benchmarks/bench_conv_counts.py [--repeats N] [--threads T]

For a depthwise, a grouped and a dense 3x3 convolution (no bias, stride 1, 'same' padding) at
two sizes, prints a markdown table: the backward/forward FLOP ratio torch's ``FlopCounterMode``
counts, the one :mod:`hetplan.graph.conv_flops` counts (grad input + grad weight: 2), and the
measured backward/forward time ratio on this CPU with real tensors (median of ``--repeats``
timed samples of >= 20 ms each, forward and backward interleaved, after warm-up, and the
ratio of the fastest samples, less sensitive to other processes' load; forward
without autograd recording, backward =
``torch.autograd.grad`` of input and weight). A depthwise convolution is memory-bound, so its
time ratio need not be 2; what it shows is that it is nowhere near torch's count (1 + C).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from hetplan.graph.conv_flops import ConvArgs, conv_backward_flops, conv_forward_flops

BATCH = 8
"""Samples per call (a small training micro-batch)."""
WARMUP = 3
"""Untimed calls before timing (first-call allocation and oneDNN primitive creation)."""
DEFAULT_REPEATS = 21
"""Timed samples per measurement; the median is reported."""
DEFAULT_THREADS = 1
"""intra-op threads: on a shared machine a descheduled second OpenMP thread stalls every
call at its barrier for a scheduler time slice (samples of ~30 ms seen with 2 threads)."""
MIN_SAMPLE_S = 0.02
"""Seconds one timed sample lasts at least (several calls of a sub-millisecond convolution:
perf_counter and scheduler noise stay small beside it)."""
KERNEL = 3
"""Kernel size (3x3, the common depthwise and grouped case: MobileNet, ResNeXt)."""
MS_PER_S = 1e3
GFLOP = 1e9


@dataclass(frozen=True)
class Case:
    name: str
    channels: int
    """Input = output channels."""
    groups: int
    size: int
    """Height = width of the input."""


CASES = (
    Case("depthwise", 32, 32, 56),
    Case("depthwise", 144, 144, 28),
    Case("grouped g=4", 64, 4, 56),
    Case("grouped g=4", 128, 4, 28),
    Case("dense", 64, 1, 56),
    Case("dense", 128, 1, 28),
)


def calls_per_sample(fn: Callable[[], object]) -> int:
    """Calls per timed sample so that one sample lasts about MIN_SAMPLE_S (after warm-up)."""
    for _ in range(WARMUP):
        fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    return max(1, round(MIN_SAMPLE_S / once))


def sample_s(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def time_pair_s(
    fwd: Callable[[], object], bwd: Callable[[], object], repeats: int
) -> tuple[list[float], list[float]]:
    """Seconds per call of ``fwd`` and ``bwd``, one entry per sample, their samples
    interleaved so that load from other processes on the shared machine falls on both alike."""
    n_fwd, n_bwd = calls_per_sample(fwd), calls_per_sample(bwd)
    fwd_s, bwd_s = [], []
    for _ in range(repeats):
        fwd_s.append(sample_s(fwd, n_fwd))
        bwd_s.append(sample_s(bwd, n_bwd))
    return fwd_s, bwd_s


def torch_counts(conv: nn.Conv2d, x: torch.Tensor) -> tuple[int, int]:
    """Forward and backward FLOPs as torch's FlopCounterMode counts them."""
    with FlopCounterMode(display=False) as fwd:
        y = conv(x)
    with FlopCounterMode(display=False) as bwd:
        torch.autograd.grad(y, (x, conv.weight), torch.ones_like(y))
    return fwd.get_total_flops(), bwd.get_total_flops()


def our_counts(conv: nn.Conv2d, x: torch.Tensor, y_shape: torch.Size) -> tuple[int, int]:
    args = ConvArgs(stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    fwd = conv_forward_flops(x.shape, conv.weight.shape, args)
    bwd = conv_backward_flops(y_shape, x.shape, conv.weight.shape, args, (True, True, False))
    return fwd, bwd


def measure(case: Case, repeats: int) -> dict[str, float]:
    conv = nn.Conv2d(
        case.channels, case.channels, KERNEL, padding=1, groups=case.groups, bias=False
    )
    x = torch.randn(BATCH, case.channels, case.size, case.size, requires_grad=True)
    torch_fwd, torch_bwd = torch_counts(conv, x)
    y = conv(x)
    ours_fwd, ours_bwd = our_counts(conv, x, y.shape)
    grad = torch.ones_like(y)

    def forward() -> object:
        with torch.no_grad():
            return conv(x)

    def backward() -> object:
        return torch.autograd.grad(y, (x, conv.weight), grad, retain_graph=True)

    fwd_s, bwd_s = time_pair_s(forward, backward, repeats)
    fwd_med, bwd_med = statistics.median(fwd_s), statistics.median(bwd_s)
    return {
        "gflop": ours_fwd / GFLOP,
        "torch": torch_bwd / torch_fwd,
        "ours": ours_bwd / ours_fwd,
        "fwd_ms": fwd_med * MS_PER_S,
        "bwd_ms": bwd_med * MS_PER_S,
        "time": bwd_med / fwd_med,
        "time_min": min(bwd_s) / min(fwd_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {opts.threads} threads, batch {BATCH}, 3x3, fp32, CPU")
    print()
    print(
        "| conv | C, HxW | fwd GFLOP | counted bwd/fwd: torch | counted bwd/fwd: ours "
        "| fwd ms | bwd ms | measured bwd/fwd: median | measured bwd/fwd: min |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for case in CASES:
        r = measure(case, opts.repeats)
        print(
            f"| {case.name} | {case.channels}, {case.size}x{case.size} | {r['gflop']:.3f} "
            f"| {r['torch']:.1f} | {r['ours']:.1f} | {r['fwd_ms']:.2f} | {r['bwd_ms']:.2f} "
            f"| {r['time']:.2f} | {r['time_min']:.2f} |"
        )


if __name__ == "__main__":
    main()
