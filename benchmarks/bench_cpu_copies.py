"""A CPU rank's buffer copies: into memory it holds, and into a new buffer.

The parameter server's runtime and FSDP on CPU ranks build flat buffers of their gradients
and weights (:mod:`hetplan.cost.ps_cpu`). This times, on one pinned core with one thread, the
three ways they do it: ``torch.cat(..., out=held)`` (a copy into memory already held:
``COPY_BANDWIDTH``), ``torch.cat`` into a new tensor and ``clone`` (a new buffer: from glibc's
32 MiB mmap threshold up its pages are fresh, ``FRESH_BANDWIDTH``). With ``--busy`` another
process trains vgg11 on the other core meanwhile, as a rank's core-mate or neighbour does in
a run. Prints GB/s per size: the median over ``--reps``.

``python benchmarks/bench_cpu_copies.py [--mb 8,30,37,74] [--reps 15] [--busy]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

BUSY = """
import os, torch
from hetplan.graph.zoo import zoo_model
os.sched_setaffinity(0, {1}); torch.set_num_threads(1)
m = zoo_model("vgg11", "cifar10").factory(); x = torch.randn(8, 3, 32, 32)
while True:
    m(x).sum().backward()
"""


def _rate(nbytes: int, seconds: list[float]) -> float:
    return nbytes / statistics.median(seconds) / 1e9


def measure(mb: float, reps: int) -> tuple[float, float, float]:
    """(held copy, new by cat, new by clone) GB/s of ``mb`` megabytes (10^6 bytes)."""
    n = int(mb * 1e6 / 4) // 8 * 8
    parts = [torch.randn(n // 8) for _ in range(8)]
    held = torch.empty(n)
    new, into, clone = [], [], []
    for _ in range(reps):
        t = time.perf_counter()
        x = torch.cat(parts)
        new.append(time.perf_counter() - t)
        del x
        t = time.perf_counter()
        torch.cat(parts, out=held)
        into.append(time.perf_counter() - t)
        t = time.perf_counter()
        y = held.clone()
        clone.append(time.perf_counter() - t)
        del y
    return _rate(4 * n, into), _rate(4 * n, new), _rate(4 * n, clone)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", default="8,30,37,74")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--busy", action="store_true", help="train vgg11 on core 1 meanwhile")
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    torch.set_num_threads(1)
    busy = subprocess.Popen([sys.executable, "-c", BUSY]) if args.busy else None
    try:
        if busy is not None:
            time.sleep(3.0)  # its model built and training
        print(f"load average {os.getloadavg()[0]:.2f}; core 1 {'busy' if busy else 'idle'}")
        print("| MB | copy into held GB/s | new (cat) GB/s | new (clone) GB/s |")
        print("|---|---|---|---|")
        for mb in (float(x) for x in args.mb.split(",")):
            held, new, clone = measure(mb, args.reps)
            print(f"| {mb:g} | {held:.2f} | {new:.2f} | {clone:.2f} |")
    finally:
        if busy is not None:
            busy.kill()


if __name__ == "__main__":
    main()
