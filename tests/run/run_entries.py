"""Rank entry functions for the launcher tests (imported by the ranks through PYTHONPATH)."""

from __future__ import annotations

import os
import signal
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.run.launch.spawn import RankContext
from hetplan.run.setup.model import MLPSource


def _record(ctx: RankContext, payload: dict[str, Any]) -> None:
    folder = Path(payload["pid_dir"])
    (folder / f"{ctx.rank}.pid").write_text(f"{os.getpid()} {os.getsid(0)}")


def allreduce(ctx: RankContext, payload: dict[str, Any]) -> tuple[int, float, list[int], int]:
    t = torch.tensor([ctx.rank + 1.0])
    dist.all_reduce(t)
    return ctx.rank, float(t), sorted(os.sched_getaffinity(0)), torch.get_num_threads()


def raise_on(ctx: RankContext, payload: dict[str, Any]) -> None:
    _record(ctx, payload)
    if ctx.rank == payload["bad"]:
        raise ValueError("bad value on purpose")
    time.sleep(120)


def sigkill_on(ctx: RankContext, payload: dict[str, Any]) -> None:
    _record(ctx, payload)
    if ctx.rank == payload["bad"]:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()  # the peers wait in a collective that can never complete
    time.sleep(120)


def sleep_forever(ctx: RankContext, payload: dict[str, Any]) -> None:
    _record(ctx, payload)
    time.sleep(120)


class TiedSource(MLPSource):
    """``inp, act, mid, out`` where ``out.weight`` *is* ``inp.weight`` (tied, as GPT-2's)."""

    def build(self, seed: int, device: str) -> nn.Module:
        torch.manual_seed(seed)
        width = self.widths[0]
        model = nn.Sequential(
            OrderedDict(
                inp=nn.Linear(width, width),
                act=nn.Tanh(),
                mid=nn.Linear(width, width),
                out=nn.Linear(width, width),
            )
        )
        model.out.weight = model.inp.weight
        return model.to(device)
