"""Hooks attribute time to the right layers; in-place models work; warm-up is excluded.

Known costs come from layers that sleep (``time.sleep`` sleeps *at least* the time asked), and
every comparison is a lower bound or a ratio, never an absolute upper bound on a noisy machine.
"""

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from hetplan.errors import InputError
from hetplan.profile.hooks import tensors_in
from hetplan.profile.layers import (
    StepSettings,
    fit_layers,
    fit_step,
    inplace_layers,
    measure_batch,
    measure_batches,
    resolve_layers,
)
from hetplan.profile.timing import thread_scope

CPU = torch.device("cpu")
FWD_S = 0.03
BWD_S = 0.05


class _SleepInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(ctx.seconds)
        return grad, None


class Sleepy(nn.Module):
    """A linear layer that sleeps ``fwd_s`` in forward and ``bwd_s`` in backward."""

    def __init__(self, fwd_s: float, bwd_s: float, width: int = 8) -> None:
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.fwd_s, self.bwd_s = fwd_s, bwd_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.fwd_s)
        return _SleepInBackward.apply(self.lin(x), self.bwd_s)


class SlowFirstCall(nn.Module):
    """Pays ``seconds`` on its first call only (like a lazy initialisation or a kernel choice)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.seconds = seconds
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.seconds)
        return self.lin(x)


def mse(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def make_batch(b: int) -> tuple[torch.Tensor, Callable[[Any], torch.Tensor]]:
    return torch.randn(b, 8), mse


def names(model: nn.Module) -> list[str]:
    return [n for n, _ in model.named_children()]


def run(
    model: nn.Module, loss: Callable[[Any], torch.Tensor] = mse, warmup: int = 1, steps: int = 5
):
    return measure_batch(
        model,
        torch.randn(4, 8),
        loss,
        names(model),
        device=CPU,
        settings=StepSettings(warmup=warmup, steps=steps),
        batch=4,
    )


def by_name(timing: Any) -> dict[str, Any]:
    return {layer.name: layer for layer in timing.layers}


def test_sleeping_layer_gets_its_forward_and_backward_time() -> None:
    model = nn.Sequential(nn.Linear(8, 8), Sleepy(FWD_S, BWD_S), nn.Linear(8, 8))
    t = by_name(run(model))
    assert t["1"].fwd.median_s >= FWD_S
    assert t["1"].bwd.median_s >= BWD_S
    for other in ("0", "2"):
        assert t[other].fwd.median_s < t["1"].fwd.median_s / 5
        assert t[other].bwd.median_s < t["1"].bwd.median_s / 5
    # the backward sleep is not billed to the forward, nor the forward sleep to the backward
    assert t["1"].fwd.median_s < t["1"].bwd.median_s


def test_first_layer_backward_ends_when_backward_returns() -> None:
    # the input needs no gradient: module full backward hooks would fire too early here
    model = nn.Sequential(Sleepy(0.0, BWD_S), nn.Linear(8, 8))
    t = by_name(run(model))
    assert t["0"].bwd.median_s >= BWD_S
    assert t["1"].bwd.median_s < t["0"].bwd.median_s / 5


def test_inplace_relu_model_works_and_attributes_time() -> None:
    model = nn.Sequential(
        nn.Linear(8, 8), nn.ReLU(inplace=True), Sleepy(FWD_S, BWD_S), nn.ReLU(inplace=True)
    )
    # module full backward hooks reject this model; ours must not
    t = by_name(run(model))
    assert t["2"].bwd.median_s >= BWD_S
    assert t["2"].fwd.median_s >= FWD_S
    for other in ("0", "1", "3"):
        assert t[other].bwd.median_s < t["2"].bwd.median_s / 5
    assert inplace_layers(model, names(model)) == ["1", "3"]


def test_loss_time_is_in_the_remainder_split_into_forward_and_backward() -> None:
    def slow_loss(out: torch.Tensor) -> torch.Tensor:
        time.sleep(FWD_S)
        return mse(_SleepInBackward.apply(out, BWD_S))

    timing = run(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)), loss=slow_loss)
    assert timing.loss_fwd.median_s >= FWD_S
    assert timing.loss_bwd.median_s >= BWD_S
    assert timing.other.median_s >= FWD_S + BWD_S
    layers = sum(layer.fwd.median_s + layer.bwd.median_s for layer in timing.layers)
    assert layers < timing.other.median_s / 5
    assert timing.optimizer.median_s < timing.loss_fwd.median_s / 5
    assert timing.step.median_s >= timing.other.median_s
    # no peak memory reported on CPU
    assert all(layer.fwd_peak_bytes is None for layer in timing.layers)


def test_identity_layer_does_not_take_the_previous_layers_backward() -> None:
    model = nn.Sequential(Sleepy(0.0, BWD_S), nn.Identity(), nn.Linear(8, 8))
    t = by_name(run(model))
    assert t["0"].bwd.median_s >= BWD_S
    assert t["1"].bwd.median_s == 0.0


def test_warmup_steps_are_not_timed() -> None:
    slow = 0.2
    cold = by_name(run(nn.Sequential(SlowFirstCall(slow)), warmup=0, steps=1))
    assert cold["0"].fwd.median_s >= slow
    warm = by_name(run(nn.Sequential(SlowFirstCall(slow)), warmup=1, steps=3))
    assert warm["0"].fwd.median_s < slow / 5


def test_layer_called_twice_adds_both_calls() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = Sleepy(FWD_S, BWD_S)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(self.a(x))

    t = by_name(
        measure_batch(
            Twice(),
            torch.randn(2, 8),
            mse,
            ["a"],
            device=CPU,
            settings=StepSettings(warmup=1, steps=2),
            batch=2,
        )
    )
    assert t["a"].fwd.median_s >= 2 * FWD_S
    assert t["a"].bwd.median_s >= 2 * BWD_S


def test_several_batch_sizes_and_fit_over_them() -> None:
    model = nn.Sequential(nn.Linear(8, 8), Sleepy(FWD_S, 0.0))
    timings = measure_batches(
        model,
        make_batch,
        names(model),
        [4, 1, 4],
        device=CPU,
        settings=StepSettings(warmup=1, steps=2),
    )
    assert [t.batch for t in timings] == [1, 4]
    fits = fit_layers(timings)
    assert [f.name for f in fits] == ["0", "1"]
    # the sleep is a fixed cost: the fit's price at any batch is at least the sleep
    assert fits[1].fwd.at(2) >= FWD_S * 0.999
    step = fit_step(timings)
    assert step.loss.name == "loss"
    assert min(step.other.a_s, step.other.k_s, step.optimizer.a_s, step.optimizer.k_s) >= 0


def test_bad_layer_names_are_input_errors() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2)), nn.Linear(2, 2))
    with pytest.raises(InputError, match="inside layer"):
        resolve_layers(model, ["0", "0.0"])
    with pytest.raises(InputError, match="not a submodule"):
        resolve_layers(model, ["7"])
    with pytest.raises(InputError, match="no layers"):
        resolve_layers(model, [])
    with pytest.raises(InputError, match="batch sizes"):
        measure_batches(model, make_batch, ["0"], [0], device=CPU, settings=StepSettings())
    with pytest.raises(ValueError, match="steps"):
        StepSettings(warmup=1, steps=0)
    with pytest.raises(ValueError, match="rmsprop"):
        StepSettings(optimizer="rmsprop")


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "none"])
def test_optimizers_run_with_learning_rate_zero(name: str) -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    before = [p.detach().clone() for p in model.parameters()]
    timing = measure_batch(
        model, torch.randn(2, 8), mse, names(model), device=CPU,
        settings=StepSettings(warmup=1, steps=2, optimizer=name), batch=2,
    )  # fmt: skip
    for p, q in zip(model.parameters(), before, strict=True):
        torch.testing.assert_close(p.detach(), q, rtol=0, atol=0)  # learning rate 0
    assert timing.optimizer.median_s > 0


def test_tensors_in_nested_outputs() -> None:
    a, b, c = torch.zeros(1), torch.ones(1), torch.ones(2)
    assert [t.shape for t in tensors_in((a, [b, {"k": c}], "x", None))] == [(1,), (1,), (2,)]


def test_thread_scope_sets_and_restores_threads_and_pinning() -> None:
    before_threads = torch.get_num_threads()
    before_cpus = os.sched_getaffinity(0)
    cpu = min(before_cpus)
    with thread_scope(1, (cpu,)) as threads:
        assert threads == 1 == torch.get_num_threads()
        assert os.sched_getaffinity(0) == {cpu}
    assert torch.get_num_threads() == before_threads
    assert os.sched_getaffinity(0) == before_cpus


class FakeMemory:
    """Allocator stand-in with the CUDA probe's semantics (peak above the level at reset)."""

    def __init__(self) -> None:
        self.current = self.base = self.peak = 0

    def allocate(self, nbytes: int) -> None:
        self.current += nbytes
        self.peak = max(self.peak, self.current)

    def free(self, nbytes: int) -> None:
        self.current -= nbytes

    def reset(self) -> None:
        self.base = self.peak = self.current

    def peak_bytes(self) -> int | None:
        return self.peak - self.base


class _AllocInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mem: FakeMemory, nbytes: int) -> torch.Tensor:
        ctx.mem, ctx.nbytes = mem, nbytes
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        ctx.mem.allocate(ctx.nbytes)
        ctx.mem.free(ctx.nbytes)
        return grad, None, None


class Allocating(nn.Module):
    """Keeps ``fwd`` bytes (a saved activation) plus a transient ``fwd`` in forward; a transient
    ``bwd`` bytes in backward."""

    def __init__(self, mem: FakeMemory, fwd: int, bwd: int) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.mem, self.fwd, self.bwd = mem, fwd, bwd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mem.allocate(2 * self.fwd)
        self.mem.free(self.fwd)
        return _AllocInBackward.apply(self.lin(x), self.mem, self.bwd)


def test_peak_memory_is_billed_to_the_layer_that_allocates() -> None:
    mem = FakeMemory()
    model = nn.Sequential(nn.Linear(8, 8), Allocating(mem, 1000, 5000), nn.Linear(8, 8))
    timing = measure_batch(
        model, torch.randn(2, 8), mse, names(model), device=CPU,
        settings=StepSettings(warmup=1, steps=2), batch=2, memory=mem,
    )  # fmt: skip
    t = by_name(timing)
    assert [t[n].fwd_peak_bytes for n in ("0", "1", "2")] == [0, 2000, 0]
    assert [t[n].bwd_peak_bytes for n in ("0", "1", "2")] == [0, 5000, 0]


def test_pinning_to_missing_cores_is_an_input_error() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(InputError, match="cannot pin"), thread_scope(None, (10_000,)):
        pass
    assert os.sched_getaffinity(0) == before


def test_mixed_precision_profile_runs_under_autocast_over_fp32_weights() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    seen: list[torch.dtype] = []

    def loss(out: torch.Tensor) -> torch.Tensor:
        seen.append(out.dtype)
        return out.float().pow(2).mean()

    measure_batch(
        model, torch.randn(2, 8), loss, names(model), device=CPU,
        settings=StepSettings(warmup=0, steps=1, autocast=torch.bfloat16), batch=2,
    )  # fmt: skip
    assert seen == [torch.bfloat16]  # the forward ran in bf16 ...
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # ... over fp32 weights
    assert {p.grad.dtype for p in model.parameters() if p.grad is not None} == {torch.float32}
