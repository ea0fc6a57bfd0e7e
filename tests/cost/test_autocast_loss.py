"""The loss's autocast traffic: counted on the kernels CPU autocast really runs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch.utils._python_dispatch import TorchDispatchMode

from hetplan.cluster import Device, device_type
from hetplan.cost.autocast_loss import EXTRA_KERNELS, extra_bytes, with_autocast_loss
from hetplan.cost.compute import FWD_WEIGHT_PASSES, AnalyticalCompute
from hetplan.cost.op_classes import pass_time
from hetplan.graph import build_graph
from hetplan.graph.ops import is_kernel, tensors
from hetplan.planspec import ModelRef

ROWS, CLASSES = 64, 500


class _Bytes(TorchDispatchMode):  # type: ignore[misc]
    """Kernels run and the bytes of every tensor each takes or makes (the trace's count)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels, self.nbytes = 0, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if is_kernel(func) and func.name() != "aten::ones_like":  # the seed gradient
            self.kernels += 1
            self.nbytes += sum(t.nbytes for t in tensors((args, kwargs, out)))
        return out


def _loss_traffic(autocast: bool) -> tuple[_Bytes, _Bytes]:
    logits = torch.randn(ROWS, CLASSES, dtype=torch.bfloat16, requires_grad=True)
    targets = torch.randint(0, CLASSES, (ROWS,))
    with _Bytes() as fwd, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = F.cross_entropy(logits, targets)
    with _Bytes() as bwd:
        loss.backward()
    return fwd, bwd


def test_the_extra_bytes_are_what_autocast_runs_beyond_the_low_precision_loss() -> None:
    plain, mixed = _loss_traffic(False), _loss_traffic(True)
    logits = ROWS * CLASSES
    for backward in (False, True):
        more = mixed[backward].nbytes - plain[backward].nbytes
        # The loss value and targets add a few bytes a row: within 1% of a logit's worth.
        assert more / logits == pytest.approx(extra_bytes("bf16", backward), abs=0.01)
        assert mixed[backward].kernels - plain[backward].kernels == EXTRA_KERNELS


def test_fp32_trains_without_autocast() -> None:
    graph = build_graph(ModelRef(name="gpt-tiny", dtype="fp32"))
    assert extra_bytes("fp32", False) == extra_bytes("fp32", True) == 0
    assert with_autocast_loss(graph.layers[-1], "fp32") is graph.layers[-1]


def test_the_loss_layer_of_a_bf16_graph_carries_it_and_is_priced_with_it() -> None:
    graph = build_graph(ModelRef(name="gpt-tiny", dtype="bf16"))
    head = graph.layers[-1]
    assert head.loss_logits == 64 * 1000  # tokens x vocabulary
    assert all(with_autocast_loss(x, "bf16") is x for x in graph.layers[:-1])
    more = with_autocast_loss(head, "bf16")
    for backward, total in ((False, "fwd_io_bytes"), (True, "bwd_io_bytes")):
        added = head.loss_logits * extra_bytes("bf16", backward)  # 12 and 16 B a logit
        before = [w for w in head.work if w.op_class == "memory" and w.backward == backward]
        after = [w for w in more.work if w.op_class == "memory" and w.backward == backward]
        assert after[0].io_bytes - before[0].io_bytes == pytest.approx(added)
        assert after[0].kernels - before[0].kernels == EXTRA_KERNELS
        assert getattr(more, total) - getattr(head, total) == pytest.approx(added)
    # Priced: the catalog's memory roofline, linear in bytes and kernels, grows by exactly the
    # extra bytes over the bandwidth and one kernel's overhead.
    compute = AnalyticalCompute("bf16")
    gpu = Device(id="g.0", type=device_type("H100-SXM"), node="g", index=0)
    rates, batch = compute.class_rates(gpu), 8
    grown = pass_time(more, False, batch, FWD_WEIGHT_PASSES, rates)
    plain = pass_time(head, False, batch, FWD_WEIGHT_PASSES, rates)
    expected = batch * head.loss_logits * 12 / rates.bandwidth + rates.kernel_overhead_s
    assert grown - plain == pytest.approx(expected, rel=1e-9)
    assert compute.layer_costs(graph, gpu, batch)[-1].fwd_s == pytest.approx(grown)
