"""One-process FSDP2 (gloo, world size 1): two 256x256 layers, each its own group, counted
over two steps with FSDP2's storage resizes followed or not. Run as a script by
``test_memcount_fsdp.py``; prints one JSON line."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

from hetplan.run.meters import fsdp_storage
from hetplan.run.meters.memcount import TensorBytesCounter
from hetplan.run.setup.sharding import fully_shard

WIDTH = 256


def main(store: str, follow: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(2)))
    mesh = init_device_mesh("cpu", (1,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if not follow:
        fsdp_storage._fsdp_param_module = lambda: None  # the counter as it was before
    x = torch.randn(4, WIDTH)
    steps = []
    for _ in range(2):
        for p in model.parameters():
            p.grad = None
        with TensorBytesCounter(iter([p.to_local() for p in model.parameters()])) as c:
            model(x).sum().backward()
        steps.append({"peak": c.peak_bytes, "end": c.current_bytes})
    dist.destroy_process_group()
    print(json.dumps(steps))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "follow")
