"""The calibration probes count work as the graph tracer counts it: each probe op, traced as a
layer by ``hetplan.graph``, gives the same FLOPs, kernels and intensity per kernel (so a layer
is priced on the curve at the point the probe measured)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812

from hetplan.graph import BuiltModel
from hetplan.graph.extract import trace_graph
from hetplan.graph.types import OpWork
from hetplan.profile.calibrate import (
    Probe,
    _norm_add_relu,
    attention_probes,
    conv_probes,
    grouped_probes,
    matmul_probes,
    memory_probes,
)

CPU = torch.device("cpu")


def traced(
    make: Callable[[], nn.Sequential], shape: tuple[int, ...], out: tuple[int, ...], batch: int
) -> list[OpWork]:
    """The work of the second layer ``make`` builds (after a first one, so that its input
    needs a gradient, as a probe's does), for ``batch`` samples of ``shape`` (output
    ``out``): totals per pass."""
    built = BuiltModel(
        name="probe", family="custom", dataset=None,
        factory=lambda: nn.Sequential(*make(), nn.Tanh()),  # the loss runs in the last layer
        input_shape=shape, input_dtype=torch.float32, task="regress", target_shape=out,
        default_depth=1,
    )  # fmt: skip
    layer = trace_graph(built, batch=batch).layers[1]
    return [
        OpWork(op_class=w.op_class, backward=w.backward, flops=w.flops * batch,
               io_bytes=w.io_bytes * batch, kernels=w.kernels)
        for w in layer.work
    ]  # fmt: skip


def one(work: list[OpWork], op_class: str, backward: bool) -> OpWork:
    (w,) = [w for w in work if w.op_class == op_class and w.backward == backward]
    return w


def check(probe: Probe, work: list[OpWork], op_class: str) -> None:
    fwd, bwd = one(work, op_class, False), one(work, op_class, True)
    assert (fwd.kernels, bwd.kernels) == (probe.fwd_kernels, probe.bwd_kernels)
    assert fwd.flops == pytest.approx(probe.fwd_work)
    assert bwd.flops == pytest.approx(probe.bwd_work)
    assert fwd.flops / fwd.io_bytes == pytest.approx(probe.intensity, rel=0.02)


class Linear(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(k, k))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def test_matmul_probe_counts_as_traced() -> None:
    probe = next(p for p in matmul_probes(CPU, torch.float32) if p.fwd_work == 2.0 * 8 * 256**2)
    check(
        probe,
        traced(lambda: nn.Sequential(nn.Linear(256, 256), Linear(256)), (256,), (256,), batch=8),
        "matmul",
    )


@pytest.mark.parametrize("grouped", [False, True])
def test_conv_probes_count_as_traced(grouped: bool) -> None:
    probes = grouped_probes(CPU, torch.float32) if grouped else conv_probes(CPU, torch.float32)
    probe = next(iter(probes))
    w = probe.inputs[1]
    channels, side, n = w.shape[0], probe.inputs[0].shape[-1], probe.inputs[0].shape[0]
    groups = channels if grouped else 1
    shape = (channels, side, side)

    def make() -> nn.Sequential:
        conv = nn.Conv2d(channels, channels, 3, padding=1, groups=groups, bias=False)
        return nn.Sequential(nn.Conv2d(channels, channels, 1), conv)

    work = traced(make, shape, shape, batch=n)
    check(probe, work, "conv_grouped" if grouped else "conv")


class Attention(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = x.unbind(1)
        return F.scaled_dot_product_attention(q, k, v)


def test_attention_probe_counts_as_traced() -> None:
    probe = next(iter(attention_probes(CPU, torch.float32)))
    n, heads, tokens, dim = probe.inputs[0].shape
    work = traced(
        lambda: nn.Sequential(nn.Linear(dim, dim), Attention()),
        (3, heads, tokens, dim),
        (heads, tokens, dim),
        batch=n,
    )
    fwd = one(work, "attention", False)
    assert fwd.kernels == probe.fwd_kernels
    assert fwd.flops == pytest.approx(probe.fwd_work)
    assert one(work, "attention", True).flops == pytest.approx(probe.bwd_work)


class NormAddRelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _norm_add_relu(x, x)


def test_memory_probe_counts_bytes_per_kernel_as_traced() -> None:
    probe = list(memory_probes(CPU, torch.float32))[3]
    shape = tuple(probe.inputs[0].shape[1:])
    work = traced(lambda: nn.Sequential(nn.Identity(), NormAddRelu()), shape, shape, batch=1)
    fwd = one(work, "memory", False)
    assert fwd.kernels == probe.fwd_kernels
    assert fwd.io_bytes == pytest.approx(probe.fwd_work, rel=0.25)
