"""What tensor parallelism's DTensor modules cost on CPU ranks beyond their compute and
all-reduces: per MLP unit (a ``ColwiseParallel`` up projection, GELU, a ``RowwiseParallel`` down
projection, as ``hetplan.run.setup.tensor_parallel`` lays a block's MLP out), forward and
backward of ``--units`` units through ``parallelize_module``, against the same rank's work by
hand: plain linears of the local width and one ``all_reduce`` of the output forward and of the
input gradient backward (Megatron's g and f). What is left is DTensor's dispatch.

Two gloo ranks on the cores given (``0,0``: core-mates, as ``local-cpu-4on2`` places a TP
pair; ``0,1``: a core each), one thread each; the slowest rank's median of ``--steps`` steps.

    .venv/bin/python benchmarks/bench_tp_dispatch.py --cores 0,1
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import torch
import torch.distributed as dist
from gloo_ranks import free_port, init_rank, median_step, report_and_leave
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)


class _AllReduce(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _Identity(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        out = grad.clone()
        dist.all_reduce(out)
        return out


class _Mlp(nn.Module):
    def __init__(self, width: int, hidden: int, by_hand: bool) -> None:
        super().__init__()
        self.up, self.down, self.by_hand = (
            nn.Linear(width, hidden),
            nn.Linear(hidden, width),
            by_hand,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.by_hand:
            x = _Identity.apply(x)
        y = self.down(torch.nn.functional.gelu(self.up(x)))
        return _AllReduce.apply(y) if self.by_hand else y


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], payload: Any) -> None:
    warnings.filterwarnings("ignore")
    init_rank(rank, world, port, cpus)
    units, width, tokens, steps, out = payload
    torch.manual_seed(0)
    x = torch.randn(tokens, width, requires_grad=True)
    mesh = init_device_mesh("cpu", (world,))
    tp = nn.Sequential(*[_Mlp(width, 4 * width, by_hand=False) for _ in range(units)])
    for unit in tp:
        parallelize_module(unit, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    by_hand = nn.Sequential(*[_Mlp(width, 4 * width // world, by_hand=True) for _ in range(units)])
    result = {
        name: median_step(lambda m=model: m(x).sum().backward(), steps)
        for name, model in (("tp", tp), ("by_hand", by_hand))
    }
    report_and_leave(result, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", default="0,1", help="the two ranks' cores, e.g. 0,0 or 0,1")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    cores = [int(c) for c in args.cores.split(",")]
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    payload = (args.units, args.width, args.tokens, args.steps, queue)
    torch.multiprocessing.start_processes(
        _rank,
        args=(len(cores), free_port(), [[c] for c in cores], payload),
        nprocs=len(cores),
        start_method="spawn",
    )
    ranks = queue.get()
    slow = {k: max(r[k] for r in ranks) for k in ranks[0]}
    extra = (slow["tp"] - slow["by_hand"]) / args.units
    print(
        f"cores {cores}, {args.units} MLP units {args.width}->{4 * args.width}->{args.width}, "
        f"{args.tokens} tokens: step through DTensor {1e3 * slow['tp']:.2f} ms, by hand "
        f"{1e3 * slow['by_hand']:.2f} ms: DTensor adds {1e3 * extra:.3f} ms per unit "
        "(forward and backward)"
    )


if __name__ == "__main__":
    main()
