"""The profiler's hooks taken out of a CUDA profile's windows, by hand (hook_cost)."""

import dataclasses

import pytest
from test_profile_measured import FITS, GRAPH, LOSS_B, LOSS_F, A, FlopsOnly, dev

from hetplan.profile.hook_cost import DEFAULT_HOOK_S, MIN_NET_SHARE, net_of_hooks
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.provenance import WRITTEN_BACK


class Hooks:
    """A learned hook cost of 0.2 ms forward and 0.5 ms backward on type ``A``."""

    def hook_s(self, device_type: str) -> tuple[float, float] | None:
        return (2e-4, 5e-4) if device_type == "A" else None


def cuda(make_profile, **over):  # type: ignore[no-untyped-def]
    return dataclasses.replace(make_profile(device_type="A", fits=FITS), device="cuda:0", **over)


def test_a_cuda_profile_is_priced_less_its_learned_hooks_window_by_window(make_profile) -> None:
    model = MeasuredCompute([cuda(make_profile)], fallback=FlopsOnly(), hooks=Hooks())
    costs = model.layer_costs(GRAPH, dev(A), batch=4)
    # l0: fwd 1 + 0.4 ms, bwd 2 + 0.8 ms; l1: fwd 3 ms, bwd 1 + 4 ms, and the loss's windows
    # (0.1 ms fwd, 0.2 ms bwd: each under its hook cost, so 10% of it is kept).
    assert costs[0].fwd_s == pytest.approx(1.4e-3 - 2e-4)
    assert costs[0].bwd_s == pytest.approx(2.8e-3 - 5e-4)
    assert costs[1].fwd_s == pytest.approx(3e-3 - 2e-4 + MIN_NET_SHARE * LOSS_F)
    assert costs[1].bwd_s == pytest.approx(5e-3 - 5e-4 + MIN_NET_SHARE * LOSS_B)
    assert costs[0].source == "measured on A, less its hooks"


def test_without_a_fit_the_default_hook_cost_is_taken_out(make_profile) -> None:
    model = MeasuredCompute([cuda(make_profile)], fallback=FlopsOnly())
    costs = model.layer_costs(GRAPH, dev(A), batch=4)
    assert costs[0].bwd_s == pytest.approx(2.8e-3 - DEFAULT_HOOK_S[1])


def test_cpu_profiles_and_write_backs_keep_their_windows(make_profile) -> None:
    for profile in (
        make_profile(device_type="A", fits=FITS),  # taken on the CPU
        cuda(make_profile, source=WRITTEN_BACK),  # a run's spans: no hooks
    ):
        model = MeasuredCompute([profile], fallback=FlopsOnly(), hooks=Hooks())
        costs = model.layer_costs(GRAPH, dev(A), batch=4)
        assert costs[0].bwd_s == pytest.approx(2.8e-3)
        assert "hooks" not in costs[0].source


def test_a_window_below_its_hooks_keeps_a_tenth_of_itself() -> None:
    assert net_of_hooks(1e-3, 4e-4) == pytest.approx(6e-4)
    assert net_of_hooks(3e-4, 4e-4) == pytest.approx(3e-5)
