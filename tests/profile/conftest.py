"""A synthetic profile factory shared by the profile tests."""

from collections.abc import Callable, Sequence

import pytest

from hetplan.profile.fit import LinearFit, Stats
from hetplan.profile.types import BatchTiming, LayerFit, LayerTiming, Profile, StepFit

ProfileFactory = Callable[..., Profile]


def _stats(s: float) -> Stats:
    return Stats(median_s=s, p10_s=0.9 * s, p90_s=1.1 * s)


def synthetic_profile(
    *,
    device_type: str = "cpu",
    model: str = "m",
    input_shape: tuple[int, ...] = (8,),
    dtype: str = "fp32",
    batch_sizes: Sequence[int] = (1, 2, 4),
    fits: dict[str, tuple[float, float, float, float]] | None = None,
    timestamp: str = "2026-01-01T00:00:00+00:00",
) -> Profile:
    """``fits``: layer -> (fwd a, fwd k, bwd a, bwd k); batch timings follow the fits exactly.
    The loss costs 0.1 ms forward and 0.2 ms backward, the optimizer step 50 ms."""
    fits = fits or {"l0": (1e-3, 1e-4, 2e-3, 2e-4), "l1": (3e-3, 0.0, 1e-3, 1e-3)}
    layer_fits = tuple(
        LayerFit(name=n, fwd=LinearFit(a_s=fa, k_s=fk), bwd=LinearFit(a_s=ba, k_s=bk))
        for n, (fa, fk, ba, bk) in fits.items()
    )
    batches = tuple(
        BatchTiming(
            batch=b,
            layers=tuple(
                LayerTiming(name=f.name, fwd=_stats(f.fwd.at(b)), bwd=_stats(f.bwd.at(b)))
                for f in layer_fits
            ),
            step=_stats(1.0),
            other=_stats(0.1),
            loss_fwd=_stats(0.01),
            loss_bwd=_stats(0.02),
            optimizer=_stats(0.05),
        )
        for b in batch_sizes
    )
    return Profile(
        device_type=device_type,
        device_name="test device",
        device="cpu",
        model=model,
        dataset=None,
        input_shape=input_shape,
        dtype=dtype,
        threads=1,
        cpus=None,
        warmup=1,
        steps=3,
        optimizer="sgd",
        batch_sizes=tuple(batch_sizes),
        batches=batches,
        fits=layer_fits,
        step_fit=StepFit(
            loss=LayerFit(
                name="loss", fwd=LinearFit(a_s=1e-4, k_s=0), bwd=LinearFit(a_s=2e-4, k_s=0)
            ),
            optimizer=LinearFit(a_s=0.05, k_s=0.0),
            other=LinearFit(a_s=0.1, k_s=0.0),
        ),
        timestamp=timestamp,
        torch_version="2.x",
        notes=("synthetic",),
    )


@pytest.fixture
def make_profile() -> ProfileFactory:
    return synthetic_profile
