"""The optimizer step of a sharded model (FSDP2's DTensor parameters) against the same step on
plain tensors: the host's extra seconds per parameter tensor that
``hetplan.predict.sharded.DTENSOR_STEP_S_PER_TENSOR`` prices.

``python benchmarks/bench_fsdp_optimizer.py [--models gpt-tiny,resnet-tiny] [--steps 20]``: one
process, one gloo rank, one thread; every layer wrapped by ``fully_shard`` as hetplan's runtime
wraps it, zero gradients, Adam (the optimizer whose state is largest).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from hetplan.run.setup.model import ZooSource


def step_s(model: nn.Module, steps: int) -> float:
    """Mean seconds of ``Adam.step`` over ``steps`` (after one untimed)."""
    opt = torch.optim.Adam(model.parameters())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    start = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - start) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default="gpt-tiny,resnet-tiny")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29633")
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.set_num_threads(1)
    for name in args.models.split(","):
        source = ZooSource(name=name)
        plain = source.build(0, "cpu")
        tensors = len(list(plain.parameters()))
        base = step_s(plain, args.steps)
        sharded = source.build(0, "cpu")
        for child in sharded.children():
            if any(True for _ in child.parameters()):
                fully_shard(child)
        fully_shard(sharded)
        dtensor = step_s(sharded, args.steps)
        extra = (dtensor - base) / tensors
        print(
            f"{name}: {tensors} tensors, plain {base * 1e3:.2f} ms, DTensor {dtensor * 1e3:.2f} ms,"
            f" {extra * 1e6:.0f} us more per tensor"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
