"""A CPU rank's bucket flattening and write-back, as the runtime does them, against their price.

:class:`hetplan.run.execute.gradsync.BucketSync` concatenates each DDP bucket's gradients into
a new flat tensor before its all-reduce and copies the sums back before the optimizer step.
This times both for a zoo model's gradients (its buckets as the predictor forms them, 25 MB
cap), one process pinned to one core with one thread, and prints them beside what
:mod:`hetplan.cost.bucket_cpu` prices.

    .venv/bin/python benchmarks/bench_bucket_copies.py [MODEL ...] [--core N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from hetplan.cost.bucket_cpu import flattened_parts, writeback_s
from hetplan.cost.comm_buckets import ddp_bucket_members, first_bucket
from hetplan.graph import resolve_model
from hetplan.units import MiB

CAP_BYTES = 25 * MiB  # the plans' default bucket_mb
WARMUP, REPEATS = 5, 20


def _buckets(name: str) -> list[list[torch.Tensor]]:
    """Gradient-shaped tensors of ``name``'s parameters, grouped into its DDP buckets."""
    built = resolve_model(name, "cifar10" if name in ("vgg11", "resnet-tiny") else None)
    layers = [ps for ps in (list(c.parameters()) for c in built.factory().children()) if ps]
    sizes = [[p.numel() * p.element_size() for p in ps] for ps in layers]
    grads = [[torch.randn_like(p) for p in ps] for ps in layers]
    members = ddp_bucket_members(sizes, CAP_BYTES, first_bucket(CAP_BYTES))
    return [[grads[layer][i] for layer, i in m] for m in members]


def _timed(buckets: list[list[torch.Tensor]]) -> tuple[float, float]:
    """Median seconds of the flattening and of the write-back of every bucket."""
    cats, backs = [], []
    for rep in range(WARMUP + REPEATS):
        t0 = time.perf_counter()
        flats = [torch.cat([g.reshape(-1) for g in bucket]) for bucket in buckets]
        t1 = time.perf_counter()
        for bucket, flat in zip(buckets, flats, strict=True):
            offset = 0
            for g in bucket:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
        t2 = time.perf_counter()
        del flats
        if rep >= WARMUP:
            cats.append(t1 - t0)
            backs.append(t2 - t1)
    return statistics.median(cats), statistics.median(backs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["vgg11", "gpt-tiny", "resnet-tiny"])
    parser.add_argument("--core", type=int, default=0)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.core})
    torch.set_num_threads(1)
    for name in args.models:
        buckets = _buckets(name)
        sizes = [float(sum(g.nbytes for g in b)) for b in buckets]
        cat, back = _timed(buckets)
        priced_cat = sum(flattened_parts([0.0] * len(sizes), sizes, 1.0))
        print(
            f"{name}: {sum(sizes) / 1e6:.1f} MB in {len(sizes)} buckets; flatten "
            f"{cat * 1e3:.2f} ms measured, {priced_cat * 1e3:.2f} priced; write-back "
            f"{back * 1e3:.2f} ms measured, {writeback_s(sizes, 1.0) * 1e3:.2f} priced"
        )


if __name__ == "__main__":
    main()
