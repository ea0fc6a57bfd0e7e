"""The CPU step peak as any step holds it (issue 26, item 4): a fresh run's optimizer state
counted from the step's start, the step's input batch counted, a DTensor's local tensors
counted; hand counts on an ``nn.Linear``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from hetplan.run.meters.memcount import TensorBytesCounter, step_peak_bytes
from hetplan.run.meters.step_memory import measure_step_memory

F32 = 4
IN, OUT, BATCH = 64, 32, 16
P = OUT * IN * F32  # nn.Linear(64, 32, bias=False)'s weight, and its gradient: 8192
X = BATCH * IN * F32  # the input batch: 4096
Y = BATCH * OUT * F32  # the output: 2048
SCALAR = F32  # a 0-d float32 tensor (the loss, its seed gradient, Adam's "step")


def _linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(IN, OUT, bias=False)


def test_a_storage_made_late_is_counted_from_the_start() -> None:
    with TensorBytesCounter() as c:
        big = torch.empty(1000)  # 4000 B, the peak
        del big
        late = torch.empty(250)  # 1000 B, made after the peak
        assert c.peak_bytes == 4000
        assert c.peak_held_from_start([late]) == 4000 + 1000
        assert c.peak_held_from_start([]) == c.peak_bytes


def test_baseline_and_unknown_tensors_change_nothing() -> None:
    before = torch.empty(100)  # 400 B in the baseline
    outside = torch.empty(10)  # never seen by the counter
    with TensorBytesCounter([before]) as c:
        tmp = torch.empty(50)  # 200 B
        del tmp
        torch.empty(1)  # an operator, so that the free is seen
        assert c.peak_held_from_start([before, outside]) == c.peak_bytes == 400 + 200


def test_adam_state_made_after_the_peak_counts_from_the_start() -> None:
    lin = _linear()
    lin(torch.randn(BATCH, IN)).sum().backward()
    assert lin.weight.grad is not None
    opt = torch.optim.Adam(lin.parameters(), lr=1e-3, foreach=False)
    with TensorBytesCounter([lin.weight, lin.weight.grad]) as c:
        big = torch.empty(10_000)  # 40000 B: the peak, before the state exists
        del big
        opt.step()  # exp_avg (P), exp_avg_sq (P), step (a scalar); temporaries 2 P
        state = [v for v in opt.state[lin.weight].values() if isinstance(v, torch.Tensor)]
        assert c.peak_bytes == 2 * P + 40_000
        assert c.peak_held_from_start(state) == 2 * P + 40_000 + 2 * P + SCALAR


def _momentum_step() -> tuple[nn.Linear, Callable[[], None], Callable[[], list[torch.Tensor]]]:
    """A linear layer, one SGD-with-momentum step of it, and its state after the step."""
    lin = _linear()
    x = torch.randn(BATCH, IN)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)

    def run_step() -> None:
        opt.zero_grad(set_to_none=True)
        lin(x).sum().backward()
        opt.step()  # the first step makes the momentum buffer: a copy of the gradient (P)

    return lin, run_step, lambda: [opt.state[lin.weight]["momentum_buffer"]]


def test_step_peak_bytes_with_state_held_from_start() -> None:
    # The backward's peak: weight, loss, seed, gradient (x came from outside; the output is
    # freed once summed). The step then holds weight, gradient and the new buffer.
    lin, run_step, _ = _momentum_step()
    assert step_peak_bytes(run_step, lin.parameters()) == max(2 * P + 2 * SCALAR, 3 * P)
    # With the buffer held from the start, as every later step holds it: the backward's peak
    # plus the buffer.
    lin, run_step, state = _momentum_step()
    held = step_peak_bytes(run_step, lin.parameters(), held_from_start=state)
    assert held == 2 * P + 2 * SCALAR + P


def test_measure_counts_the_batch_the_step_is_called_with() -> None:
    lin = _linear()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)

    def step(x: torch.Tensor) -> None:
        lin(x).sum().backward()

    x = torch.randn(BATCH, IN)
    peak, source = measure_step_memory("cpu", functools.partial(step, x), lin, opt)
    assert source == "tensor bytes"
    # weight, input batch, loss, seed, gradient (the output is freed once summed)
    assert peak == P + X + 2 * SCALAR + P


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank_group")
def test_dtensor_local_ops_are_counted() -> None:
    mesh = init_device_mesh("cpu", (1,))
    lin = _linear()
    w = nn.Parameter(distribute_tensor(lin.weight.detach(), mesh, [Shard(0)]))
    x = DTensor.from_local(torch.randn(BATCH, IN), mesh, [Replicate()])
    local = w.to_local()
    with TensorBytesCounter([local]) as c:
        y = nn.functional.linear(x, w)
        y.sum().backward()
    # As a plain nn.Linear: weight, output, loss, seed, gradient (before: the weight alone).
    assert c.baseline_bytes == P
    assert c.peak_bytes == P + Y + 2 * SCALAR + P
    del y
