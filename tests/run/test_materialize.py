"""Deferred init: a stage materialised alone equals the same tensors of the whole model."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from hetplan.errors import ModelError
from hetplan.graph import resolve_model
from hetplan.run.setup.materialize import record

SEED = 7


class Tied(nn.Module):
    """Output weight tied to the embedding; a causal-mask buffer made by out-of-place ops."""

    def __init__(self, vocab: int = 50, dim: int = 16, seq: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim), nn.BatchNorm1d(dim))
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.embed.weight
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))
        self.register_buffer("scale", torch.tensor([0.5, 2.0]) * 3)
        nn.init.normal_(self.embed.weight, std=0.02)


class Randoms(nn.Module):
    """Buffers from random factories; ``b.mixed`` is computed from ``a.noise``."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Module(), nn.Module()
        self.a.register_buffer("perm", torch.randperm(10))
        self.a.register_buffer("noise", torch.randn(4, 4).bernoulli_(0.5))
        self.b.register_buffer("mixed", torch.rand_like(self.a.noise) + self.a.noise)
        self.b.register_buffer("ints", torch.randint(3, 9, (4, 4)))
        self.b.register_buffer("dropped", nn.functional.dropout(torch.ones(64), 0.5))
        # No generator argument in any overload: replayed under a seeded default generator.
        native = torch.ops.aten.native_dropout.default(torch.ones(64), 0.5, True)[0]
        self.b.register_buffer("native", native)


def _zoo(name: str, dataset: str | None = None) -> Callable[[], nn.Module]:
    return resolve_model(name, dataset).factory


MODELS = {
    "gpt-tiny": _zoo("gpt-tiny"),
    "bert-tiny": _zoo("bert-tiny"),
    "resnet-tiny": _zoo("resnet-tiny", "cifar10"),
    "mobilenetv2": _zoo("mobilenetv2", "cifar10"),
    "tied": Tied,
    "randoms": Randoms,
}


def _tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return {
        **dict(module.named_parameters(remove_duplicate=False)),
        **dict(module.named_buffers(remove_duplicate=False)),
    }


def _groups(module: nn.Module, parts: int) -> list[list[str]]:
    """Split the top-level children into ``parts`` contiguous groups of tensor FQNs."""
    kids = [n for n, _ in module.named_children()]
    size = math.ceil(len(kids) / parts)
    return [
        [f for f in _tensors(module) if f.split(".")[0] in kids[i : i + size]]
        for i in range(0, len(kids), size)
    ]


@pytest.mark.parametrize("name", list(MODELS))
def test_stage_equals_reference(name: str) -> None:
    factory = MODELS[name]
    reference = _tensors(record(factory).materialize(None, "cpu", SEED))
    assert not any(t.is_meta for t in reference.values())
    parts = 3 if name in {"gpt-tiny", "tied"} else 2
    for group in _groups(record(factory).module, parts):
        deferred = record(factory)
        meta = _tensors(deferred.module)
        ties = {f: [g for g in meta if meta[g] is meta[f]] for f in meta}
        module = deferred.materialize(group, "cpu", SEED)
        got = _tensors(module)
        for fqn, t in got.items():
            if any(g in group for g in ties[fqn]):  # selected, or tied to a selected name
                assert torch.equal(t, reference[fqn]), fqn
                assert type(t) is type(reference[fqn]), fqn
                assert t.requires_grad == reference[fqn].requires_grad, fqn
                assert all(got[g] is t for g in ties[fqn]), f"tie of {fqn} broken"
            else:
                assert t.is_meta, fqn


def test_tie_is_one_parameter() -> None:
    model = record(Tied).materialize(["out.weight"], "cpu", SEED)
    assert isinstance(model, Tied)
    assert model.out.weight is model.embed.weight
    assert not model.out.weight.is_meta
    assert model.body[0].weight.is_meta
    assert model.mask.is_meta
    assert len(list(model.parameters())) == len(list(Tied().parameters()))


def test_buffers_reproduced() -> None:
    model = record(Tied).materialize(None, "cpu", SEED)
    assert torch.equal(model.mask, torch.tril(torch.ones(8, 8)).view(1, 1, 8, 8))
    assert torch.equal(model.scale, torch.tensor([1.5, 6.0]))
    bn = model.body[2]
    assert torch.equal(bn.running_var, torch.ones(16))
    assert bn.num_batches_tracked.item() == 0


def test_seed_changes_values_and_is_deterministic() -> None:
    a = record(Tied).materialize(None, "cpu", 1)
    b = record(Tied).materialize(None, "cpu", 1)
    c = record(Tied).materialize(None, "cpu", 2)
    assert torch.equal(a.body[0].weight, b.body[0].weight)
    assert not torch.equal(a.body[0].weight, c.body[0].weight)


def test_random_ops_replayed() -> None:
    state = torch.get_rng_state()
    model = record(Randoms).materialize(None, "cpu", SEED)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is left alone
    assert sorted(model.a.perm.tolist()) == list(range(10))
    assert set(model.a.noise.unique().tolist()) == {0.0, 1.0}
    assert model.b.ints.min() >= 3 and model.b.ints.max() < 9
    assert set(model.b.dropped.unique().tolist()) == {0.0, 2.0}
    assert set(model.b.native.unique().tolist()) == {0.0, 2.0}


def test_unreplayable_op_names_tensor() -> None:
    outside = torch.ones(3, device="meta")  # made before record(): no op to replay

    def factory() -> nn.Module:
        module = nn.Linear(3, 3)
        module.register_buffer("doubled", outside * 2)
        return module

    deferred = record(factory)
    deferred.materialize(["weight", "bias"], "cpu", SEED)  # outside the failing cone
    with pytest.raises(ModelError, match=r"doubled: .*aten\.mul"):
        deferred.materialize(["doubled"], "cpu", SEED)


def test_distributions() -> None:
    linear = record(lambda: nn.Linear(400, 300)).materialize(None, "cpu", SEED)
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)) on fan_in 400
    assert linear.weight.abs().max() <= bound
    assert linear.weight.abs().max() > 0.9 * bound
    assert linear.bias.abs().max() <= bound

    def normal() -> nn.Module:
        emb = nn.Embedding(1000, 200)
        nn.init.normal_(emb.weight, 0.0, 0.02)
        return emb

    emb = record(normal).materialize(None, "cpu", SEED)
    assert abs(emb.weight.std().item() - 0.02) < 0.002
    assert abs(emb.weight.mean().item()) < 0.001


class _Allocations(TorchDispatchMode):
    """Bytes of every distinct CPU storage an op returns."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and not t.is_meta:
                s = t.untyped_storage()
                self.storages[s.data_ptr()] = s.nbytes()
        return out


def test_stage_allocates_only_its_tensors() -> None:
    factory = MODELS["gpt-tiny"]
    deferred = record(factory)
    stage = [f for f in _tensors(deferred.module) if f.split(".")[0] in {"block1", "block2"}]
    with _Allocations() as seen:
        module = deferred.materialize(stage, "cpu", SEED)
    real = {id(t): t for t in _tensors(module).values() if not t.is_meta}
    held = sum(t.numel() * t.element_size() for t in real.values())
    full = record(factory).materialize(None, "cpu", SEED)
    own = sum(
        t.numel() * t.element_size()
        for n, t in _tensors(full).items()
        if n.split(".")[0] in {"block1", "block2"}
    )
    assert held == own
    assert sum(seen.storages.values()) == own  # no other tensor was ever allocated


def test_item_during_init_raises() -> None:
    def bad() -> nn.Module:
        linear = nn.Linear(4, 4)
        if linear.weight.sum().item() > 0:
            linear.bias.data.zero_()
        return linear

    with pytest.raises(ModelError, match=r"item\(\)"):
        record(bad)


def test_unknown_name_raises() -> None:
    with pytest.raises(ModelError, match="nope"):
        record(Tied).materialize(["nope"], "cpu", SEED)
