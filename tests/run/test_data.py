"""The ``--data`` contract (:mod:`hetplan.run.setup.data`): the sample stream's order, every
pipeline's share of a step, resuming at a stream position, the loss, and the errors."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from hetplan.errors import InputError
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.setup import data as data_mod
from hetplan.run.setup.data import DatasetFeed, Shares, SyntheticFeed, load_data, make_feed
from hetplan.run.setup.model import MLPSource

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "blobs.py"

# The user's data file: every sample's value is its index in the dataset (map-style) or its
# place in the iteration order (iterable), so a batch's targets name the samples it holds.
DATA_FILE = textwrap.dedent(
    """
    import torch
    from torch.utils.data import Dataset, IterableDataset, TensorDataset


    def indexed(n):
        return TensorDataset(torch.arange(n).float().unsqueeze(1), torch.arange(n))


    def map16():
        return indexed(16)


    def map24():
        return indexed(24)


    class Counting(IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            for i in range(self.n):
                yield torch.tensor([float(i)]), torch.tensor(i)


    def iter20():
        return Counting(20)


    def iter12():
        return Counting(12)


    def sentinel_loss(output, target):
        return torch.tensor(42.0)


    def with_loss():
        return indexed(8), sentinel_loss


    def raises():
        raise RuntimeError("disk on fire")


    def not_a_dataset():
        return [(torch.zeros(1), torch.tensor(0))]


    def not_a_pair():
        return TensorDataset(torch.arange(4).float())


    def triple():
        return TensorDataset(torch.zeros(4, 1), torch.zeros(4), torch.zeros(4))


    class Strings(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return "text", i


    def string_input():
        return Strings()


    def empty():
        return TensorDataset(torch.zeros(0, 1), torch.zeros(0, dtype=torch.long))


    class NoLength(Dataset):
        def __getitem__(self, i):
            return torch.zeros(1), torch.tensor(0)


    def no_length():
        return NoLength()
    """
)


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Every test loads its data anew (``load_data`` and the streams are cached per ref)."""
    load_data.cache_clear()
    data_mod._stream.cache_clear()
    yield
    load_data.cache_clear()
    data_mod._stream.cache_clear()


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "data.py"
    path.write_text(DATA_FILE)
    return path


def _feed(ref: str, sizes: tuple[int, ...], seed: int = 0, **kw: int) -> DatasetFeed:
    return DatasetFeed(ref=ref, source=MLPSource(), shares=Shares(sizes=sizes), seed=seed, **kw)


def _ids(feed: DatasetFeed, step: int, pipeline: int) -> list[int]:
    """The sample indices of ``pipeline``'s batch at ``step`` (checked to match the inputs)."""
    x, y = feed.batch(step, pipeline, "cpu")
    assert x.shape == (feed.shares.sizes[pipeline], 1)
    assert y.shape == (feed.shares.sizes[pipeline],)
    assert torch.equal(x[:, 0], y.float())  # input and target of one sample stay together
    return [int(v) for v in y]


def _step(feed: DatasetFeed, step: int) -> list[int]:
    """Every pipeline's samples at ``step``, pipeline after pipeline."""
    return [i for p in range(len(feed.shares.sizes)) for i in _ids(feed, step, p)]


def _plan(sizes: list[int]) -> Plan:
    pipes = [
        PipelinePlan(stages=[StagePlan(layers=["fc0"], devices=[f"d{i}"])], batch=b)
        for i, b in enumerate(sizes)
    ]
    return Plan(
        model=ModelRef(name="mlp"),
        strategy="dp",
        global_batch=sum(sizes),
        pipelines=pipes,
    )


# --- map-style order ------------------------------------------------------------------------


def test_shares_of_a_plan_give_sizes_offsets_and_total() -> None:
    shares = Shares.of(_plan([5, 3, 2]))
    assert shares.sizes == (5, 3, 2)
    assert [shares.offset(p) for p in range(3)] == [0, 5, 8]
    assert shares.total == 10


def test_make_feed_picks_dataset_or_synthetic(data_file: Path) -> None:
    plan = _plan([5, 3])
    feed = make_feed(plan, MLPSource(), data=f"{data_file}:map16", seed=3, start_position=7)
    assert isinstance(feed, DatasetFeed)
    assert feed.shares.sizes == (5, 3)
    assert (feed.seed, feed.start_step, feed.start_position) == (3, 0, 7)
    synthetic = make_feed(plan, MLPSource(), data=None, seed=3)
    assert isinstance(synthetic, SyntheticFeed)
    assert [synthetic.batch(0, p, "cpu")[0].shape[0] for p in range(2)] == [5, 3]


def test_one_epoch_holds_every_sample_once_with_plan_sizes(data_file: Path) -> None:
    feed = make_feed(_plan([5, 3]), MLPSource(), data=f"{data_file}:map16", seed=0)
    assert isinstance(feed, DatasetFeed)
    seen: list[int] = []
    for step in range(16 // 8):
        a, b = _ids(feed, step, 0), _ids(feed, step, 1)
        assert (len(a), len(b)) == (5, 3)
        seen += a + b
    assert sorted(seen) == list(range(16))


def test_second_pipeline_takes_the_samples_after_the_first(data_file: Path) -> None:
    ref = f"{data_file}:map16"
    split, whole = _feed(ref, (5, 3), seed=4), _feed(ref, (8,), seed=4)
    for step in range(4):  # two epochs
        assert _step(split, step) == _ids(whole, step, 0)


def test_seed_sets_the_order(data_file: Path) -> None:
    ref = f"{data_file}:map16"
    epoch = [_step(_feed(ref, (8,), seed=s), k) for s in (0, 0, 1) for k in range(2)]
    seed0, again, seed1 = epoch[0] + epoch[1], epoch[2] + epoch[3], epoch[4] + epoch[5]
    assert seed0 == again
    assert seed0 != seed1
    assert sorted(seed1) == list(range(16))
    assert seed0 != list(range(16))  # shuffled, not the dataset order


def test_second_epoch_is_another_complete_permutation(data_file: Path) -> None:
    feed = _feed(f"{data_file}:map16", (5, 3), seed=2)
    first = _step(feed, 0) + _step(feed, 1)
    second = _step(feed, 2) + _step(feed, 3)
    assert sorted(first) == sorted(second) == list(range(16))
    assert first != second


def test_asking_for_an_earlier_step_gives_the_same_samples(data_file: Path) -> None:
    feed = _feed(f"{data_file}:map16", (5, 3), seed=1)
    forward = [_step(feed, k) for k in range(5)]
    backward = [_step(feed, k) for k in reversed(range(5))][::-1]
    assert forward == backward


# --- iterable -------------------------------------------------------------------------------


def test_iterable_keeps_its_own_order(data_file: Path) -> None:
    feed = _feed(f"{data_file}:iter20", (5, 3))
    assert _ids(feed, 0, 0) == [0, 1, 2, 3, 4]
    assert _ids(feed, 0, 1) == [5, 6, 7]
    assert _ids(feed, 1, 0) == [8, 9, 10, 11, 12]
    assert _ids(feed, 1, 1) == [13, 14, 15]


def test_iterable_wraps_to_a_new_epoch(data_file: Path) -> None:
    feed = _feed(f"{data_file}:iter12", (5, 3), seed=9)  # the seed does not reorder an iterable
    assert _ids(feed, 1, 0) == [8, 9, 10, 11, 0]
    assert _ids(feed, 1, 1) == [1, 2, 3]
    assert _ids(feed, 2, 0) == [4, 5, 6, 7, 8]
    assert _ids(feed, 2, 1) == [9, 10, 11]
    assert _ids(feed, 3, 0) == [0, 1, 2, 3, 4]


# --- resume ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["map24", "iter20"])
def test_resume_at_a_step_boundary(data_file: Path, name: str) -> None:
    ref = f"{data_file}:{name}"
    whole = _feed(ref, (5, 3), seed=6)
    resumed = _feed(ref, (5, 3), seed=6, start_step=10, start_position=3 * 8)
    for k in range(4):  # crosses the epoch end at position 24 (map) / 20 (iterable)
        for p in range(2):
            assert _ids(resumed, 10 + k, p) == _ids(whole, 3 + k, p)


@pytest.mark.parametrize("name", ["map24", "iter20"])
def test_resume_under_another_split(data_file: Path, name: str) -> None:
    ref = f"{data_file}:{name}"
    whole = _feed(ref, (5, 3), seed=6)
    stream = [i for k in range(8) for i in _step(whole, k)]  # positions 0..63
    # Position 20 is inside step 2 of the (5, 3) run: the new split starts mid-batch.
    resumed = _feed(ref, (2, 6), seed=6, start_step=4, start_position=20)
    for k in range(3):
        start = 20 + 8 * k
        assert _ids(resumed, 4 + k, 0) == stream[start : start + 2]
        assert _ids(resumed, 4 + k, 1) == stream[start + 2 : start + 8]
    assert resumed.position(4) == 20
    assert resumed.position(6) == 36


# --- loss -----------------------------------------------------------------------------------


class _FixedLossSource(MLPSource):
    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.tensor(7.0)


def test_user_loss_replaces_the_model_loss(data_file: Path) -> None:
    out, target = torch.zeros(2, 4), torch.zeros(2, dtype=torch.long)
    user = DatasetFeed(
        ref=f"{data_file}:with_loss", source=_FixedLossSource(), shares=Shares(sizes=(2,)), seed=0
    )
    assert user.loss(out, target).item() == 42.0  # sentinel_loss in the data file
    plain = DatasetFeed(
        ref=f"{data_file}:map16", source=_FixedLossSource(), shares=Shares(sizes=(2,)), seed=0
    )
    assert plain.loss(out, target).item() == 7.0  # the source's


def test_default_loss_is_the_model_sources(data_file: Path) -> None:
    feed = _feed(f"{data_file}:map16", (2,))
    out = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    target = torch.tensor([1, 3])
    # MLPSource: cross-entropy; uniform logits over 4 classes give ln 4 per sample.
    assert feed.loss(out, target).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())


def test_load_data_returns_the_pair(data_file: Path) -> None:
    user = load_data(f"{data_file}:with_loss")
    assert len(user.dataset) == 8
    assert user.loss is not None
    assert load_data(f"{data_file}:map16").loss is None


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "words"),
    [
        ("raises", "RuntimeError: disk on fire"),
        ("not_a_dataset", "returned a list"),
        ("not_a_pair", "(input, target) pair"),
        ("triple", "(input, target) pair"),
        ("string_input", "input must be a tensor"),
        ("empty", "empty"),
        ("no_length", "__len__"),
    ],
)
def test_bad_data_is_an_input_error_naming_the_ref(data_file: Path, fn: str, words: str) -> None:
    ref = f"{data_file}:{fn}"
    with pytest.raises(InputError) as err:
        load_data(ref)
    assert ref in str(err.value)
    assert words in str(err.value)


def test_unknown_function_names_file_and_function(data_file: Path) -> None:
    with pytest.raises(InputError) as err:
        load_data(f"{data_file}:nope")
    assert str(data_file) in str(err.value)
    assert "'nope'" in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.py"
    with pytest.raises(InputError) as err:
        load_data(f"{missing}:dataset")
    assert str(missing) in str(err.value)
    assert "not found" in str(err.value)


# --- the example ----------------------------------------------------------------------------


def test_example_dataset_loads() -> None:
    user = load_data(f"{EXAMPLE}:dataset")
    assert user.loss is None
    assert len(user.dataset) == 4096
    feed = _feed(f"{EXAMPLE}:dataset", (5, 3))
    for p, n in enumerate((5, 3)):
        x, y = feed.batch(0, p, "cpu")
        assert x.shape == (n, 16)
        assert y.dtype == torch.long
        assert bool(((y >= 0) & (y < 4)).all())


def test_example_stream_loads() -> None:
    user = load_data(f"{EXAMPLE}:stream")  # writes examples/data/blobs.csv (git-ignored)
    assert isinstance(user.loss, nn.CrossEntropyLoss)
    feed = _feed(f"{EXAMPLE}:stream", (5, 3))
    x, y = feed.batch(1, 1, "cpu")
    assert x.shape == (3, 16)
    assert bool(((y >= 0) & (y < 4)).all())
    # The CSV holds the same samples as the map-style dataset, in its stored order.
    inputs, labels = load_data(f"{EXAMPLE}:dataset").dataset.tensors
    assert torch.equal(y, labels[13:16])
    torch.testing.assert_close(x, inputs[13:16], atol=1e-6, rtol=0)


def test_a_map_style_dataset_loads_only_the_share_a_rank_takes(tmp_path: Path) -> None:
    """Pipeline 1 of a [5, 3] split at step 2 reads 3 samples, not the 13 before them."""
    (tmp_path / "counted.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch.utils.data import Dataset

            READS = []

            class Counted(Dataset):
                def __len__(self):
                    return 16

                def __getitem__(self, i):
                    READS.append(i)
                    return torch.tensor([float(i)]), torch.tensor(i)

            def counted():
                return Counted()
            """
        )
    )
    ref = f"{tmp_path / 'counted.py'}:counted"
    feed = _feed(ref, (5, 3))
    module = sys.modules[type(data_mod.load_data(ref).dataset).__module__]
    module.READS.clear()
    _, y = feed.batch(2, 1, "cpu")
    assert len(module.READS) == 3
    assert sorted(module.READS) == sorted(y.tolist())
