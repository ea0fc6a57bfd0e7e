"""TensorBytesCounter: live tensor-storage bytes on CPU, checked against hand counts."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from hetplan.run.meters.memcount import TensorBytesCounter, step_peak_bytes

F32 = 4  # bytes per float32 element
BF16 = 2

# nn.Linear(64, 32, bias=False) on a batch of 16: weight 32x64, input 16x64, output 16x32.
IN, OUT, BATCH = 64, 32, 16
P = OUT * IN * F32  # weight (and its gradient): 8192
X = BATCH * IN * F32  # input activation: 4096
Y = BATCH * OUT * F32  # output activation: 2048
SCALAR = F32  # a 0-d float32 tensor (the loss, its seed gradient, Adam's "step")


def _linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(IN, OUT, bias=False)


def test_known_allocations_exact() -> None:
    with TensorBytesCounter() as c:
        a = torch.empty(1000, dtype=torch.float32)  # 4000
        assert c.current_bytes == 4000
        v = a[10:20].view(2, 5)  # a view: same storage, no bytes
        assert c.current_bytes == 4000
        b = torch.empty(500, dtype=torch.float64)  # 4000
        assert c.current_bytes == 8000
        del a  # the view keeps the whole storage alive
        d = torch.empty(10, dtype=torch.int16)  # 20
        assert c.current_bytes == 8020
        del v  # now a's storage is freed
        e = torch.empty(250, dtype=torch.float32)  # 1000
        assert c.current_bytes == 4000 + 20 + 1000
        assert c.peak_bytes == 8020
        del b
    assert c.current_bytes == 20 + 1000
    assert c.peak_bytes == 8020
    assert c.baseline_bytes == 0
    del d, e


def test_freed_address_reused() -> None:
    with TensorBytesCounter() as c:
        for _ in range(5):
            a = torch.empty(1000)
            assert c.current_bytes == 4000
            del a
            b = torch.empty(1000)  # often at a's freed address: a must be dropped first
            assert c.current_bytes == 4000
            del b
        assert c.peak_bytes == 4000
        a = torch.empty(1000)
        a = torch.empty(1000)  # made while the first is alive; the first dies on rebinding
        assert c.peak_bytes == 8000
        _ = torch.empty(0)
        assert c.current_bytes == 4000
    del a


def test_baseline_counted_once_per_storage() -> None:
    w = torch.zeros(32, 64)
    pre = torch.zeros(100)  # alive before, not in the baseline: never counted
    with TensorBytesCounter([w, w.view(-1), w[0], w.t()]) as c:
        assert c.baseline_bytes == P
        v = pre[:10].clone()  # a new storage of 10 float32
        u = pre.view(10, 10)  # a view of an uncounted storage
        assert c.current_bytes == P + 40
        del w  # the baseline tensors given are gone, but c does not hold them
        gc.collect()
        _ = torch.empty(0)
    assert c.current_bytes == 40
    assert c.peak_bytes == P + 40
    del v, u


def test_tensor_constructor_counted() -> None:
    with TensorBytesCounter() as c:
        s = torch.tensor(0.0)  # seen as aten.lift_fresh
        t = torch.tensor([1, 2, 3], dtype=torch.int64)
    assert c.current_bytes == SCALAR + 3 * 8
    del s, t


def test_linear_forward_backward_exact() -> None:
    lin = _linear()
    with TensorBytesCounter(lin.parameters()) as c:
        x = torch.randn(BATCH, IN)  # X
        y = lin(x)  # mm -> Y (weight.t() is a view of the baseline weight)
        loss = y.sum()  # SCALAR
        loss.backward()  # seed ones_like(loss): SCALAR; mm -> grad of weight: P
        assert lin.weight.grad is not None
    # Every tensor above is alive at the backward's mm (the seed gradient is freed when the
    # graph is released, after the gradient is accumulated), and nothing else is allocated:
    # weight + gradient + input + output + loss + seed gradient.
    assert c.baseline_bytes == P
    assert c.peak_bytes == P + P + X + Y + SCALAR + SCALAR
    assert c.current_bytes == P + P + X + Y + SCALAR  # the gradient in .grad is counted
    del x, y, loss


def test_linear_input_from_outside_not_counted() -> None:
    lin = _linear()
    x = torch.randn(BATCH, IN)
    with TensorBytesCounter(lin.parameters()) as c:
        # y (Y) is freed right after sum(): nothing holds it (sum's backward needs only its
        # shape). At the backward's mm: weight, loss, seed gradient, gradient of the weight.
        lin(x).sum().backward()
    assert c.peak_bytes == P + SCALAR + SCALAR + P
    assert c.current_bytes == P + P


def test_grad_accumulation_into_existing_grad() -> None:
    lin = _linear()
    x = torch.randn(BATCH, IN)
    lin(x).sum().backward()
    with TensorBytesCounter([lin.weight, lin.weight.grad]) as c:
        # y is freed after sum(); the new gradient (P) is added in place to .grad, then freed.
        lin(x).sum().backward()
    assert c.baseline_bytes == 2 * P
    assert c.peak_bytes == 2 * P + SCALAR + SCALAR + P
    assert c.current_bytes == 2 * P


def test_tensors_saved_by_autograd_stay_counted() -> None:
    lin = _linear()
    x = torch.randn(BATCH, IN)
    with TensorBytesCounter(lin.parameters()) as c:
        h = lin(x)  # Y
        r = torch.relu(h)  # Y, saved by autograd (relu's backward uses its result)
        loss = r.sum()
        del h, r  # h is freed; r lives on only inside the graph (a C++ reference)
        _ = torch.empty(0)  # an operator: frees are accounted before each one
        assert c.current_bytes == P + Y + SCALAR
        # Seed gradient (SCALAR); threshold_backward: gradient of h (Y), after which relu's
        # node releases r; mm: gradient of the weight (P); then the graph is freed.
        loss.backward()
        _ = torch.empty(0)
        assert c.current_bytes == P + SCALAR + P
    # At threshold_backward: weight, loss, seed, r, gradient of h: P + 2 SCALAR + 2 Y; at the
    # mm: weight, loss, seed, gradient of h, gradient of the weight (the larger).
    assert c.peak_bytes == P + SCALAR + SCALAR + Y + P


def test_adam_first_step_state() -> None:
    lin = _linear()
    lin(torch.randn(BATCH, IN)).sum().backward()
    assert lin.weight.grad is not None
    opt = torch.optim.Adam(lin.parameters(), lr=1e-3, foreach=False)
    with TensorBytesCounter([lin.weight, lin.weight.grad]) as c:
        opt.step()
    state = opt.state[lin.weight]
    assert state["step"].dtype == torch.float32 and state["step"].numel() == 1
    # State made on the first step: exp_avg (P), exp_avg_sq (P), step (a float32 scalar).
    assert c.baseline_bytes == 2 * P
    assert c.current_bytes == 2 * P + (2 * P + SCALAR)
    # Single-tensor Adam's temporaries: denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt)
    # holds sqrt's result (P) and the quotient (P) at once; the rest works in place.
    assert c.peak_bytes == 2 * P + (2 * P + SCALAR) + 2 * P

    # The second step, with the state in the baseline, adds nothing that lives on.
    baseline = [lin.weight, lin.weight.grad, *state.values()]
    with TensorBytesCounter(baseline) as c2:
        opt.step()
    assert c2.baseline_bytes == 4 * P + SCALAR
    assert c2.current_bytes == c2.baseline_bytes
    assert c2.peak_bytes == c2.baseline_bytes + 2 * P


def test_step_peak_bytes() -> None:
    lin = _linear()
    x = torch.randn(BATCH, IN)

    def run_step() -> None:
        lin(x).sum().backward()  # as in test_linear_input_from_outside_not_counted

    assert step_peak_bytes(run_step, lin.parameters()) == P + SCALAR + SCALAR + P


def test_autocast_bf16_cpu() -> None:
    lin = _linear()
    x = torch.randn(BATCH, IN)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y_ref = lin(x)
    y_ref.float().sum().backward()
    assert lin.weight.grad is not None
    grad_ref = lin.weight.grad.clone()
    lin.weight.grad = None

    with TensorBytesCounter(lin.parameters()) as c:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = lin(x)
            assert y.dtype == torch.bfloat16
        loss = y.float().sum()
        loss.backward()
    assert lin.weight.grad is not None
    assert lin.weight.grad.dtype == torch.float32
    assert torch.equal(lin.weight.grad, grad_ref)
    yb = BATCH * OUT * BF16
    # When the float32 gradient is made from the bf16 one, alive: weight, bf16 gradient
    # (P / 2), float32 gradient, y (bf16) and the loss (at least).
    assert c.peak_bytes >= P + P // 2 + P + yb + SCALAR
    # What lives on: weight, its gradient, y, loss (autocast's casts are freed).
    assert c.current_bytes == P + P + yb + SCALAR
    del loss


def test_results_unchanged_and_no_counting_after_exit() -> None:
    def train(counted: bool) -> torch.Tensor:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        opt = torch.optim.Adam(model.parameters())
        x = torch.randn(5, 8)
        for _ in range(3):
            opt.zero_grad()
            if counted:
                with TensorBytesCounter(model.parameters()):
                    model(x).pow(2).mean().backward()
                    opt.step()
            else:
                model(x).pow(2).mean().backward()
                opt.step()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(train(True), train(False))

    with TensorBytesCounter() as c:
        a = torch.empty(1000)
    del a
    gc.collect()
    assert c.current_bytes == 4000


def test_enter_once() -> None:
    c = TensorBytesCounter()
    with c:
        pass
    with pytest.raises(RuntimeError), c:
        pass
