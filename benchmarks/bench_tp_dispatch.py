"""What tensor parallelism's DTensor modules cost on CPU ranks beyond their compute and
all-reduces, per parallelized linear, forward and backward: ``--units`` units through
``parallelize_module`` as ``hetplan.run.setup.tensor_parallel`` lays them out (``--shape mlp``:
a ``ColwiseParallel`` up projection, GELU, a ``RowwiseParallel`` down projection; ``attn``: q, k
and v projections colwise, their sum standing in for the attention, the output projection
rowwise), against the same rank's work by hand: plain linears of the local width and one
``all_reduce`` of the output forward and of the input gradient backward (Megatron's g and f).
What is left is DTensor's dispatch; it is divided by the unit's linears (2 or 4).

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


class _Attn(nn.Module):
    """An attention's four projections, the attention itself left out (it runs on local
    tensors between them)."""

    def __init__(self, width: int, local: int, by_hand: bool) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(width, local) for _ in range(3))
        self.o, self.by_hand = nn.Linear(local, width), by_hand

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.by_hand:
            x = _Identity.apply(x)
        y = self.o(self.q(x) + self.k(x) + self.v(x))
        return _AllReduce.apply(y) if self.by_hand else y


SHAPES = {  # unit, its styles, its parallelized linears
    "mlp": (lambda w, world, hand: _Mlp(w, 4 * w // world, hand), {"up": 0, "down": 1}, 2),
    "attn": (
        lambda w, world, hand: _Attn(w, w // world, hand),
        {"q": 0, "k": 0, "v": 0, "o": 1},
        4,
    ),
}


def _rank(rank: int, world: int, port: int, cpus: list[list[int]], payload: Any) -> None:
    warnings.filterwarnings("ignore")
    init_rank(rank, world, port, cpus)
    shape, units, width, tokens, steps, out = payload
    make, styles, _ = SHAPES[shape]
    torch.manual_seed(0)
    x = torch.randn(tokens, width, requires_grad=True)
    mesh = init_device_mesh("cpu", (world,))
    tp = nn.Sequential(*[make(width, 1, False) for _ in range(units)])
    for unit in tp:
        plan = {n: (ColwiseParallel() if r == 0 else RowwiseParallel()) for n, r in styles.items()}
        parallelize_module(unit, mesh, plan)
    by_hand = nn.Sequential(*[make(width, world, True) for _ in range(units)])
    result = {}
    for name, model in (("tp", tp), ("by_hand", by_hand)):
        result[name] = median_step(lambda m=model: m(x).sum().backward(), steps)
        result[name + "_fwd"] = median_step(lambda m=model: m(x).sum(), steps)
    report_and_leave(result, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", default="0,1", help="the two ranks' cores, e.g. 0,0 or 0,1")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="mlp")
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=15)
    args = ap.parse_args()
    cores = [int(c) for c in args.cores.split(",")]
    ctx = torch.multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    payload = (args.shape, args.units, args.width, args.tokens, args.steps, queue)
    torch.multiprocessing.start_processes(
        _rank,
        args=(len(cores), free_port(), [[c] for c in cores], payload),
        nprocs=len(cores),
        start_method="spawn",
    )
    ranks = queue.get()
    slow = {k: max(r[k] for r in ranks) for k in ranks[0]}
    linears = args.units * SHAPES[args.shape][2]
    fwd = (slow["tp_fwd"] - slow["by_hand_fwd"]) / linears
    both = (slow["tp"] - slow["by_hand"]) / linears
    print(
        f"cores {cores}, {args.units} {args.shape} units of width {args.width}, {args.tokens} "
        f"tokens: step through DTensor {1e3 * slow['tp']:.2f} ms (forward "
        f"{1e3 * slow['tp_fwd']:.2f}), by hand {1e3 * slow['by_hand']:.2f} ms (forward "
        f"{1e3 * slow['by_hand_fwd']:.2f}): DTensor adds per linear {1e6 * fwd:.0f} us forward, "
        f"{1e6 * (both - fwd):.0f} us backward"
    )


if __name__ == "__main__":
    main()
