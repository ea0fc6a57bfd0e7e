"""Batches for training: the user's dataset (``--data FILE.py:fn``) or synthetic samples.

The data contract: a function (no arguments) in ``path/to/file.py`` or ``package.module``
returns a ``torch.utils.data.Dataset`` (map-style, with ``__len__``, or iterable), or a pair
``(dataset, loss_fn)``. A sample is a pair ``(input, target)`` that
``torch.utils.data.default_collate`` can stack. ``loss_fn(output, target)`` returns the loss
averaged over the samples of ``output``; without one, the model's default loss is used
(classification, language modelling or mean squared error, from the output's shape).

Order. The samples form one stream: epoch after epoch, each a permutation of the dataset drawn
from ``(seed, epoch)`` (an iterable dataset: its own order, iterated again every epoch). Step
``k`` of a run that starts at stream position ``P`` takes samples ``[P + k*B, P + (k+1)*B)``
(``B`` the global batch), and pipeline ``p`` the slice of them at its offset and of its size in
the plan, so that uneven pipelines get uneven shares. The position is counted in samples, not
steps, so a checkpoint resumes at the same sample under a plan with another batch split.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.data import Dataset, IterableDataset, default_collate

from hetplan.errors import InputError
from hetplan.graph.resolve import load_function
from hetplan.planspec import Plan
from hetplan.run.setup.model import ModelSource, data_seed

LossFn = Callable[[Any, torch.Tensor], torch.Tensor]
EXPECTED = "a torch.utils.data.Dataset or (dataset, loss_fn)"
SEED_STRIDE = 1_000_003  # a prime: epochs of different seeds draw unrelated permutations


@dataclass(frozen=True)
class UserData:
    """What the user's data function returned."""

    dataset: Any
    """A map-style ``Dataset`` (with ``__len__``) or an ``IterableDataset``."""
    loss: LossFn | None


def canonical_ref(ref: str | None) -> str | None:
    """``ref`` with a file path made absolute, so that ``./d.py:fn`` and ``d.py:fn`` compare
    equal (a checkpoint records which data it was trained on)."""
    if ref is None:
        return None
    where, colon, fn = ref.rpartition(":")
    if colon and (where.endswith(".py") or "/" in where):
        return f"{Path(where).resolve()}:{fn}"
    return ref


@functools.cache
def load_data(ref: str) -> UserData:
    """Call the data function ``ref``; InputError naming ``ref`` when the result is not
    :data:`EXPECTED` or a sample is not an ``(input, target)`` pair."""
    fn = load_function(ref)
    try:
        out = fn()
    except Exception as err:
        raise InputError(f"--data {ref}: the function raised {type(err).__name__}: {err}") from None
    loss = None
    if isinstance(out, tuple) and len(out) == 2 and callable(out[1]):
        out, loss = out
    if not isinstance(out, Dataset | IterableDataset):
        raise InputError(f"--data {ref}: returned a {type(out).__name__}; expected {EXPECTED}")
    data = UserData(dataset=out, loss=loss)
    if not isinstance(out, IterableDataset):
        size = _length(ref, out)
        if size < 1:
            raise InputError(f"--data {ref}: the dataset is empty")
    try:
        first = next(iter(_Stream(data, 0, ref)))
    except InputError:
        raise
    except Exception as err:  # the user's __getitem__ / __iter__ failed
        raise InputError(
            f"--data {ref}: reading a sample raised {type(err).__name__}: {err}"
        ) from None
    _check_sample(ref, first)
    return data


def check_batch_fits(ref: str, batch: int) -> None:
    """InputError when the dataset ``ref`` holds fewer samples than one global batch: every
    step would repeat samples within itself (an iterable dataset is read up to ``batch``)."""
    data = load_data(ref)
    if isinstance(data.dataset, IterableDataset):
        size = sum(1 for _ in itertools.islice(iter(data.dataset), batch))
    else:
        size = _length(ref, data.dataset)
    if size < batch:
        raise InputError(
            f"--data {ref}: the dataset holds {size} samples, fewer than one global batch of "
            f"the plan ({batch}); every step would repeat samples: use more data or a plan "
            "with a smaller --batch"
        )


def _length(ref: str, dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError:
        raise InputError(
            f"--data {ref}: a map-style dataset needs __len__ (or make it an IterableDataset)"
        ) from None


def _check_sample(ref: str, sample: Any) -> None:
    if not (isinstance(sample, tuple | list) and len(sample) == 2):
        raise InputError(
            f"--data {ref}: a sample must be an (input, target) pair; got {type(sample).__name__}"
        )
    try:
        x, y = default_collate([sample])
    except (TypeError, RuntimeError) as err:
        raise InputError(f"--data {ref}: samples cannot be batched ({err})") from None
    for what, value in (("input", x), ("target", y)):
        if not isinstance(value, torch.Tensor):
            raise InputError(
                f"--data {ref}: a sample's {what} must be a tensor or a number; "
                f"got {type(value).__name__}"
            )


class _Stream:
    """The dataset's samples as one endless, seeded stream; reads forward cheaply and restarts
    from the beginning when asked for an earlier position."""

    def __init__(self, data: UserData, seed: int, ref: str) -> None:
        self.data = data
        self.seed = seed
        self.ref = ref
        self.iterable = isinstance(data.dataset, IterableDataset)
        self._pos = 0
        self._epoch_order: tuple[int, list[int]] = (-1, [])
        self._last: tuple[tuple[int, int], list[Any]] = ((-1, 0), [])
        self._it: Iterator[Any] = self._samples()

    def __iter__(self) -> Iterator[Any]:
        return self._it

    def take(self, start: int, count: int) -> list[Any]:
        """Samples ``[start, start + count)`` of the stream. A map-style dataset loads only
        those (by index); an iterable one is read forward to ``start``."""
        if not self.iterable:
            ds = self.data.dataset
            size = len(ds)
            return [ds[self._order(q // size)[q % size]] for q in range(start, start + count)]
        if (start, count) == self._last[0]:  # the first stage's set-up reads step 0 twice
            return self._last[1]
        if start < self._pos:
            self._pos, self._it = 0, self._samples()
        while self._pos < start:
            next(self._it)
            self._pos += 1
        out = [next(self._it) for _ in range(count)]
        self._pos += count
        self._last = ((start, count), out)
        return out

    def _samples(self) -> Iterator[Any]:
        epoch = 0
        while True:
            yielded = False
            for sample in self._epoch(epoch):
                yielded = True
                yield sample
            if not yielded:
                raise InputError(f"--data {self.ref}: the dataset yielded no samples")
            epoch += 1

    def _epoch(self, epoch: int) -> Iterator[Any]:
        ds = self.data.dataset
        if self.iterable:
            yield from ds
            return
        for i in self._order(epoch):
            yield ds[i]

    def _order(self, epoch: int) -> list[int]:
        """The permutation of a map-style dataset's indices in ``epoch`` (the last one kept)."""
        if self._epoch_order[0] != epoch:
            gen = torch.Generator().manual_seed(self.seed * SEED_STRIDE + epoch)
            self._epoch_order = (
                epoch,
                torch.randperm(len(self.data.dataset), generator=gen).tolist(),
            )
        return self._epoch_order[1]


class Feed(Protocol):
    """Every pipeline's share of each step's global batch."""

    def batch(self, step: int, pipeline: int, device: str) -> tuple[Any, torch.Tensor]:
        """``(inputs, targets)`` of pipeline ``pipeline`` at global step ``step``."""
        ...

    def loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        """The training loss, averaged over the samples of ``output``."""
        ...


@dataclass(frozen=True, kw_only=True)
class Shares:
    """The plan's split of the global batch: samples and offset of each pipeline."""

    sizes: tuple[int, ...]

    @classmethod
    def of(cls, plan: Plan) -> Shares:
        return cls(sizes=tuple(p.batch for p in plan.pipelines))

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def offset(self, pipeline: int) -> int:
        return sum(self.sizes[:pipeline])


@dataclass(frozen=True, kw_only=True)
class SyntheticFeed:
    """Synthetic samples of the model's input shape, seeded by (seed, step, pipeline)."""

    source: ModelSource
    shares: Shares
    seed: int

    def batch(self, step: int, pipeline: int, device: str) -> tuple[Any, torch.Tensor]:
        n = self.shares.sizes[pipeline]
        return self.source.batch(n, data_seed(self.seed, step, pipeline), device)

    def loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        return self.source.loss(output, target)


@dataclass(frozen=True, kw_only=True)
class DatasetFeed:
    """The user's dataset (picklable: each process loads it by reference)."""

    ref: str
    source: ModelSource
    shares: Shares
    seed: int
    start_step: int = 0
    start_position: int = 0
    """Stream position (samples) of step ``start_step``."""

    def position(self, step: int) -> int:
        """Stream position of the first sample of global step ``step``."""
        return self.start_position + (step - self.start_step) * self.shares.total

    def batch(self, step: int, pipeline: int, device: str) -> tuple[Any, torch.Tensor]:
        start = self.position(step) + self.shares.offset(pipeline)
        samples = _stream(self.ref, self.seed).take(start, self.shares.sizes[pipeline])
        x, y = default_collate(samples)
        return x.to(device), y.to(device)

    def loss(self, output: Any, target: torch.Tensor) -> torch.Tensor:
        fn = load_data(self.ref).loss
        return fn(output, target) if fn is not None else self.source.loss(output, target)


@functools.cache
def _stream(ref: str, seed: int) -> _Stream:
    return _Stream(load_data(ref), seed, ref)


def make_feed(
    plan: Plan,
    source: ModelSource,
    *,
    data: str | None,
    seed: int,
    start_step: int = 0,
    start_position: int = 0,
) -> Feed:
    """The feed of a run: the dataset ``data`` from ``start_position``, or synthetic data."""
    shares = Shares.of(plan)
    if data is None:
        return SyntheticFeed(source=source, shares=shares, seed=seed)
    return DatasetFeed(
        ref=data,
        source=source,
        shares=shares,
        seed=seed,
        start_step=start_step,
        start_position=start_position,
    )
